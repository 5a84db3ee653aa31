//! Cron fire times in a trigger's timezone (croner handles DST: a local time that
//! does not exist fires at the next valid instant, a repeated hour fires once).

use chrono::{DateTime, Utc};

use crate::model::CronTriggerDef;
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
