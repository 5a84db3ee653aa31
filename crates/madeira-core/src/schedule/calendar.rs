//! Cron ticks on a business-day calendar (`calendar:` + `calendar_mode:` of a cron
//! trigger). `skip`: a tick on a day that is not a business day makes no run, and
//! the day is reported once (`Planned::Skipped`). `next` / `previous`: the tick
//! moves to the next / previous business day at the same local time; ticks that
//! move onto the same instant make one run (the run's key is the moved instant).
//! A day the calendar has no data for (or a calendar that no longer exists) is
//! `Planned::Blocked`: no run, never a guess.

use chrono::{DateTime, Duration as ChronoDuration, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use madeira_calendar::{Calendar, CalendarMode, Calendars};

use crate::model::CronTriggerDef;
use crate::spec::{parse_cron, parse_timezone};

/// Most raw cron ticks looked at for one planned tick (a per-minute cron moved
/// over a 9-day holiday looks at ~13,000).
const MAX_SCAN: usize = 100_000;

/// What the scheduler does next for one cron trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Planned {
    /// Start a run at `at`: the tick itself, or the tick moved to a business day.
    Fire { tick: DateTime<Utc>, at: DateTime<Utc> },
    /// The ticks of `day` fall on a day that is not a business day (`skip`): no
    /// run; recorded once at `tick` (the day's first). Plan again after `resume`.
    Skipped { tick: DateTime<Utc>, day: NaiveDate, calendar: String, resume: DateTime<Utc> },
    /// The calendar cannot answer for `day`: no run, an alert. Plan again after `resume`.
    Blocked { tick: DateTime<Utc>, day: NaiveDate, error: String, resume: DateTime<Utc> },
}

impl Planned {
    /// When the scheduler acts on it.
    pub fn due(&self) -> DateTime<Utc> {
        match self {
            Planned::Fire { at, .. } => *at,
            Planned::Skipped { tick, .. } | Planned::Blocked { tick, .. } => *tick,
        }
    }

    /// The instant to plan the next tick after.
    pub fn resume(&self) -> DateTime<Utc> {
        match self {
            Planned::Fire { at, .. } => *at,
            Planned::Skipped { resume, .. } | Planned::Blocked { resume, .. } => *resume,
        }
    }
}

