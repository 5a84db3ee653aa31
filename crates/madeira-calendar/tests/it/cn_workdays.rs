//! cn-workdays against the State Council notices, every day of 2025 and 2026.

use chrono::{Datelike, NaiveDate, Weekday};
use madeira_calendar::{CalendarError, Calendars};

use crate::day;

/// Every day off listed by the notices (weekend days inside a holiday included),
/// written out day by day independently of the shipped YAML's ranges.
const HOLIDAYS: &[&str] = &[
    // 2025, 国办发明电〔2024〕12号
    "2025-01-01",
    "2025-01-28",
    "2025-01-29",
    "2025-01-30",
    "2025-01-31",
    "2025-02-01",
    "2025-02-02",
    "2025-02-03",
    "2025-02-04",
    "2025-04-04",
    "2025-04-05",
    "2025-04-06",
    "2025-05-01",
    "2025-05-02",
    "2025-05-03",
    "2025-05-04",
    "2025-05-05",
    "2025-05-31",
    "2025-06-01",
    "2025-06-02",
    "2025-10-01",
    "2025-10-02",
    "2025-10-03",
    "2025-10-04",
    "2025-10-05",
    "2025-10-06",
    "2025-10-07",
    "2025-10-08",
    // 2026, notice of 2025-11-04
    "2026-01-01",
    "2026-01-02",
    "2026-01-03",
    "2026-02-15",
    "2026-02-16",
    "2026-02-17",
    "2026-02-18",
    "2026-02-19",
    "2026-02-20",
    "2026-02-21",
    "2026-02-22",
    "2026-02-23",
    "2026-04-04",
    "2026-04-05",
    "2026-04-06",
    "2026-05-01",
    "2026-05-02",
    "2026-05-03",
    "2026-05-04",
    "2026-05-05",
    "2026-06-19",
    "2026-06-20",
    "2026-06-21",
    "2026-09-25",
    "2026-09-26",
    "2026-09-27",
    "2026-10-01",
    "2026-10-02",
    "2026-10-03",
    "2026-10-04",
    "2026-10-05",
    "2026-10-06",
    "2026-10-07",
];

/// The 调休 make-up workdays (all on a Saturday or Sunday).
const MAKE_UP: &[&str] = &[
    "2025-01-26",
    "2025-02-08",
    "2025-04-27",
    "2025-09-28",
    "2025-10-11",
    "2026-01-04",
    "2026-02-14",
    "2026-02-28",
    "2026-05-09",
    "2026-09-20",
    "2026-10-10",
];

fn weekend(d: NaiveDate) -> bool {
    matches!(d.weekday(), Weekday::Sat | Weekday::Sun)
}

#[test]
fn every_day_of_2025_and_2026_matches_the_notices() {
    let calendars = Calendars::builtin();
    let cn = calendars.get("cn-workdays").expect("cn-workdays ships");
    let holidays: Vec<NaiveDate> = HOLIDAYS.iter().map(|d| day(d)).collect();
    let make_up: Vec<NaiveDate> = MAKE_UP.iter().map(|d| day(d)).collect();
    let mut checked = 0;
    for d in day("2025-01-01").iter_days().take_while(|d| *d <= day("2026-12-31")) {
        let expected = if holidays.contains(&d) {
            false
        } else if make_up.contains(&d) {
            true
        } else {
            !weekend(d)
        };
        assert_eq!(cn.is_business_day(d), Ok(expected), "{d} ({})", d.weekday());
        checked += 1;
    }
    assert_eq!(checked, 730);
}

#[test]
fn every_holiday_is_off_and_every_make_up_weekend_day_is_a_workday() {
    let calendars = Calendars::builtin();
    let cn = calendars.get("cn-workdays").expect("cn-workdays ships");
    for d in HOLIDAYS {
        assert_eq!(cn.is_business_day(day(d)), Ok(false), "holiday {d}");
    }
    for d in MAKE_UP {
        assert!(weekend(day(d)), "make-up day {d} is a weekend day in the notices");
        assert_eq!(cn.is_business_day(day(d)), Ok(true), "make-up day {d}");
    }
}

#[test]
fn year_summaries_count_the_statutory_days() {
    let calendars = Calendars::builtin();
    let cn = calendars.get("cn-workdays").expect("cn-workdays ships");
    let y2026 = cn.year_summary(2026).expect("2026 known");
    assert_eq!(y2026.make_up_days.len(), 6);
    assert!(y2026.make_up_days.contains(&day("2026-02-14")));
    assert!(y2026.off_days.contains(&day("2026-02-23")));
    // 261 weekdays in 2026, minus 19 weekday holidays, plus 6 make-up days.
    assert_eq!(y2026.off_days.len(), 19);
    assert_eq!(y2026.business_days, 261 - 19 + 6);
    let y2025 = cn.year_summary(2025).expect("2025 known");
    assert_eq!(y2025.make_up_days.len(), 5);
    assert_eq!(y2025.off_days.len(), 18);
    assert_eq!(y2025.business_days, 261 - 18 + 5);
}

#[test]
fn the_data_range_is_explicit() {
    let calendars = Calendars::builtin();
    let cn = calendars.get("cn-workdays").expect("cn-workdays ships");
    assert_eq!(cn.first_known_day(), Some(day("2025-01-01")));
    assert_eq!(cn.last_known_day(), Some(day("2026-12-31")));
    let err = cn.is_business_day(day("2027-01-04")).expect_err("2027 is not known");
    assert_eq!(
        err,
        CalendarError::OutOfData {
            calendar: "cn-workdays".into(),
            date: day("2027-01-04"),
            last_known: day("2026-12-31"),
        }
    );
    assert!(matches!(cn.is_business_day(day("2024-12-31")), Err(CalendarError::BeforeData { .. })));
    // The last business day of 2026 is known; the one after it is not guessed.
    assert_eq!(cn.next_business_day(day("2026-12-30")), Ok(day("2026-12-31")));
    assert!(matches!(cn.next_business_day(day("2026-12-31")), Err(CalendarError::OutOfData { .. })));
}

#[test]
fn arithmetic_across_the_spring_festival() {
    let calendars = Calendars::builtin();
    let cn = calendars.get("cn-workdays").expect("cn-workdays ships");
    // Friday 2026-02-13, make-up Saturday 02-14, holiday 02-15..02-23, Tuesday 02-24.
    assert_eq!(cn.next_business_day(day("2026-02-13")), Ok(day("2026-02-14")));
    assert_eq!(cn.next_business_day(day("2026-02-14")), Ok(day("2026-02-24")));
    assert_eq!(cn.previous_business_day(day("2026-02-24")), Ok(day("2026-02-14")));
    assert_eq!(cn.add_business_days(day("2026-02-24"), -2), Ok(day("2026-02-13")));
    assert_eq!(cn.add_business_days(day("2026-02-16"), 1), Ok(day("2026-02-24")));
    assert!(matches!(cn.add_business_days(day("2026-02-16"), 0), Err(CalendarError::NotBusinessDay { .. })));
    assert_eq!(cn.last_business_day_of_month(day("2026-09-10")), Ok(day("2026-09-30")));
    assert_eq!(cn.last_business_day_of_month(day("2026-01-10")), Ok(day("2026-01-30")));
    assert_eq!(cn.last_business_day_of_month(day("2026-02-03")), Ok(day("2026-02-28")));
}
