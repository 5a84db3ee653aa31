//! The business date a new run gets (the caller's, or the flow's `biz_date`
//! rule applied to the trigger instant), and `concurrency.depends_on_past`:
//! why a run waits for its previous date, and its release once that date's run
//! succeeded (`madeira_core::bizdate`).

use std::sync::Arc;

use chrono::{DateTime, NaiveDate};
use madeira_calendar::{Calendar, Calendars};
use madeira_core::FlowDef;
use madeira_core::bizdate::{biz_date_at, format_date, parse_date, previous_date};
use madeira_store::{Batch, RunQuery, Store};
use tracing::{info, warn};

use crate::{AlertSource, BusinessAlert, EngineError, EngineObserver};

/// The calendar a flow's `biz_date:` counts business days of, if any; one the
/// server does not have is an error (apply refuses such a flow).
pub(crate) fn rule_calendar<'a>(
    def: &FlowDef,
    cals: &'a Calendars,
) -> Result<Option<&'a Calendar>, EngineError> {
    match def.business.rule.calendar.as_deref() {
        None => Ok(None),
        Some(name) => cals.get(name).map(Some).ok_or_else(|| {
            EngineError::BadBizDate(format!(
                "flow {}: calendar `{name}` is not known to this server",
                def.name
            ))
        }),
    }
}

/// `YYYY-MM-DD` of the run's business date: `given`, else derived from `at_ms`
/// (business days of the rule's calendar).
pub(crate) fn biz_date_of(
    def: &FlowDef,
    given: Option<NaiveDate>,
    at_ms: i64,
    cals: &Calendars,
) -> Result<String, EngineError> {
    if let Some(d) = given {
        return Ok(format_date(d));
    }
    let at = DateTime::from_timestamp_millis(at_ms)
        .ok_or_else(|| EngineError::BadBizDate(format!("flow {}: no instant {at_ms} ms", def.name)))?;
    biz_date_at(&def.business, at, rule_calendar(def, cals)?)
        .map(format_date)
        .map_err(|e| EngineError::BadBizDate(format!("flow {}: no business date: {e}", def.name)))
}

/// Why a `depends_on_past` run of `flow` for `biz_date` may not start yet
/// (`madeira_core::bizdate::past_wait`), read from the store.
pub(crate) async fn past_wait(
    store: &dyn Store,
    def: &FlowDef,
    biz_date: &str,
    cals: &Calendars,
) -> Result<Option<String>, EngineError> {
    let flow = def.name.as_str();
    let previous = parse_date(biz_date)
        .and_then(|d| previous_date(d, rule_calendar(def, cals).ok().flatten()))
        .map_err(|e| {
            EngineError::BadBizDate(format!("flow {flow}: no business date before {biz_date}: {e}"))
        })?;
    let query = RunQuery {
        flow: Some(flow.to_string()),
        biz_date: Some(format_date(previous)),
        limit: 50,
        ..RunQuery::default()
    };
    let runs: Vec<(String, String)> =
        store.list_runs(&query).await?.into_iter().map(|r| (r.id, r.state.as_str().to_string())).collect();
    if runs.is_empty() && is_first_date(store, flow, biz_date).await? {
        return Ok(None);
    }
    Ok(madeira_core::bizdate::past_wait(previous, &runs))
}

/// Whether no recent run of `flow` (its latest `FIRST_DATE_SCAN`) has a business
/// date before `biz_date`: the flow's first date has no past to wait for.
async fn is_first_date(store: &dyn Store, flow: &str, biz_date: &str) -> Result<bool, EngineError> {
    let query = RunQuery { flow: Some(flow.to_string()), limit: FIRST_DATE_SCAN, ..RunQuery::default() };
    let runs = store.list_runs(&query).await?;
    Ok(!runs.iter().any(|r| r.biz_date.as_deref().is_some_and(|d| d < biz_date)))
}

/// How many of a flow's latest runs `is_first_date` looks at.
const FIRST_DATE_SCAN: u32 = 500;

/// Releases the QUEUED runs of `flow` held by `depends_on_past` whose previous
/// date has now succeeded: admitted at once when the flow has no
/// `max_active_runs` (returned, to start), else left to promotion. A run still
/// held gets its reason brought up to date; one held by a FAILED previous run
/// raises a critical `MadeiraPastFailed` alert (once per run in this process;
/// the alert's key, `past:<flow>:<date>`, groups repeats after a restart).
pub(crate) async fn release_waiting(
    store: &dyn Store,
    observers: &[Arc<dyn EngineObserver>],
    def: &FlowDef,
    cals: &Calendars,
    now: i64,
    alerted: &mut std::collections::HashSet<String>,
) -> Vec<String> {
    let query = RunQuery {
        flow: Some(def.name.clone()),
        state: Some("QUEUED".into()),
        limit: 100,
        ..RunQuery::default()
    };
    let held = match store.list_runs(&query).await {
        Ok(runs) => runs.into_iter().filter(|r| r.wait_reason.is_some()),
        Err(e) => {
            warn!(flow = %def.name, error = %e, "depends_on_past: cannot list held runs");
            return Vec::new();
        }
    };
    let admit = (def.concurrency.max_active_runs == 0).then_some(now);
    let mut start = Vec::new();
    for run in held {
        let Some(date) = run.biz_date.as_deref() else { continue };
        let reason = match past_wait(store, def, date, cals).await {
            Ok(reason) => reason,
            Err(e) => {
                warn!(run_id = %run.id, error = %e, "depends_on_past: cannot read the previous date");
                continue;
            }
        };
        let failed = reason.as_deref().filter(|why| why.contains(" is FAILED;"));
        if let Some(why) = failed
            && alerted.insert(run.id.clone())
        {
            past_failed(store, observers, &def.name, date, &run.id, why).await;
        }
        if reason == run.wait_reason {
            continue;
        }
        match store.set_wait_reason(&run.id, reason.as_deref(), admit).await {
            Ok(true) if reason.is_none() => {
                info!(run_id = %run.id, flow = %def.name, biz_date = %date, "depends_on_past: released");
                if admit.is_some() {
                    start.push(run.id);
                }
            }
            Ok(true) => {
                let why = reason.unwrap_or_default();
                info!(run_id = %run.id, flow = %def.name, biz_date = %date, reason = %why, "depends_on_past: still held");
            }
            Ok(false) => {}
            Err(e) => warn!(run_id = %run.id, error = %e, "depends_on_past: cannot update the held run"),
        }
    }
    start
}

/// A `depends_on_past` run held by a FAILED previous date: loud, not silent.
pub(crate) async fn past_failed(
    store: &dyn Store,
    observers: &[Arc<dyn EngineObserver>],
    flow: &str,
    biz_date: &str,
    run_id: &str,
    why: &str,
) {
    let key = format!("past:{flow}:{biz_date}");
    let summary = format!("flow {flow}: the run for business date {biz_date} ({run_id}) cannot start: {why}");
    let alert = BusinessAlert {
        key: &key,
        alertname: "MadeiraPastFailed",
        critical: true,
        flow,
        node: None,
        biz_date,
        summary: &summary,
        run_id: Some(run_id),
        held_by: None,
    };
    observers.iter().for_each(|o| o.business_alert(&alert));
    let alert_events = observers.iter().flat_map(|o| o.alert_events(AlertSource::Business(alert))).collect();
    if let Err(e) = store.commit(&Batch { alert_events, ..Default::default() }).await {
        warn!(flow = %flow, error = %e, "cannot record a depends_on_past alert");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_compare_as_text_in_date_order() {
        assert!("2026-09-30" < "2026-10-01" && "2025-12-31" < "2026-01-01");
    }
}
