//! Triggers: cron (expression, IANA timezone, misfire policy, jitter, grace, catch-up
//! window, business-day calendar), event, or message (`spec::message`). Cron expressions are checked with croner, timezones with chrono-tz.

use std::str::FromStr;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use chrono_tz::{TZ_VARIANTS, Tz};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use madeira_calendar::CalendarMode;

use crate::model::{CronTriggerDef, Misfire, OnPaused, TriggerCalendar, TriggerDef};

use super::raw::{RawTrigger, Span};
use super::report::{At, Report, did_you_mean, line_of, one_of};

/// Events kept per event trigger of a paused flow when `max_queued` is not given.
pub const DEFAULT_MAX_QUEUED: u32 = 1000;
const MAX_MAX_QUEUED: i64 = 100_000;

/// How far back `misfire: run_all` catches up when `catchup_window` is not given.
pub(crate) const DEFAULT_CATCHUP_WINDOW: Duration = Duration::from_secs(24 * 3600);

const MISFIRES: &[&str] = &["skip", "run_once", "run_all"];
const ALIASES: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Parses a cron expression: 5 fields, 6 with leading seconds, or an alias
/// (`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`).
/// Day of month and day of week combine as in cronie: either matches when both
/// are restricted, both must when one starts with `*` (`0 0 */2 * 1` is odd days
/// that are Mondays; `0 0 1,15 * 1` is the 1st, the 15th and every Monday).
pub fn parse_cron(expr: &str) -> Result<Cron, String> {
    let trimmed = expr.trim();
    let pattern = if trimmed.starts_with('@') {
        ALIASES
            .iter()
            .find(|(alias, _)| alias.eq_ignore_ascii_case(trimmed))
            .map(|(_, pattern)| *pattern)
            .ok_or_else(|| {
                let names: Vec<&str> = ALIASES.iter().map(|(a, _)| *a).collect();
                let hint = did_you_mean(trimmed, names.iter().copied());
                format!("unknown cron alias `{trimmed}`{hint}; use {}", one_of(&names))
            })?
    } else {
        trimmed
    };
    let fields = pattern.split_whitespace().count();
    if fields != 5 && fields != 6 {
        return Err(format!(
            "bad cron `{expr}`: {fields} fields; write 5 (`min hour day month weekday`, \
             e.g. `5 1 * * *`) or 6 with seconds first"
        ));
    }
    // Day of month and day of week: cronie (and Vixie cron) OR them only when
    // neither field starts with `*`; when one does (`*`, `*/2`) both must match.
    let parts: Vec<&str> = pattern.split_whitespace().collect();
    let starred = |f: &str| f.starts_with('*') || f.starts_with('?');
    let and = starred(parts[fields - 3]) || starred(parts[fields - 1]);
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .dom_and_dow(and)
        .build()
        .parse(pattern)
        .map_err(|e| match out_of_range(&parts) {
            Some(field) => format!("bad cron `{expr}`: {field}"),
            None => format!(
                "bad cron `{expr}`: {e}; fields are minute 0-59, hour 0-23, day 1-31, \
                 month 1-12, weekday 0-7 (6 fields: seconds 0-59 first)"
            ),
        })
}

/// Names the first field holding a number outside its range (`hour 25 out of
/// range 0–23`), so a bad expression points at the field to fix.
fn out_of_range(parts: &[&str]) -> Option<String> {
    const FIELDS: [(&str, u32, u32); 6] = [
        ("second", 0, 59),
        ("minute", 0, 59),
        ("hour", 0, 23),
        ("day of month", 1, 31),
        ("month", 1, 12),
        ("weekday", 0, 7),
    ];
    let fields = if parts.len() == 6 { &FIELDS[..] } else { &FIELDS[1..] };
    parts.iter().zip(fields).find_map(|(part, &(name, lo, hi))| {
        // In each list item only the range before a `/step` or `#nth` holds values.
        part.split(',')
            .flat_map(|item| item.split(['/', '#']).next().unwrap_or_default().split('-'))
            .filter_map(|n| n.parse::<u32>().ok())
            .find(|n| !(lo..=hi).contains(n))
            .map(|n| format!("{name} {n} out of range {lo}–{hi} (field `{part}`)"))
    })
}

