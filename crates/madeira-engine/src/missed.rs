//! Missed-run detection for observe-only flows (SPEC §11), as Healthchecks.io does
//! it: for every cron instant `t` of a flow with `observe: true` and a `grace`, a
//! run must start within `[t - 1 min, t + grace]` and finish within `grace` of its
//! start. A miss is logged, audited (`missed_run`) and handed to the observers
//! (alerting raises the `warning`). Instants are looked at from the later of the
//! checker's start and the apply of the flow version it first sees, never before
//! the flow (or its trigger) existed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;
use madeira_core::TriggerDef;
use madeira_store::{AuditRecord, Batch, RunQuery, Store};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::observer::EngineObserver;
use crate::{FlowCache, clock::now_ms};

/// How early before its instant a run still counts for it.
const EARLY_MS: i64 = 60_000;
const EVERY: Duration = Duration::from_secs(2);

pub(crate) fn spawn(
    store: Arc<dyn Store>,
    flows: FlowCache,
    observers: Vec<Arc<dyn EngineObserver>>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut checker = Checker { started_ms: now_ms(), cursors: HashMap::new(), finish: Vec::new() };
        let mut every = tokio::time::interval(EVERY);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = every.tick() => {}
            }
            checker.sweep(store.as_ref(), &flows, &observers).await;
        }
    })
}

struct FinishWatch {
    flow: String,
    run_id: String,
    scheduled_ms: i64,
    deadline_ms: i64,
}

struct Checker {
    started_ms: i64,
    /// `(flow, trigger index)` → last instant looked at.
    cursors: HashMap<(String, usize), i64>,
    finish: Vec<FinishWatch>,
}

impl Checker {
    async fn sweep(&mut self, store: &dyn Store, flows: &FlowCache, observers: &[Arc<dyn EngineObserver>]) {
        let records = match store.list_flows().await {
            Ok(r) => r,
            Err(e) => {
                debug!(error = %e, "missed-run check: cannot list flows");
                return;
            }
        };
        let now = now_ms();
        for record in records.iter().filter(|r| !r.paused) {
            let Ok(def) = flows.get(store, &record.name, record.latest_version).await else {
                continue;
            };
            if !def.observe {
                continue;
            }
            for (i, trigger) in def.triggers.iter().enumerate() {
                let TriggerDef::Cron(cron) = trigger else { continue };
                let Some(grace) = cron.grace else { continue };
                let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX / 4);
                let key = (def.name.clone(), i);
                let cursor = match self.cursors.get(&key) {
                    Some(c) => *c,
                    None => {
                        // First sight of this trigger: instants before the version that
                        // declared it was applied are none of its misses.
                        let applied = match store.flow_version(&record.name, record.latest_version).await {
                            Ok(Some(v)) => v.created_at,
                            _ => record.updated_at,
                        };
                        let start = self.started_ms.max(applied);
                        self.cursors.insert(key, start);
                        start
                    }
                };
                let Some(from) = DateTime::from_timestamp_millis(cursor) else { continue };
                let Ok(instants) = madeira_core::schedule::next_fires(&cron.expr, &cron.timezone, from, 100)
                else {
                    continue;
                };
                for t in instants.iter().map(|t| t.timestamp_millis()).filter(|t| t + grace_ms <= now) {
                    self.check_start(store, observers, &def.name, t, grace_ms).await;
                    self.cursors.insert((def.name.clone(), i), t);
                }
            }
        }
        self.check_finishes(store, observers, now).await;
    }

    async fn check_start(
        &mut self,
        store: &dyn Store,
        observers: &[Arc<dyn EngineObserver>],
        flow: &str,
        t: i64,
        grace_ms: i64,
    ) {
        let query = RunQuery { flow: Some(flow.to_string()), limit: 100, ..Default::default() };
        let Ok(runs) = store.list_runs(&query).await else {
            return;
        };
        match runs.iter().find(|r| r.created_at >= t - EARLY_MS && r.created_at <= t + grace_ms) {
            Some(run) => self.finish.push(FinishWatch {
                flow: flow.to_string(),
                run_id: run.id.clone(),
                scheduled_ms: t,
                deadline_ms: run.created_at + grace_ms,
            }),
            None => report(store, observers, flow, t, "did not start within its grace").await,
        }
    }

    async fn check_finishes(&mut self, store: &dyn Store, observers: &[Arc<dyn EngineObserver>], now: i64) {
        let due: Vec<FinishWatch> = {
            let (due, keep) =
                std::mem::take(&mut self.finish).into_iter().partition(|w| w.deadline_ms <= now);
            self.finish = keep;
            due
        };
        for w in due {
            let finished = match store.load_run(&w.run_id).await {
                Ok(Some(run)) => run.run.finished_at.is_some_and(|f| f <= w.deadline_ms),
                _ => true,
            };
            if !finished {
                report(
                    store,
                    observers,
                    &w.flow,
                    w.scheduled_ms,
                    "started but did not finish within its grace",
                )
                .await;
            }
        }
    }
}

async fn report(store: &dyn Store, observers: &[Arc<dyn EngineObserver>], flow: &str, t: i64, what: &str) {
    let at = DateTime::from_timestamp_millis(t).map(|d| d.to_rfc3339()).unwrap_or_default();
    warn!(flow = %flow, scheduled_at = %at, "missed run: {what}");
    observers.iter().for_each(|o| o.observed_missed(flow, t, what));
    // On a shared store the alert event travels with the audit row.
    let source = crate::observer::AlertSource::ObservedMissed { flow, scheduled_at_ms: t, what };
    let alert_events = observers.iter().flat_map(|o| o.alert_events(source)).collect();
    let audit = AuditRecord {
        at: now_ms(),
        actor: "engine".into(),
        action: "missed_run".into(),
        run_id: None,
        node: None,
        reason: Some(format!("the run scheduled at {at} {what}")),
        details: Some(serde_json::json!({"flow": flow, "scheduled_at": at, "what": what})),
    };
    if let Err(e) = store.commit(&Batch { audit: vec![audit], alert_events, ..Default::default() }).await {
        warn!(error = %e, "cannot audit a missed run");
    }
}
