//! Property tests: skip/next/previous never land on a non-business day, offsets
//! invert, and a date outside the data is an error, never a guess.

use chrono::{Days, NaiveDate};
use madeira_calendar::{Calendar, CalendarError, CalendarMode, Calendars, parse_definitions};
use proptest::prelude::*;

use crate::day;

/// The shipped calendars plus a trading calendar built on cn-workdays.
fn calendars() -> Calendars {
    let defs = parse_definitions(
        "name: cn-trading\nbase: cn-workdays\nexclude_weekends: true\nholidays: [2026-12-31]\n",
    )
    .expect("definition parses");
    Calendars::builtin().extend(defs).expect("definition resolves")
}

fn names() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("weekdays"), Just("all_days"), Just("cn-workdays"), Just("cn-trading")]
}

/// A day of 2024-06..2027-06: inside and outside cn-workdays' data.
fn days() -> impl Strategy<Value = NaiveDate> {
    (0u64..1100).prop_map(|n| day("2024-06-01") + Days::new(n))
}

fn get<'a>(calendars: &'a Calendars, name: &str) -> &'a Calendar {
    calendars.get(name).expect("known calendar")
}

proptest! {
    #[test]
    fn adjusted_ticks_are_business_days(name in names(), d in days(), mode in prop_oneof![
        Just(CalendarMode::Skip), Just(CalendarMode::Next), Just(CalendarMode::Previous)]) {
        let calendars = calendars();
        let cal = get(&calendars, name);
        match cal.adjust(d, mode) {
            Ok(Some(moved)) => {
                prop_assert_eq!(cal.is_business_day(moved), Ok(true));
                match mode {
                    CalendarMode::Skip => prop_assert_eq!(moved, d),
                    CalendarMode::Next => prop_assert!(moved >= d),
                    CalendarMode::Previous => prop_assert!(moved <= d),
                }
                // No business day lies strictly between d and where it moved.
                let (lo, hi) = if moved < d { (moved, d) } else { (d, moved) };
                for between in lo.iter_days().skip(1).take_while(|x| *x < hi) {
                    prop_assert_eq!(cal.is_business_day(between), Ok(false));
                }
            }
            Ok(None) => {
                prop_assert_eq!(mode, CalendarMode::Skip);
                prop_assert_eq!(cal.is_business_day(d), Ok(false));
            }
            Err(e) => prop_assert!(out_of_data(&e), "{e}"),
        }
    }

    #[test]
    fn next_and_previous_are_business_days(name in names(), d in days()) {
        let calendars = calendars();
        let cal = get(&calendars, name);
        if let Ok(next) = cal.next_business_day(d) {
            prop_assert!(next > d);
            prop_assert_eq!(cal.is_business_day(next), Ok(true));
        }
        if let Ok(prev) = cal.previous_business_day(d) {
            prop_assert!(prev < d);
            prop_assert_eq!(cal.is_business_day(prev), Ok(true));
        }
    }

    #[test]
    fn offsets_invert_on_business_days(name in names(), d in days(), n in -40i32..40) {
        let calendars = calendars();
        let cal = get(&calendars, name);
        prop_assume!(cal.is_business_day(d) == Ok(true));
        match cal.add_business_days(d, n) {
            Ok(moved) => {
                prop_assert_eq!(cal.is_business_day(moved), Ok(true));
                prop_assert_eq!(cal.add_business_days(moved, -n), Ok(d));
            }
            Err(e) => prop_assert!(out_of_data(&e), "{e}"),
        }
    }

    #[test]
    fn out_of_data_is_an_error_never_a_guess(name in names(), d in days()) {
        let calendars = calendars();
        let cal = get(&calendars, name);
        let outside = cal.last_known_day().is_some_and(|last| d > last)
            || cal.first_known_day().is_some_and(|first| d < first);
        let answer = cal.is_business_day(d);
        prop_assert_eq!(outside, answer.is_err(), "{:?}", answer);
        if outside {
            prop_assert!(cal.next_business_day(d).is_err());
            prop_assert!(cal.previous_business_day(d).is_err());
            prop_assert!(cal.adjust(d, CalendarMode::Skip).is_err());
        }
    }
}

fn out_of_data(e: &CalendarError) -> bool {
    matches!(e, CalendarError::OutOfData { .. } | CalendarError::BeforeData { .. })
}