/// The raw cron ticks strictly after `from`, lazily.
fn raw_ticks(trigger: &CronTriggerDef, tz: Tz, from: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> {
    let cron = parse_cron(&trigger.expr).ok();
    let mut cursor = from.with_timezone(&tz);
    std::iter::from_fn(move || {
        let next = cron.as_ref()?.find_next_occurrence(&cursor, false).ok()?;
        cursor = next;
        Some(next.with_timezone(&Utc))
    })
    .take(MAX_SCAN)
}

/// The last instant of local `day` in `tz` (a day's ticks are all at or before it).
fn end_of_day(tz: Tz, day: NaiveDate, fallback: DateTime<Utc>) -> DateTime<Utc> {
    let next = day.succ_opt().and_then(|d| d.and_hms_opt(0, 0, 0));
    let start = next.and_then(|n| tz.from_local_datetime(&n).earliest());
    start
        .map(|s| s.with_timezone(&Utc) - ChronoDuration::milliseconds(1))
        .unwrap_or(fallback + ChronoDuration::days(1))
}

/// The start of local `day` in `tz`, minus a millisecond (ticks strictly after it).
fn before_day(tz: Tz, day: NaiveDate) -> Option<DateTime<Utc>> {
    let start = tz.from_local_datetime(&day.and_hms_opt(0, 0, 0)?).earliest()?;
    Some(start.with_timezone(&Utc) - ChronoDuration::milliseconds(1))
}

/// `tick`'s local time of day on local date `day` (a time that does not exist
/// that day, in a DST gap, moves an hour later).
fn same_time_on(tz: Tz, tick: DateTime<Utc>, day: NaiveDate) -> Option<DateTime<Utc>> {
    let local = day.and_time(tick.with_timezone(&tz).time());
    let at = tz.from_local_datetime(&local).earliest();
    let at = at.or_else(|| tz.from_local_datetime(&(local + ChronoDuration::hours(1))).earliest())?;
    Some(at.with_timezone(&Utc))
}

/// The next thing to do for `trigger` strictly after `after`; `None` when the
/// expression never fires again.
pub fn plan_after(trigger: &CronTriggerDef, calendars: &Calendars, after: DateTime<Utc>) -> Option<Planned> {
    let Some(on) = &trigger.calendar else {
        let tick = super::next_after(trigger, after)?;
        return Some(Planned::Fire { tick, at: tick });
    };
    let tz = parse_timezone(&trigger.timezone).ok()?;
    let Some(calendar) = calendars.get(&on.name) else {
        let tick = super::next_after(trigger, after)?;
        let day = tick.with_timezone(&tz).date_naive();
        let known: Vec<&str> = calendars.names().collect();
        let error = format!(
            "unknown calendar `{}`; the server has: {}; define it or change the trigger",
            on.name,
            known.join(", ")
        );
        return Some(Planned::Blocked { tick, day, error, resume: end_of_day(tz, day, tick) });
    };
    match on.mode {
        CalendarMode::Skip => plan_skip(trigger, calendar, tz, after),
        mode => plan_moved(trigger, calendar, tz, after, mode),
    }
}

fn plan_skip(trigger: &CronTriggerDef, calendar: &Calendar, tz: Tz, after: DateTime<Utc>) -> Option<Planned> {
    let tick = super::next_after(trigger, after)?;
    let day = tick.with_timezone(&tz).date_naive();
    let resume = end_of_day(tz, day, tick);
    Some(match calendar.is_business_day(day) {
        Ok(true) => Planned::Fire { tick, at: tick },
        Ok(false) => Planned::Skipped { tick, day, calendar: calendar.name().to_string(), resume },
        Err(e) => Planned::Blocked { tick, day, error: e.to_string(), resume },
    })
}

fn plan_moved(
    trigger: &CronTriggerDef,
    calendar: &Calendar,
    tz: Tz,
    after: DateTime<Utc>,
    mode: CalendarMode,
) -> Option<Planned> {
    // `next`: a tick on the days off just before today may move to today or later.
    let today = after.with_timezone(&tz).date_naive();
    let start = match mode {
        CalendarMode::Next => calendar
            .previous_business_day(today)
            .ok()
            .and_then(|p| p.succ_opt())
            .and_then(|d| before_day(tz, d))
            .map_or(after, |s| s.min(after)),
        _ => after,
    };
    for tick in raw_ticks(trigger, tz, start) {
        let day = tick.with_timezone(&tz).date_naive();
        match calendar.adjust(day, mode) {
            Ok(Some(moved)) => {
                let at = same_time_on(tz, tick, moved)?;
                if at > after {
                    return Some(Planned::Fire { tick, at });
                }
            }
            Ok(None) => {}
            Err(e) if tick > after => {
                let resume = end_of_day(tz, day, tick);
                return Some(Planned::Blocked { tick, day, error: e.to_string(), resume });
            }
            Err(_) => {}
        }
    }
    None
}

/// A tick the calendar cannot answer for, and why.
pub type BlockedTick = (DateTime<Utc>, String);

/// The instants to fire for `ticks` missed up to `now` (misfire catch-up), on the
/// trigger's calendar: ticks on days off dropped (`skip`) or moved (`next` /
/// `previous`; moved past `now`, they are left to `plan_after`), one per
/// instant. Ticks the calendar cannot answer for are returned second, with why.
pub fn on_calendar(
    trigger: &CronTriggerDef,
    calendars: &Calendars,
    ticks: Vec<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> (Vec<DateTime<Utc>>, Vec<BlockedTick>) {
    let Some(on) = &trigger.calendar else { return (ticks, Vec::new()) };
    let Ok(tz) = parse_timezone(&trigger.timezone) else { return (Vec::new(), Vec::new()) };
    let Some(calendar) = calendars.get(&on.name) else {
        let error = format!("unknown calendar `{}`", on.name);
        return (Vec::new(), ticks.into_iter().map(|t| (t, error.clone())).collect());
    };
    let (mut fire, mut blocked) = (Vec::new(), Vec::new());
    for tick in ticks {
        match calendar.adjust(tick.with_timezone(&tz).date_naive(), on.mode) {
            Ok(Some(day)) => {
                if let Some(at) = same_time_on(tz, tick, day).filter(|at| *at <= now) {
                    fire.push(at);
                }
            }
            Ok(None) => {}
            Err(e) => blocked.push((tick, e.to_string())),
        }
    }
    fire.sort();
    fire.dedup();
    (fire, blocked)
}

/// The next fire instant strictly after `after` on the trigger's calendar
/// (skipped days passed over); `None` when it never fires again or the calendar
/// cannot answer before then.
pub fn next_fire(
    trigger: &CronTriggerDef,
    calendars: &Calendars,
    after: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let mut from = after;
    for _ in 0..1000 {
        match plan_after(trigger, calendars, from)? {
            Planned::Fire { at, .. } => return Some(at),
            Planned::Blocked { .. } => return None,
            skipped @ Planned::Skipped { .. } => from = skipped.resume(),
        }
    }
    None
}

/// The next `count` planned ticks strictly after `after` (fires, skipped days and
/// blocked days, in order), ending early at the first blocked day.
pub fn plan_many(
    trigger: &CronTriggerDef,
    calendars: &Calendars,
    after: DateTime<Utc>,
    count: usize,
) -> Vec<Planned> {
    let mut out = Vec::new();
    let mut from = after;
    let mut fires = 0;
    // Skipped days do not count towards `count`; a bound keeps a calendar with
    // no business days in reach from looping.
    for _ in 0..count.saturating_mul(20).max(400) {
        let Some(planned) = plan_after(trigger, calendars, from) else { break };
        from = planned.resume();
        let stop = matches!(planned, Planned::Blocked { .. });
        fires += usize::from(matches!(planned, Planned::Fire { .. }));
        out.push(planned);
        if stop || fires >= count {
            break;
        }
    }
    out
}
