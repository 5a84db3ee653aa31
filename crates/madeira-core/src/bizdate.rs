//! Business dates (issue #35): the date whose business a run does, the rule that
//! derives it from a trigger instant, the previous business date a
//! `depends_on_past` run waits for, and the deadline instant of a date. Pure
//! functions of their inputs; dates are `YYYY-MM-DD` on the wire and in the store.
//!
//! Offsets count calendar days, or business days of the rule's `calendar:`
//! (`madeira_calendar`); a date past a calendar's data is an error, never a
//! guess. With a calendar, only its business days are business dates: the
//! previous date of a `depends_on_past` run is the previous business day, and a
//! deadline falls `days` business days after its date.

use std::time::Duration;

use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use madeira_calendar::Calendar;

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
    /// Lines of `biz_date.calendar` and `deadline.calendar` in the flow file
    /// (errors about those names point there).
    pub calendar_lines: (Option<usize>, Option<usize>),
}

impl Default for BusinessDef {
    fn default() -> Self {
        Self {
            timezone: Tz::UTC,
            rule: BizDateRule::default(),
            declared: false,
            deadline: None,
            calendar_lines: (None, None),
        }
    }
}

/// `biz_date: {offset: -1, calendar: cn-workdays}`: the business date is the
/// trigger's date in the flow's timezone plus `offset` days, business days of
/// `calendar` when it names one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BizDateRule {
    pub offset: i32,
    pub calendar: Option<String>,
}

impl Default for BizDateRule {
    fn default() -> Self {
        Self { offset: -1, calendar: None }
    }
}

/// `deadline: {by: "06:00", timezone, days, warn_before}`: the run for date D
/// must be SUCCESS by `by` on D + `days` (default 1) in `timezone`.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadlineDef {
    pub by: NaiveTime,
    pub timezone: Tz,
    /// `days` counts business days of this calendar when set.
    pub calendar: Option<String>,
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
/// timezone, shifted by the rule's offset (business days of `cal`, the rule's
/// calendar, when given).
pub fn biz_date_at(
    def: &BusinessDef,
    at: DateTime<Utc>,
    cal: Option<&Calendar>,
) -> Result<NaiveDate, String> {
    let local = at.with_timezone(&def.timezone).date_naive();
    match cal {
        Some(cal) => cal.add_business_days(local, def.rule.offset).map_err(|e| e.to_string()),
        None => shift(local, i64::from(def.rule.offset))
            .ok_or_else(|| format!("no date {} days from {local}", def.rule.offset)),
    }
}