/// Rejects an expression that parses but names no real date (`0 0 30 2 *`); the
/// search starts at a fixed instant, so validation does not depend on the clock.
fn fires(cron: &Cron, expr: &str) -> Result<(), String> {
    let start = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).single();
    match start.map(|s| cron.find_next_occurrence(&s, false)) {
        Some(Err(_)) => {
            Err(format!("cron `{expr}` never fires (no such date, e.g. 30 February); check day and month"))
        }
        _ => Ok(()),
    }
}

/// Looks up an IANA timezone name, suggesting the closest one when unknown.
pub fn parse_timezone(name: &str) -> Result<Tz, String> {
    if let Ok(tz) = Tz::from_str(name) {
        return Ok(tz);
    }
    let names = TZ_VARIANTS.iter().map(|tz| tz.name());
    let exact = TZ_VARIANTS.iter().find(|tz| tz.name().eq_ignore_ascii_case(name));
    let hint = match exact {
        Some(tz) => format!("; did you mean `{}`?", tz.name()),
        None => did_you_mean(name, names),
    };
    Err(format!("unknown timezone `{name}`{hint}; use an IANA name such as `Asia/Shanghai` or `UTC`"))
}

pub(crate) fn trigger(report: &mut Report, raw: &Span<RawTrigger>) -> Option<TriggerDef> {
    let at = At::top(None).at(raw);
    let t = &raw.value;
    if let Some(flow) = &t.flow_succeeded {
        return super::after::flow_succeeded(report, at, t, flow);
    }
    if t.event.is_none() {
        let event_only: Vec<&str> =
            [t.on_paused.as_ref().map(|_| "on_paused"), t.max_queued.as_ref().map(|_| "max_queued")]
                .into_iter()
                .flatten()
                .collect();
        if !event_only.is_empty() {
            let fields = one_of(&event_only).replace(" or ", ", ");
            let hint = if t.message.is_some() {
                " (a message trigger sets `on_paused` inside `message:`)"
            } else {
                ""
            };
            let verb = if event_only.len() == 1 { "applies" } else { "apply" };
            report.push(at, format!("{fields} only {verb} to `event` triggers{hint}"));
        }
    }
    if let Some(message) = &t.message {
        if t.cron.is_some() || t.event.is_some() {
            report.push(
                at.at(message),
                "a trigger has one of `cron`, `event` or `message`; split it into several triggers",
            );
            return None;
        }
        return super::message::message_trigger(report, at, message)
            .map(|m| TriggerDef::Message(Box::new(m)));
    }
    match (&t.cron, &t.event) {
        (Some(_), Some(event)) => {
            report.push(
                at.at(event),
                "a trigger has either `cron` or `event`, not both; split it into two triggers",
            );
            None
        }
        (None, None) => {
            report.push(at, "a trigger needs `cron` (e.g. `cron: \"5 1 * * *\"`), `event` (e.g. `event: payment.batch_closed`), `message` (e.g. `message: {source: payments, queue: pay.succeeded}`) or `flow_succeeded` (e.g. `flow_succeeded: payments-pull`)");
            None
        }
        (None, Some(event)) => event_trigger(report, at, t, event),
        (Some(cron), None) => cron_trigger(report, at, t, cron).map(TriggerDef::Cron),
    }
}

