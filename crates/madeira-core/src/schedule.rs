//! Cron fire times in a trigger's timezone (croner handles DST: a local time that
//! does not exist fires at the next valid instant, a repeated hour fires once).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::{CronTriggerDef, Misfire};
use crate::spec::{parse_cron, parse_timezone};

/// The first fire instant strictly after `after`, or `None` if the expression
/// never fires again (or no longer parses).
pub fn next_after(trigger: &CronTriggerDef, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let next = next_fires(&trigger.expr, &trigger.timezone, after, 1).ok()?;
    next.into_iter().next().map(|t| t.with_timezone(&Utc))
}

/// The next `count` fire instants of `expr` in `timezone` strictly after `after`.
pub fn next_fires(
    expr: &str,
    timezone: &str,
    after: DateTime<Utc>,
    count: usize,
) -> Result<Vec<DateTime<chrono_tz::Tz>>, String> {
    let cron = parse_cron(expr)?;
    let tz = parse_timezone(timezone)?;
    let mut from = after.with_timezone(&tz);
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        match cron.find_next_occurrence(&from, false) {
            Ok(next) => {
                out.push(next);
                from = next;
            }
            Err(_) => break,
        }
    }
    Ok(out)
}

/// A stable random offset in `[0, jitter)` for one tick of one trigger: the same
/// after a restart, different across flows, so hundreds of jobs scheduled at 00:00
/// do not all start at once.
pub fn jitter_offset(flow: &str, trigger: usize, tick: DateTime<Utc>, jitter: Duration) -> Duration {
    let span = jitter.as_millis() as u64;
    if span == 0 {
        return Duration::ZERO;
    }
    // FNV-1a: stable across processes and Rust versions (unlike DefaultHasher).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let key = format!("{flow}\u{0}{trigger}\u{0}{}", tick.timestamp_millis());
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    Duration::from_millis(hash % span)
}

/// Most ticks one catch-up may fire, whatever the policy.
pub const MAX_CATCHUP: usize = 1_000;

/// The ticks to fire now for ticks missed in `(last, now]` (downtime or a pause),
/// by misfire policy: `skip` none, `run_once` the latest, `run_all` every one within
/// `catchup_window`, oldest first. `last = None` (never fired) misses nothing.
pub fn missed_ticks(
    trigger: &CronTriggerDef,
    last: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let Some(last) = last else { return Vec::new() };
    if trigger.misfire == Misfire::Skip {
        return Vec::new();
    }
    let window = chrono::Duration::from_std(trigger.catchup_window).unwrap_or(chrono::Duration::days(1));
    let from = if trigger.misfire == Misfire::RunAll { last.max(now - window) } else { last };
    let mut ticks = Vec::new();
    let mut cursor = from;
    loop {
        let batch = match next_fires(&trigger.expr, &trigger.timezone, cursor, 64) {
            Ok(b) => b,
            Err(_) => return Vec::new(),
        };
        let mut advanced = false;
        for t in batch {
            let t = t.with_timezone(&Utc);
            if t > now {
                return finish(trigger.misfire, ticks);
            }
            if t > last {
                ticks.push(t);
                if trigger.misfire == Misfire::RunOnce && ticks.len() > 1 {
                    ticks.remove(0);
                }
            }
            cursor = t;
            advanced = true;
            if ticks.len() >= MAX_CATCHUP && trigger.misfire == Misfire::RunAll {
                return ticks;
            }
        }
        if !advanced {
            return finish(trigger.misfire, ticks);
        }
    }
}

fn finish(policy: Misfire, mut ticks: Vec<DateTime<Utc>>) -> Vec<DateTime<Utc>> {
    if policy == Misfire::RunOnce && ticks.len() > 1 {
        ticks.drain(..ticks.len() - 1);
    }
    ticks
}

mod calendar;

pub use calendar::{Planned, next_fire, on_calendar, plan_after, plan_many};

#[cfg(test)]
mod calendar_tests;
#[cfg(test)]
mod cronie;
#[cfg(test)]
mod tests;
