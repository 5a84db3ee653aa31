//! Cron ticks on cn-workdays: skip, next and previous around the 2026 Spring
//! Festival, days out of data, and properties over random instants.

use std::time::Duration;

use chrono::{DateTime, Datelike, Utc};
use madeira_calendar::{CalendarMode, Calendars};
use proptest::prelude::*;

use super::*;
use crate::model::{CronTriggerDef, Misfire, TriggerCalendar};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).expect("rfc3339").with_timezone(&Utc)
}

fn on(expr: &str, calendar: &str, mode: CalendarMode) -> CronTriggerDef {
    CronTriggerDef {
        expr: expr.into(),
        timezone: "Asia/Shanghai".into(),
        misfire: Misfire::RunOnce,
        jitter: Duration::ZERO,
        grace: None,
        catchup_window: Duration::from_secs(24 * 3600),
        calendar: Some(TriggerCalendar { name: calendar.into(), mode, line: None }),
    }
}

fn fires(trigger: &CronTriggerDef, from: &str, n: usize) -> Vec<String> {
    let calendars = Calendars::builtin();
    plan_many(trigger, &calendars, utc(from), n)
        .iter()
        .filter_map(|p| match p {
            Planned::Fire { at, .. } => Some(at.with_timezone(&chrono_tz::Asia::Shanghai).to_rfc3339()),
            _ => None,
        })
        .collect()
}

#[test]
fn skip_fires_on_the_make_up_saturday_and_not_in_the_holiday() {
    let t = on("5 1 * * *", "cn-workdays", CalendarMode::Skip);
    // From Friday 2026-02-13: make-up Saturday 02-14, then nothing until Tuesday 02-24.
    assert_eq!(
        fires(&t, "2026-02-12T12:00:00Z", 3),
        ["2026-02-13T01:05:00+08:00", "2026-02-14T01:05:00+08:00", "2026-02-24T01:05:00+08:00"]
    );
    let planned = plan_many(&t, &Calendars::builtin(), utc("2026-02-14T00:00:00Z"), 1);
    let skipped: Vec<String> = planned
        .iter()
        .filter_map(|p| match p {
            Planned::Skipped { day, .. } => Some(day.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(skipped.len(), 9, "one record per day off 02-15..02-23: {skipped:?}");
    assert_eq!(skipped[8], "2026-02-23");
}

#[test]
fn next_and_previous_move_once_and_merge_onto_one_instant() {
    // The 1st of May 2026 is a holiday (Friday).
    let next = on("0 9 1 * *", "cn-workdays", CalendarMode::Next);
    assert_eq!(fires(&next, "2026-04-02T00:00:00Z", 1), ["2026-05-06T09:00:00+08:00"]);
    let previous = on("0 9 1 * *", "cn-workdays", CalendarMode::Previous);
    assert_eq!(fires(&previous, "2026-04-02T00:00:00Z", 1), ["2026-04-30T09:00:00+08:00"]);
    // Daily with `next`: the nine days off of the Spring Festival make one run on 02-24.
    let daily = on("5 1 * * *", "cn-workdays", CalendarMode::Next);
    assert_eq!(
        fires(&daily, "2026-02-13T12:00:00Z", 2),
        ["2026-02-14T01:05:00+08:00", "2026-02-24T01:05:00+08:00"]
    );
    // Started on a holiday Sunday after the Saturday's tick: that tick moves to Monday.
    let weekly = on("5 1 * * 6", "cn-workdays", CalendarMode::Next);
    assert_eq!(fires(&weekly, "2026-04-05T03:00:00Z", 1), ["2026-04-07T01:05:00+08:00"]);
}

#[test]
fn out_of_data_blocks_and_never_fires() {
    let t = on("5 1 * * *", "cn-workdays", CalendarMode::Skip);
    let planned = plan_many(&t, &Calendars::builtin(), utc("2026-12-30T00:00:00Z"), 5);
    assert!(
        matches!(planned.last(), Some(Planned::Blocked { day, .. }) if day.year() == 2027),
        "{planned:?}"
    );
    assert_eq!(planned.iter().filter(|p| matches!(p, Planned::Fire { .. })).count(), 1);
    let next = on("5 1 * * *", "cn-workdays", CalendarMode::Next);
    assert_eq!(next_fire(&next, &Calendars::builtin(), utc("2026-12-31T00:00:00Z")), None);
    let unknown = on("5 1 * * *", "cn-workday", CalendarMode::Skip);
    let planned = plan_after(&unknown, &Calendars::builtin(), utc("2026-06-01T00:00:00Z"));
    assert!(matches!(planned, Some(Planned::Blocked { error, .. }) if error.contains("cn-workday")));
}

#[test]
fn missed_ticks_follow_the_calendar() {
    let calendars = Calendars::builtin();
    let ticks = vec![utc("2026-02-13T17:05:00Z"), utc("2026-02-14T17:05:00Z"), utc("2026-02-22T17:05:00Z")];
    // 02-14 01:05 (make-up Saturday), 02-15 01:05 (holiday), 02-23 01:05 (holiday).
    let skip = on("5 1 * * *", "cn-workdays", CalendarMode::Skip);
    let (fire, blocked) = on_calendar(&skip, &calendars, ticks.clone(), utc("2026-02-23T12:00:00Z"));
    assert_eq!(fire, [utc("2026-02-13T17:05:00Z")]);
    assert!(blocked.is_empty());
    let previous = on("5 1 * * *", "cn-workdays", CalendarMode::Previous);
    let (fire, _) = on_calendar(&previous, &calendars, ticks, utc("2026-02-23T12:00:00Z"));
    assert_eq!(fire, [utc("2026-02-13T17:05:00Z")], "all three land on 02-14 01:05 once");
}

proptest! {
    #[test]
    fn planned_fires_are_on_business_days_and_increase(
        start in 1_735_689_600i64..1_798_000_000,
        minute in 0u32..60, hour in 0u32..24,
        mode in prop_oneof![Just(CalendarMode::Skip), Just(CalendarMode::Next), Just(CalendarMode::Previous)],
    ) {
        let calendars = Calendars::builtin();
        let cn = calendars.get("cn-workdays").expect("shipped");
        let t = on(&format!("{minute} {hour} * * *"), "cn-workdays", mode);
        let from = DateTime::from_timestamp(start, 0).expect("time");
        let mut last = from;
        for planned in plan_many(&t, &calendars, from, 6) {
            match planned {
                Planned::Fire { at, .. } => {
                    prop_assert!(at > last);
                    let day = at.with_timezone(&chrono_tz::Asia::Shanghai).date_naive();
                    prop_assert_eq!(cn.is_business_day(day), Ok(true));
                    last = at;
                }
                Planned::Skipped { day, .. } => prop_assert_eq!(cn.is_business_day(day), Ok(false)),
                Planned::Blocked { day, .. } => prop_assert!(cn.is_business_day(day).is_err() || mode != CalendarMode::Skip),
            }
        }
    }
}
