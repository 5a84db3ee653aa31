//! Business dates (issue #35): the date whose business a run does, the rule that
//! derives it from a trigger instant, the previous business date a
//! `depends_on_past` run waits for, and the deadline instant of a date. Pure
//! functions of their inputs; dates are `YYYY-MM-DD` on the wire and in the store.
//!
//! Offsets count calendar days. A `calendar:` naming business days is parsed
//! and refused by the validator until calendars are available
//! (`spec::bizdate`), so no date is ever computed on a guessed calendar.

use std::time::Duration;

use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// A flow's business-date settings: `timezone:`, `biz_date:` and `deadline:`.
#[derive(Debug, Clone, PartialEq)]
pub struct BusinessDef {
    /// The flow's timezone: `timezone:`, else its first cron trigger's, else UTC.
    pub timezone: Tz,
    /// How a run's business date follows from its trigger instant.
    pub rule: BizDateRule,
    /// The flow wrote `biz_date:`: its scheduled runs are one per business date.
    pub declared: bool,
    pub deadline: Option<DeadlineDef>,
}

impl Default for BusinessDef {
    fn default() -> Self {
        Self { timezone: Tz::UTC, rule: BizDateRule::default(), declared: false, deadline: None }
    }
}

/// `biz_date: {offset: -1}`: the business date is the trigger's date in the
/// flow's timezone plus `offset` days.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BizDateRule {
    pub offset: i32,
}

impl Default for BizDateRule {
    fn default() -> Self {
        Self { offset: -1 }
    }
}

/// `deadline: {by: "06:00", timezone, days, warn_before}`: the run for date D
/// must be SUCCESS by `by` on D + `days` (default 1) in `timezone`.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadlineDef {
    pub by: NaiveTime,
    pub timezone: Tz,
    pub days: u32,
    pub warn_before: Option<Duration>,
}

/// `YYYY-MM-DD`, strictly (no time, no other separators).
pub fn parse_date(text: &str) -> Result<NaiveDate, String> {
    let well_formed = text.len() == 10 && text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-';
    match NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        Ok(d) if well_formed => Ok(d),
        _ => Err(format!("bad business date `{text}`: write it as YYYY-MM-DD, e.g. `2026-10-08`")),
    }
}

/// The `YYYY-MM-DD` form of a date.
pub fn format_date(d: NaiveDate) -> String {
    d.format("%Y-%m-%d").to_string()
}

/// Adds `n` calendar days (negative: back); `None` past chrono's range.
fn shift(d: NaiveDate, n: i64) -> Option<NaiveDate> {
    if n >= 0 {
        d.checked_add_days(Days::new(n as u64))
    } else {
        d.checked_sub_days(Days::new(n.unsigned_abs()))
    }
}

/// The business date of a run triggered at `at`: its date in the flow's
/// timezone, shifted by the rule's offset.
pub fn biz_date_at(def: &BusinessDef, at: DateTime<Utc>) -> Option<NaiveDate> {
    shift(at.with_timezone(&def.timezone).date_naive(), i64::from(def.rule.offset))
}

/// The business date before `d`, whose run a `depends_on_past` run waits for.
pub fn previous_date(d: NaiveDate) -> Option<NaiveDate> {
    d.pred_opt()
}

/// Why a `depends_on_past` run for the date after `previous` may not start,
/// given the runs of `previous` (id, state name), newest first; `None` once
/// one of them is SUCCESS.
pub fn past_wait(previous: NaiveDate, runs: &[(String, String)]) -> Option<String> {
    if runs.iter().any(|(_, state)| state == "SUCCESS") {
        return None;
    }
    let date = format_date(previous);
    Some(match runs.first() {
        None => format!("depends_on_past: there is no run for {date} yet; it must succeed first"),
        Some((id, state)) => {
            format!("depends_on_past: the run for {date} ({id}) is {state}; it must succeed first")
        }
    })
}

/// The instant the run for `d` must be SUCCESS by. A `by` time a DST change
/// skips is taken an hour later; one it repeats, at its first occurrence.
pub fn deadline_at(deadline: &DeadlineDef, d: NaiveDate) -> Option<DateTime<Utc>> {
    let day = shift(d, i64::from(deadline.days))?;
    let local = day.and_time(deadline.by);
    let zoned = deadline.timezone.from_local_datetime(&local).earliest().or_else(|| {
        deadline.timezone.from_local_datetime(&(local + chrono::Duration::hours(1))).earliest()
    })?;
    Some(zoned.with_timezone(&Utc))
}

