//! What the engine records instead of failing silently: a routing rule that
//! could not be evaluated (the run goes to `default`; an audit row
//! `routing_fallback` on the run is its warning, shown by `GET /runs/{id}`), and
//! a cron tick that could not create a run (an audit row `cron_run_not_created`
//! and an alert through the observers, on a shared store in the same commit; also
//! a tick whose calendar has no data for its day), and a tick skipped by its
//! calendar (an audit row `cron_tick_skipped`, not an error).

use std::sync::Arc;

use madeira_core::FlowDef;
use madeira_store::{AuditRecord, Batch, RunStore};
use serde_json::{Value as Json, json};
use tracing::{error, warn};

use crate::clock::now_ms;
use crate::observer::{AlertSource, EngineObserver};

/// The audit action of a routing fallback.
pub const ROUTING_FALLBACK: &str = "routing_fallback";

/// The version a run with `params` goes to: the first matching routing rule, the
/// routing default, or the latest version. A rule that cannot be evaluated
/// (it reads a param the run lacks, or errs) sends the run to `default`, with the
/// warning to record.
pub(crate) fn route(latest: &FlowDef, params: &Json, latest_version: u32) -> (u32, Option<String>) {
    let Some(routing) = &latest.routing else {
        return (latest_version, None);
    };
    for (i, rule) in routing.rules.iter().enumerate() {
        match rule.when.eval(params, &Json::Object(Default::default())) {
            Ok(true) => return (rule.version, None),
            Ok(false) => {}
            Err(e) => {
                let warning = format!(
                    "routing rule {} (to version {}) could not be evaluated: {e}; the run went to the default version {}",
                    i + 1,
                    rule.version,
                    routing.default
                );
                return (routing.default, Some(warning));
            }
        }
    }
    (routing.default, None)
}

/// Records `warning` on run `run_id` (audit `routing_fallback`).
pub(crate) async fn record_routing_fallback(
    store: &dyn RunStore,
    flow: &str,
    run_id: &str,
    version: u32,
    warning: String,
) {
    warn!(flow = %flow, run_id = %run_id, "{warning}");
    let audit = AuditRecord {
        at: now_ms(),
        actor: "engine".into(),
        action: ROUTING_FALLBACK.into(),
        run_id: Some(run_id.to_string()),
        node: None,
        reason: Some(warning),
        details: Some(json!({"flow": flow, "version": version})),
    };
    if let Err(e) = store.commit(&Batch { audit: vec![audit], ..Default::default() }).await {
        warn!(error = %e, run_id = %run_id, "cannot record a routing fallback");
    }
}

/// A cron tick of `flow` at `scheduled_at_ms` made no run because of `e`:
/// logged, audited and alerted.
pub(crate) async fn cron_not_created(
    store: &dyn RunStore,
    observers: &[Arc<dyn EngineObserver>],
    flow: &str,
    scheduled_at_ms: i64,
    reason: &str,
) {
    let at =
        chrono::DateTime::from_timestamp_millis(scheduled_at_ms).map(|d| d.to_rfc3339()).unwrap_or_default();
    error!(flow = %flow, scheduled_at = %at, error = %reason, "cron run not created");
    observers.iter().for_each(|o| o.cron_not_created(flow, scheduled_at_ms, reason));
    let source = AlertSource::CronNotCreated { flow, scheduled_at_ms, error: reason };
    let alert_events = observers.iter().flat_map(|o| o.alert_events(source)).collect();
    let audit = AuditRecord {
        at: now_ms(),
        actor: "scheduler".into(),
        action: "cron_run_not_created".into(),
        run_id: None,
        node: None,
        reason: Some(format!("the tick at {at} made no run: {reason}")),
        details: Some(json!({"flow": flow, "scheduled_at": at, "error": reason})),
    };
    if let Err(e) = store.commit(&Batch { audit: vec![audit], alert_events, ..Default::default() }).await {
        warn!(error = %e, "cannot audit a cron tick that made no run");
    }
}

/// The audit action of a cron tick skipped by its trigger's calendar.
pub const CRON_TICK_SKIPPED: &str = "cron_tick_skipped";

/// A cron tick on a day that is not a business day of its trigger's calendar.
pub(crate) struct CalendarSkip {
    pub flow: String,
    pub scheduled_at_ms: i64,
    pub day: String,
    pub calendar: String,
}

/// Records a day skipped by the calendar (audit `cron_tick_skipped` with the
/// flow, shown in its audit trail): not an error, no alert.
pub(crate) async fn calendar_skipped(store: &dyn RunStore, skip: CalendarSkip) {
    let at = chrono::DateTime::from_timestamp_millis(skip.scheduled_at_ms)
        .map(|d| d.to_rfc3339())
        .unwrap_or_default();
    let audit = AuditRecord {
        at: now_ms(),
        actor: "scheduler".into(),
        action: CRON_TICK_SKIPPED.into(),
        run_id: None,
        node: None,
        reason: Some(format!(
            "{} is not a business day of calendar `{}`: the tick at {at} made no run",
            skip.day, skip.calendar
        )),
        details: Some(json!({
            "flow": skip.flow, "scheduled_at": at, "day": skip.day, "calendar": skip.calendar,
        })),
    };
    if let Err(e) = store.commit(&Batch { audit: vec![audit], ..Default::default() }).await {
        warn!(error = %e, flow = %skip.flow, "cannot audit a cron tick skipped by its calendar");
    }
}