fn event_trigger(
    report: &mut Report,
    at: At<'_>,
    t: &RawTrigger,
    event: &Span<String>,
) -> Option<TriggerDef> {
    let cron_only: Vec<&str> = [
        t.timezone.as_ref().map(|_| "timezone"),
        t.misfire.as_ref().map(|_| "misfire"),
        t.jitter.as_ref().map(|_| "jitter"),
        t.grace.as_ref().map(|_| "grace"),
        t.catchup_window.as_ref().map(|_| "catchup_window"),
        t.calendar.as_ref().map(|_| "calendar"),
        t.calendar_mode.as_ref().map(|_| "calendar_mode"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !cron_only.is_empty() {
        let fields = one_of(&cron_only).replace(" or ", ", ");
        report.push(at, format!("{fields} only apply to `cron` triggers, not to `event`"));
    }
    let name = event.value.trim();
    if name.is_empty() {
        report.push(at.at(event), "`event` is empty; name the event type, e.g. `payment.batch_closed`");
        return None;
    }
    let on_paused = match t.on_paused.as_ref().map(|p| (p, p.value.trim())) {
        None | Some((_, "queue")) => Some(OnPaused::Queue),
        Some((_, "drop")) => Some(OnPaused::Drop),
        Some((span, other)) => {
            let names = super::message::ON_PAUSED;
            let hint = did_you_mean(other, names.iter().copied());
            report.push(at.at(span), format!("unknown `on_paused` `{other}`{hint}; use {}", one_of(names)));
            None
        }
    };
    let max_queued = match &t.max_queued {
        Some(v) if v.value > MAX_MAX_QUEUED => {
            report.push(at.at(v), format!("`max_queued` is at most {MAX_MAX_QUEUED}, got {}", v.value));
            None
        }
        Some(v) => report.limit(at, "max_queued", v, 1),
        None => Some(DEFAULT_MAX_QUEUED),
    };
    Some(TriggerDef::Event { event: name.to_string(), on_paused: on_paused?, max_queued: max_queued? })
}

fn cron_trigger(
    report: &mut Report,
    at: At<'_>,
    t: &RawTrigger,
    cron: &Span<String>,
) -> Option<CronTriggerDef> {
    let expr_ok = match parse_cron(&cron.value).and_then(|c| fires(&c, &cron.value)) {
        Ok(()) => true,
        Err(e) => {
            report.push(at.at(cron), e);
            false
        }
    };
    let timezone = match &t.timezone {
        Some(tz) => match parse_timezone(tz.value.trim()) {
            Ok(parsed) => Some(parsed.name().to_string()),
            Err(e) => {
                report.push(at.at(tz), e);
                None
            }
        },
        None => Some("UTC".to_string()),
    };
    let misfire = match &t.misfire {
        Some(m) => misfire(report, at, m),
        None => Some(Misfire::RunOnce),
    };
    let mut duration = |field: &str, value: &Option<Span<String>>| match value {
        Some(v) => report.duration(at, field, v).map(Some),
        None => Some(None),
    };
    let jitter = duration("jitter", &t.jitter);
    let grace = duration("grace", &t.grace);
    let catchup = duration("catchup_window", &t.catchup_window);
    let calendar = trigger_calendar(report, at, t);
    Some(CronTriggerDef {
        expr: expr_ok.then(|| cron.value.trim().to_string())?,
        timezone: timezone?,
        misfire: misfire?,
        jitter: jitter?.unwrap_or(Duration::ZERO),
        grace: grace?,
        catchup_window: catchup?.unwrap_or(DEFAULT_CATCHUP_WINDOW),
        calendar: calendar?,
    })
}

const CALENDAR_MODES: &[&str] = &["skip", "next", "previous"];

/// `calendar:` and `calendar_mode:` (the name is checked against the server's
/// calendars on apply, `check_calendars`). `Some(None)`: no calendar.
fn trigger_calendar(report: &mut Report, at: At<'_>, t: &RawTrigger) -> Option<Option<TriggerCalendar>> {
    let mode = match t.calendar_mode.as_ref().map(|m| (m, m.value.trim())) {
        None | Some((_, "skip")) => Some(CalendarMode::Skip),
        Some((_, "next")) => Some(CalendarMode::Next),
        Some((_, "previous")) => Some(CalendarMode::Previous),
        Some((span, other)) => {
            let hint = did_you_mean(other, CALENDAR_MODES.iter().copied());
            let names = one_of(CALENDAR_MODES);
            report.push(at.at(span), format!("unknown `calendar_mode` `{other}`{hint}; use {names}"));
            None
        }
    };
    let Some(calendar) = &t.calendar else {
        if let Some(span) = &t.calendar_mode {
            report.push(at.at(span), "`calendar_mode` needs a `calendar` (e.g. `calendar: cn-workdays`)");
            return None;
        }
        return Some(None);
    };
    let name = calendar.value.trim();
    if name.is_empty() {
        report
            .push(at.at(calendar), "`calendar` is empty; name a calendar, e.g. `cn-workdays` or `weekdays`");
        return None;
    }
    Some(Some(TriggerCalendar { name: name.to_string(), mode: mode?, line: line_of(calendar) }))
}

fn misfire(report: &mut Report, at: At<'_>, raw: &Span<String>) -> Option<Misfire> {
    match raw.value.as_str() {
        "skip" => Some(Misfire::Skip),
        "run_once" => Some(Misfire::RunOnce),
        "run_all" => Some(Misfire::RunAll),
        other => {
            let hint = did_you_mean(other, MISFIRES.iter().copied());
            report.push(at.at(raw), format!("unknown `misfire` `{other}`{hint}; use {}", one_of(MISFIRES)));
            None
        }
    }
}