/// The business date whose deadline is the first one after `now`: the date
/// `days` before today in the deadline's timezone, or the next one when today's
/// deadline has passed.
pub fn next_deadline(deadline: &DeadlineDef, now: DateTime<Utc>) -> Option<(NaiveDate, DateTime<Utc>)> {
    let today = now.with_timezone(&deadline.timezone).date_naive();
    let mut d = shift(today, -i64::from(deadline.days) - 1)?;
    for _ in 0..4 {
        let at = deadline_at(deadline, d)?;
        if at > now {
            return Some((d, at));
        }
        d = d.succ_opt()?;
    }
    None
}

/// The latest business date whose deadline is at or before `now`.
pub fn last_passed(deadline: &DeadlineDef, now: DateTime<Utc>) -> Option<(NaiveDate, DateTime<Utc>)> {
    let (next, _) = next_deadline(deadline, now)?;
    let d = next.pred_opt()?;
    Some((d, deadline_at(deadline, d)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shanghai() -> BusinessDef {
        BusinessDef { timezone: chrono_tz::Asia::Shanghai, ..BusinessDef::default() }
    }

    fn deadline(by: &str, days: u32) -> DeadlineDef {
        let by = NaiveTime::parse_from_str(by, "%H:%M").expect("time");
        DeadlineDef { by, timezone: chrono_tz::Asia::Shanghai, days, warn_before: None }
    }

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).expect("instant").with_timezone(&Utc)
    }

    #[test]
    fn the_business_date_is_the_day_before_in_the_flow_timezone() {
        // 01:05 in Shanghai on 8 October is 17:05 UTC on the 7th.
        let d = biz_date_at(&shanghai(), utc("2026-10-07T17:05:00Z")).expect("date");
        assert_eq!(format_date(d), "2026-10-07");
        let utc_flow = BusinessDef::default();
        assert_eq!(
            format_date(biz_date_at(&utc_flow, utc("2026-10-07T17:05:00Z")).expect("d")),
            "2026-10-06"
        );
        let same_day = BusinessDef { rule: BizDateRule { offset: 0 }, ..shanghai() };
        assert_eq!(
            format_date(biz_date_at(&same_day, utc("2026-01-01T00:00:00Z")).expect("d")),
            "2026-01-01"
        );
    }

    #[test]
    fn dates_parse_strictly() {
        assert_eq!(parse_date("2026-02-28").map(format_date), Ok("2026-02-28".into()));
        for bad in ["2026-02-30", "2026-2-28", "20260228", "2026-02-28T00:00", "", "２０２６-02-28"] {
            assert!(parse_date(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn deadlines_fall_on_the_following_day_in_their_timezone() {
        let d = parse_date("2026-10-07").expect("date");
        let at = deadline_at(&deadline("06:00", 1), d).expect("deadline");
        assert_eq!(at, utc("2026-10-07T22:00:00Z"));
        let same_day = deadline_at(&deadline("23:30", 0), d).expect("deadline");
        assert_eq!(same_day, utc("2026-10-07T15:30:00Z"));
    }

    #[test]
    fn the_next_deadline_and_the_last_passed_one_bracket_now() {
        let dl = deadline("06:00", 1);
        let (d, at) = next_deadline(&dl, utc("2026-10-07T21:59:00Z")).expect("next");
        assert_eq!((format_date(d), at), ("2026-10-07".into(), utc("2026-10-07T22:00:00Z")));
        let (d, at) = next_deadline(&dl, utc("2026-10-07T22:00:00Z")).expect("next");
        assert_eq!((format_date(d), at), ("2026-10-08".into(), utc("2026-10-08T22:00:00Z")));
        let (d, at) = last_passed(&dl, utc("2026-10-07T22:00:00Z")).expect("last");
        assert_eq!((format_date(d), at), ("2026-10-07".into(), utc("2026-10-07T22:00:00Z")));
    }

    #[test]
    fn a_deadline_in_a_dst_gap_moves_an_hour_later() {
        let paris = DeadlineDef { timezone: chrono_tz::Europe::Paris, ..deadline("02:30", 1) };
        let at = deadline_at(&paris, parse_date("2026-03-28").expect("date")).expect("deadline");
        assert_eq!(at, utc("2026-03-29T01:30:00Z"));
    }
}
