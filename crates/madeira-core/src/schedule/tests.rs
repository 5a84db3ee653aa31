//! Schedule tests over injected time: DST in both directions, misfire policies
//! after an outage, stable jitter, cron keys.

use std::time::Duration;

use chrono::{DateTime, Utc};
use proptest::prelude::*;

use super::*;
use crate::model::{CronTriggerDef, Misfire};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).expect("rfc3339").with_timezone(&Utc)
}

fn fires(expr: &str, tz: &str, from: &str, n: usize) -> Vec<String> {
    next_fires(expr, tz, utc(from), n).expect("fires").iter().map(|t| t.to_rfc3339()).collect()
}

fn trigger(expr: &str, misfire: Misfire) -> CronTriggerDef {
    CronTriggerDef {
        calendar: None,
        expr: expr.into(),
        timezone: "UTC".into(),
        misfire,
        jitter: Duration::ZERO,
        grace: None,
        catchup_window: Duration::from_secs(24 * 3600),
    }
}

#[test]
fn shanghai_has_no_dst() {
    assert_eq!(
        fires("5 1 * * *", "Asia/Shanghai", "2026-03-07T00:00:00Z", 2),
        ["2026-03-08T01:05:00+08:00", "2026-03-09T01:05:00+08:00"]
    );
}

#[test]
fn berlin_spring_forward_fires_once_at_the_next_valid_instant() {
    // 2026-03-29 02:00 -> 03:00 local: 02:30 does not exist.
    assert_eq!(
        fires("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
    );
}

#[test]
fn berlin_fall_back_fires_once() {
    // 2026-10-25 03:00 -> 02:00 local: 02:30 happens twice; fire once.
    let got = fires("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2);
    assert_eq!(got.len(), 2);
    assert!(got[0].starts_with("2026-10-25T02:30:00"), "{got:?}");
    assert_eq!(got[1], "2026-10-26T02:30:00+01:00");
}

#[test]
fn new_york_both_directions() {
    // 2026-03-08 02:00 -> 03:00 (spring), 2026-11-01 02:00 -> 01:00 (fall).
    assert_eq!(
        fires("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 2),
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]
    );
    let fall = fires("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2);
    assert!(fall[0].starts_with("2026-11-01T01:30:00"), "{fall:?}");
    assert_eq!(fall[1], "2026-11-02T01:30:00-05:00");
    let hourly = fires("0 * * * *", "America/New_York", "2026-11-01T04:30:00Z", 3);
    let unique: std::collections::BTreeSet<_> = hourly.iter().collect();
    assert_eq!(unique.len(), 3, "no duplicate instants across the repeated hour: {hourly:?}");
}

#[test]
fn misfire_after_a_three_hour_outage() {
    let last = utc("2026-11-30T09:00:00Z");
    let now = utc("2026-11-30T12:10:00Z");
    assert!(missed_ticks(&trigger("0 * * * *", Misfire::Skip), Some(last), now).is_empty());
    assert_eq!(
        missed_ticks(&trigger("0 * * * *", Misfire::RunOnce), Some(last), now),
        [utc("2026-11-30T12:00:00Z")]
    );
    assert_eq!(
        missed_ticks(&trigger("0 * * * *", Misfire::RunAll), Some(last), now),
        [utc("2026-11-30T10:00:00Z"), utc("2026-11-30T11:00:00Z"), utc("2026-11-30T12:00:00Z")]
    );
    assert!(missed_ticks(&trigger("0 * * * *", Misfire::RunAll), None, now).is_empty());
}

#[test]
fn run_all_is_bounded_by_the_catchup_window() {
    let mut t = trigger("0 * * * *", Misfire::RunAll);
    t.catchup_window = Duration::from_secs(2 * 3600);
    let ticks = missed_ticks(&t, Some(utc("2026-11-29T00:00:00Z")), utc("2026-11-30T12:30:00Z"));
    assert_eq!(ticks, [utc("2026-11-30T11:00:00Z"), utc("2026-11-30T12:00:00Z")]);
}

proptest! {
    #[test]
    fn jitter_is_stable_and_bounded(flow in "[a-z-]{1,20}", idx in 0usize..4, ms in 0i64..4_000_000_000_000, jitter_ms in 1u64..600_000) {
        let tick = DateTime::from_timestamp_millis(ms).expect("time");
        let jitter = Duration::from_millis(jitter_ms);
        let a = jitter_offset(&flow, idx, tick, jitter);
        prop_assert_eq!(a, jitter_offset(&flow, idx, tick, jitter));
        prop_assert!(a < jitter);
    }

    #[test]
    fn next_fires_are_strictly_increasing(minute in 0u32..60, hour in 0u32..24, start in 1_700_000_000i64..1_900_000_000) {
        let expr = format!("{minute} {hour} * * *");
        let from = DateTime::from_timestamp(start, 0).expect("time");
        for tz in ["Europe/Berlin", "America/New_York", "Asia/Shanghai"] {
            let got = next_fires(&expr, tz, from, 4).expect("fires");
            prop_assert_eq!(got.len(), 4);
            prop_assert!(got[0].with_timezone(&Utc) > from);
            for pair in got.windows(2) {
                prop_assert!(pair[0] < pair[1]);
            }
        }
    }
}
