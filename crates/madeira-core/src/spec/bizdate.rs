//! `timezone:`, `biz_date:` and `deadline:` of a flow file (issue #35), checked
//! into a `BusinessDef`. A `calendar:` is kept by name; that the server has it is
//! checked on apply (`spec::calendars::check_calendars`), so no offset is ever
//! counted on a calendar that is not there.

use chrono::NaiveTime;
use chrono_tz::Tz;
use serde::Deserialize;

use crate::bizdate::{BizDateRule, BusinessDef, DeadlineDef};
use crate::model::TriggerDef;

use super::raw::{RawFlow, Span};
use super::report::{At, Report, line_of};
use super::trigger::parse_timezone;

/// `biz_date: {offset, calendar}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBizDate {
    pub offset: Option<Span<i64>>,
    pub calendar: Option<Span<String>>,
}

/// `deadline: {by, timezone, calendar, days, warn_before}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDeadline {
    pub by: Option<Span<String>>,
    pub timezone: Option<Span<String>>,
    pub calendar: Option<Span<String>>,
    pub days: Option<Span<i64>>,
    pub warn_before: Option<Span<String>>,
}

pub(crate) fn business(raw: &RawFlow, triggers: &[TriggerDef], report: &mut Report) -> BusinessDef {
    let cron_tz = triggers.iter().find_map(|t| match t {
        TriggerDef::Cron(c) => c.timezone.parse::<Tz>().ok(),
        _ => None,
    });
    let timezone = match &raw.timezone {
        Some(tz) => timezone(report, At::top(line_of(tz)), &tz.value).unwrap_or(Tz::UTC),
        None => cron_tz.unwrap_or(Tz::UTC),
    };
    let rule = raw.biz_date.as_ref().map(|b| rule(report, b)).unwrap_or_default();
    let deadline = raw.deadline.as_ref().and_then(|d| deadline(report, d, timezone));
    let line = |c: Option<&Span<String>>| c.and_then(line_of);
    let calendar_lines = (
        raw.biz_date.as_ref().and_then(|b| line(b.value.calendar.as_ref()).or_else(|| line_of(b))),
        raw.deadline.as_ref().and_then(|d| line(d.value.calendar.as_ref()).or_else(|| line_of(d))),
    );
    BusinessDef { timezone, rule, declared: raw.biz_date.is_some(), deadline, calendar_lines }
}

fn timezone(report: &mut Report, at: At<'_>, name: &str) -> Option<Tz> {
    parse_timezone(name).map_err(|e| report.push(at, e)).ok()
}

/// A calendar's name as written (checked against the server's on apply).
fn calendar(report: &mut Report, at: At<'_>, raw: &Span<String>) -> Option<String> {
    let name = raw.value.trim();
    if name.is_empty() {
        report.push(at.at(raw), "`calendar:` is empty; name one, e.g. `calendar: cn-workdays`");
        return None;
    }
    Some(name.to_string())
}

fn rule(report: &mut Report, raw: &Span<RawBizDate>) -> BizDateRule {
    let at = At::top(line_of(raw));
    let calendar = raw.value.calendar.as_ref().and_then(|c| calendar(report, at, c));
    let mut rule = BizDateRule { calendar, ..BizDateRule::default() };
    if let Some(offset) = &raw.value.offset {
        match i32::try_from(offset.value).ok().filter(|o| o.abs() <= 366) {
            Some(o) => rule.offset = o,
            None => report.push(
                at.at(offset),
                format!("`biz_date.offset` must be between -366 and 366 days, got {}", offset.value),
            ),
        }
    }
    rule
}

fn deadline(report: &mut Report, raw: &Span<RawDeadline>, flow_tz: Tz) -> Option<DeadlineDef> {
    let at = At::top(line_of(raw));
    let d = &raw.value;
    let cal = d.calendar.as_ref().and_then(|c| calendar(report, at, c));
    let by = match &d.by {
        Some(by) => NaiveTime::parse_from_str(by.value.trim(), "%H:%M")
            .or_else(|_| NaiveTime::parse_from_str(by.value.trim(), "%H:%M:%S"))
            .map_err(|_| {
                report.push(
                    at.at(by),
                    format!("`deadline.by` `{}` is not a time; write it as HH:MM, e.g. `06:00`", by.value),
                )
            })
            .ok(),
        None => {
            report.push(
                at,
                "`deadline` needs `by`, the local time the run must be SUCCESS by, e.g. `by: \"06:00\"`",
            );
            None
        }
    };
    let timezone = match &d.timezone {
        Some(tz) => timezone(report, at.at(tz), &tz.value),
        None => Some(flow_tz),
    };
    let days = match &d.days {
        Some(n) if n.value > 31 => {
            report.push(at.at(n), format!("`deadline.days` must be 0 to 31, got {}", n.value));
            None
        }
        Some(n) => report.limit(at, "deadline.days", n, 0),
        None => Some(1),
    };
    let warn_before = match &d.warn_before {
        Some(w) => Some(super::node::positive_duration(report, at, "deadline.warn_before", w)?),
        None => None,
    };
    Some(DeadlineDef { by: by?, timezone: timezone?, calendar: cal, days: days?, warn_before })
}