/// The business date before `d` (the previous business day of `cal`), whose
/// run a `depends_on_past` run waits for.
pub fn previous_date(d: NaiveDate, cal: Option<&Calendar>) -> Result<NaiveDate, String> {
    match cal {
        Some(cal) => cal.previous_business_day(d).map_err(|e| e.to_string()),
        None => d.pred_opt().ok_or_else(|| format!("no date before {d}")),
    }
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

/// The instant the run for `d` must be SUCCESS by: `by` on `days` days after
/// `d` (business days of `cal`). A `by` time a DST change skips is taken an
/// hour later; one it repeats, at its first occurrence.
pub fn deadline_at(deadline: &DeadlineDef, d: NaiveDate, cal: Option<&Calendar>) -> Option<DateTime<Utc>> {
    let days = i32::try_from(deadline.days).ok()?;
    let day = match cal {
        Some(cal) if days > 0 => cal.add_business_days(d, days).ok()?,
        _ => shift(d, i64::from(deadline.days))?,
    };
    let local = day.and_time(deadline.by);
    let zoned = deadline.timezone.from_local_datetime(&local).earliest().or_else(|| {
        deadline.timezone.from_local_datetime(&(local + chrono::Duration::hours(1))).earliest()
    })?;
    Some(zoned.with_timezone(&Utc))
}

/// Business dates around `now` with their deadlines, oldest first: every date
/// whose deadline may be the last passed or the next (a calendar's off days,
/// and days out of its data, are not business dates).
fn around(
    deadline: &DeadlineDef,
    now: DateTime<Utc>,
    cal: Option<&Calendar>,
) -> Vec<(NaiveDate, DateTime<Utc>)> {
    let today = now.with_timezone(&deadline.timezone).date_naive();
    // Business days: `days` of them can span twice as many calendar days, plus a
    // week's holiday.
    let back = 2 * i64::from(deadline.days) + 16;
    let Some(first) = shift(today, -back) else { return Vec::new() };
    first
        .iter_days()
        .take_while(|d| *d <= today)
        .filter(|d| cal.is_none_or(|c| c.is_business_day(*d).unwrap_or(false)))
        .filter_map(|d| Some((d, deadline_at(deadline, d, cal)?)))
        .collect()
}

/// The business date whose deadline is the first one after `now`.
pub fn next_deadline(
    deadline: &DeadlineDef,
    now: DateTime<Utc>,
    cal: Option<&Calendar>,
) -> Option<(NaiveDate, DateTime<Utc>)> {
    let dates = around(deadline, now, cal);
    if let Some(next) = dates.iter().find(|(_, at)| *at > now) {
        return Some(*next);
    }
    // Today's deadline has passed: the next business day's.
    let today = now.with_timezone(&deadline.timezone).date_naive();
    let next = match cal {
        Some(cal) => cal.next_business_day(today).ok()?,
        None => today.succ_opt()?,
    };
    Some((next, deadline_at(deadline, next, cal)?))
}

/// The latest business date whose deadline is at or before `now`.
pub fn last_passed(
    deadline: &DeadlineDef,
    now: DateTime<Utc>,
    cal: Option<&Calendar>,
) -> Option<(NaiveDate, DateTime<Utc>)> {
    around(deadline, now, cal).into_iter().filter(|(_, at)| *at <= now).max_by_key(|(_, at)| *at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shanghai() -> BusinessDef {
        BusinessDef { timezone: chrono_tz::Asia::Shanghai, ..BusinessDef::default() }
    }

    fn deadline(by: &str, days: u32) -> DeadlineDef {
        let by = NaiveTime::parse_from_str(by, "%H:%M").expect("time");
        DeadlineDef { by, timezone: chrono_tz::Asia::Shanghai, calendar: None, days, warn_before: None }
    }

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).expect("instant").with_timezone(&Utc)
    }

    #[test]
    fn the_business_date_is_the_day_before_in_the_flow_timezone() {
        // 01:05 in Shanghai on 8 October is 17:05 UTC on the 7th.
        let d = biz_date_at(&shanghai(), utc("2026-10-07T17:05:00Z"), None).expect("date");
        assert_eq!(format_date(d), "2026-10-07");
        let utc_flow = BusinessDef::default();
        assert_eq!(
            format_date(biz_date_at(&utc_flow, utc("2026-10-07T17:05:00Z"), None).expect("d")),
            "2026-10-06"
        );
        let same_day = BusinessDef { rule: BizDateRule { offset: 0, calendar: None }, ..shanghai() };
        assert_eq!(
            format_date(biz_date_at(&same_day, utc("2026-01-01T00:00:00Z"), None).expect("d")),
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
        let at = deadline_at(&deadline("06:00", 1), d, None).expect("deadline");
        assert_eq!(at, utc("2026-10-07T22:00:00Z"));
        let same_day = deadline_at(&deadline("23:30", 0), d, None).expect("deadline");
        assert_eq!(same_day, utc("2026-10-07T15:30:00Z"));
    }

    #[test]
    fn the_next_deadline_and_the_last_passed_one_bracket_now() {
        let dl = deadline("06:00", 1);
        let (d, at) = next_deadline(&dl, utc("2026-10-07T21:59:00Z"), None).expect("next");
        assert_eq!((format_date(d), at), ("2026-10-07".into(), utc("2026-10-07T22:00:00Z")));
        let (d, at) = next_deadline(&dl, utc("2026-10-07T22:00:00Z"), None).expect("next");
        assert_eq!((format_date(d), at), ("2026-10-08".into(), utc("2026-10-08T22:00:00Z")));
        let (d, at) = last_passed(&dl, utc("2026-10-07T22:00:00Z"), None).expect("last");
        assert_eq!((format_date(d), at), ("2026-10-07".into(), utc("2026-10-07T22:00:00Z")));
    }

    #[test]
    fn a_deadline_in_a_dst_gap_moves_an_hour_later() {
        let paris = DeadlineDef { timezone: chrono_tz::Europe::Paris, ..deadline("02:30", 1) };
        let at = deadline_at(&paris, parse_date("2026-03-28").expect("date"), None).expect("deadline");
        assert_eq!(at, utc("2026-03-29T01:30:00Z"));
    }

    /// What a finance user on `cn-workdays` sees: the settlement ticking at 01:05
    /// on the Monday after the 2026 Spring Festival week settles the last
    /// business day before it (Saturday 14 February, a make-up workday), the run
    /// after a holiday waits for that date, and its 06:00 deadline is on the next
    /// business day.
    #[test]
    fn on_a_business_calendar_dates_skip_holidays_and_keep_make_up_days() {
        let cals = madeira_calendar::Calendars::builtin();
        let cn = cals.get("cn-workdays").expect("shipped");
        let flow = BusinessDef {
            rule: BizDateRule { offset: -1, calendar: Some("cn-workdays".into()) },
            ..shanghai()
        };
        // 01:05 Shanghai on Tuesday 2026-02-24 (the first workday after the holiday).
        let d = biz_date_at(&flow, utc("2026-02-23T17:05:00Z"), Some(cn)).expect("date");
        assert_eq!(format_date(d), "2026-02-14", "the make-up Saturday before the holiday");
        let tuesday = parse_date("2026-02-24").expect("date");
        assert_eq!(format_date(previous_date(tuesday, Some(cn)).expect("previous")), "2026-02-14");
        assert_eq!(format_date(previous_date(tuesday, None).expect("previous")), "2026-02-23");
        let dl = DeadlineDef { calendar: Some("cn-workdays".into()), ..deadline("06:00", 1) };
        let at = deadline_at(&dl, parse_date("2026-02-14").expect("date"), Some(cn)).expect("deadline");
        assert_eq!(at, utc("2026-02-23T22:00:00Z"), "06:00 on the next business day, Tuesday the 24th");
        let (date, _) = last_passed(&dl, utc("2026-02-23T22:00:01Z"), Some(cn)).expect("last");
        assert_eq!(format_date(date), "2026-02-14");
        let (date, at) = next_deadline(&dl, utc("2026-02-23T22:00:01Z"), Some(cn)).expect("next");
        assert_eq!((format_date(date), at), ("2026-02-24".into(), utc("2026-02-24T22:00:00Z")));
        // Out of the calendar's data: an error, not a guess.
        assert!(biz_date_at(&flow, utc("2031-06-01T00:00:00Z"), Some(cn)).is_err());
    }
}
