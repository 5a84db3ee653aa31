//! The deadline watcher (issue #35 item 5): every flow with `deadline:` has,
//! for each business date D, an instant its run must be SUCCESS by
//! (`madeira_core::bizdate::deadline_at`). Once a second, for each such flow,
//! the watcher looks at the latest deadline passed: when the flow has no
//! SUCCESS run for that date — none made, QUEUED, held, waiting at a manual
//! node, still running or failed — it raises one critical
//! `MadeiraDeadlineMissed` naming the flow, the date and the root cause as far
//! as the store knows it — for a run held by `after` behind a FAILED upstream,
//! that upstream's failed node, and the alert then joins the upstream's failure
//! alert (`BusinessAlert::held_by`) rather than paging on its own. The store
//! records the miss first
//! (`RunStore::record_deadline_miss`), so the alert fires once across restarts
//! and replicas. Deadlines that passed before the flow was applied are not
//! looked at. It also reports each flow's next deadline
//! (`EngineObserver::next_deadline`, `madeira_flow_deadline_seconds`).

use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;
use madeira_core::bizdate::{format_date, last_passed, next_deadline};
use madeira_core::{FlowDef, NodeAction, NodeState};
use madeira_store::{Batch, FlowRecord, RunQuery, RunRow};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{AlertSource, BusinessAlert, EngineHandle, EngineObserver, WallClock};

/// How often deadlines are looked at.
const EVERY: Duration = Duration::from_secs(1);

pub struct DeadlineWatcher {
    engine: EngineHandle,
    observers: Vec<Arc<dyn EngineObserver>>,
    wall: WallClock,
}

impl DeadlineWatcher {
    pub fn new(engine: EngineHandle, observers: Vec<Arc<dyn EngineObserver>>) -> Self {
        Self { engine, observers, wall: Arc::new(crate::now_ms) }
    }

    /// Reads the wall clock from `wall` instead of the system (tests).
    pub fn with_wall_clock(mut self, wall: WallClock) -> Self {
        self.wall = wall;
        self
    }

    pub async fn run(self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => self.check_all().await,
            }
        }
    }

    async fn check_all(&self) {
        let flows = match self.engine.store().list_flows().await {
            Ok(flows) => flows,
            Err(e) => {
                debug!(error = %e, "deadlines: cannot list flows; trying again");
                return;
            }
        };
        for record in flows {
            let def = match self.engine.flow(&record.name, Some(record.latest_version)).await {
                Ok(def) => def,
                Err(_) => continue,
            };
            if def.business.deadline.is_some() {
                self.check(&record, &def).await;
            } else {
                self.observers.iter().for_each(|o| o.next_deadline(&record.name, None));
            }
        }
    }

    async fn check(&self, record: &FlowRecord, def: &FlowDef) {
        let Some(deadline) = &def.business.deadline else { return };
        let Some(now) = DateTime::from_timestamp_millis((self.wall)()) else { return };
        let cals = self.engine.calendars();
        let cal = deadline.calendar.as_deref().and_then(|name| cals.get(name));
        if deadline.calendar.is_some() && cal.is_none() {
            warn!(flow = %def.name, "deadlines: the deadline's calendar is not known here; not checked");
            return;
        }
        let next = next_deadline(deadline, now, cal).map(|(_, at)| at.timestamp() as f64);
        self.observers.iter().for_each(|o| o.next_deadline(&def.name, next));
        let Some((date, at)) = last_passed(deadline, now, cal) else { return };
        if at.timestamp_millis() <= record.created_at {
            return;
        }
        let date = format_date(date);
        let store = self.engine.store();
        let query = RunQuery {
            flow: Some(def.name.clone()),
            biz_date: Some(date.clone()),
            limit: 20,
            ..Default::default()
        };
        let runs = match store.list_runs(&query).await {
            Ok(runs) => runs,
            Err(e) => {
                warn!(flow = %def.name, error = %e, "deadlines: cannot read the date's runs; trying again");
                return;
            }
        };
        if runs.iter().any(|r| r.state.as_str() == "SUCCESS") {
            return;
        }
        match store.record_deadline_miss(&def.name, &date, now.timestamp_millis()).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                warn!(flow = %def.name, error = %e, "deadlines: cannot record a miss; trying again");
                return;
            }
        }
        let (cause, held_by) = self.root_cause(def, runs.first(), record.paused).await;
        let by = at.with_timezone(&deadline.timezone).format("%Y-%m-%d %H:%M %Z");
        let summary =
            format!("flow {}: the run for business date {date} was not SUCCESS by {by}: {cause}", def.name);
        info!(flow = %def.name, biz_date = %date, cause = %cause, "deadline missed");
        let run_id = runs.first().map(|r| r.id.as_str());
        self.raise(def, &date, &summary, run_id, held_by.as_deref()).await;
    }

    async fn raise(
        &self,
        def: &FlowDef,
        date: &str,
        summary: &str,
        run_id: Option<&str>,
        held_by: Option<&str>,
    ) {
        let key = format!("deadline:{}:{date}", def.name);
        let alert = BusinessAlert {
            key: &key,
            alertname: "MadeiraDeadlineMissed",
            critical: true,
            flow: &def.name,
            biz_date: date,
            summary,
            run_id,
            held_by,
        };
        self.observers.iter().for_each(|o| o.business_alert(&alert));
        let alert_events =
            self.observers.iter().flat_map(|o| o.alert_events(AlertSource::Business(alert))).collect();
        let audit = madeira_store::AuditRecord {
            at: crate::now_ms(),
            actor: "deadlines".into(),
            action: "deadline_missed".into(),
            run_id: run_id.map(str::to_string),
            node: None,
            reason: Some(summary.to_string()),
            details: Some(serde_json::json!({"flow": def.name, "biz_date": date, "held_by": held_by})),
        };
        let batch = Batch { audit: vec![audit], alert_events, ..Default::default() };
        if let Err(e) = self.engine.store().commit(&batch).await {
            warn!(flow = %def.name, error = %e, "cannot record a missed deadline's alert");
        }
    }

    /// What holds the date's run, as far as the store says, and the FAILED
    /// upstream run holding it (`after`) when that is the root cause.
    async fn root_cause(
        &self,
        def: &FlowDef,
        run: Option<&RunRow>,
        paused: bool,
    ) -> (String, Option<String>) {
        let Some(run) = run else {
            let why = if paused {
                "the flow is paused"
            } else {
                "its tick was skipped or missed, or nobody triggered it"
            };
            return (format!("no run was created for this date ({why})"), None);
        };
        let Ok(Some(stored)) = self.engine.store().load_run(&run.id).await else {
            return (format!("run {} is {}", run.id, run.state.as_str()), None);
        };
        if let Some(why) = &stored.run.wait_reason {
            let store = self.engine.store();
            return match crate::holds::root_of(store.as_ref(), &run.id).await {
                Ok(Some(root)) => {
                    let error = root.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
                    let text = format!(
                        "run {} is held ({why}); root cause: {} FAILED in run {} for {}{error}",
                        run.id,
                        root.label(),
                        root.run_id,
                        root.biz_date
                    );
                    (text, Some(root.run_id))
                }
                Ok(None) => (format!("run {} is QUEUED: {why}", run.id), None),
                Err(e) => {
                    warn!(run_id = %run.id, error = %e, "deadlines: cannot follow the held run's waits");
                    (format!("run {} is QUEUED: {why}", run.id), None)
                }
            };
        }
        (Self::node_cause(def, run, &stored), None)
    }

    /// What keeps a started run from SUCCESS: a manual node, a failed node, a running one.
    fn node_cause(def: &FlowDef, run: &RunRow, stored: &madeira_store::StoredRun) -> String {
        let stamp = |ms: Option<i64>| {
            ms.and_then(DateTime::from_timestamp_millis)
                .map(|t| t.with_timezone(&def.business.timezone).format("%Y-%m-%d %H:%M:%S %Z").to_string())
                .unwrap_or_default()
        };
        for node in &stored.nodes {
            let manual = def.node_index(&node.node).map(|i| &def.nodes[i].action).and_then(|a| match a {
                NodeAction::Manual(m) => Some(m),
                _ => None,
            });
            match node.state {
                NodeState::ManualConfirm => {
                    let prompt = manual.map(|m| m.prompt.as_str()).unwrap_or_default();
                    return format!(
                        "run {}: manual node {} has waited since {} for an operator to confirm \
                         (`madeira confirm {} {}`): {prompt}",
                        run.id,
                        node.node,
                        stamp(node.started_at),
                        run.id,
                        node.node
                    );
                }
                NodeState::Failed => {
                    let reason = node.reason.as_deref().unwrap_or("no reason recorded");
                    return format!("run {}: node {} FAILED: {reason}", run.id, node.node);
                }
                _ => {}
            }
        }
        if let Some(node) = stored.nodes.iter().find(|n| n.state == NodeState::Running) {
            return format!(
                "run {}: node {} still RUNNING since {}",
                run.id,
                node.node,
                stamp(node.started_at)
            );
        }
        format!("run {} is {} (created {})", run.id, run.state.as_str(), stamp(Some(run.created_at)))
    }
}
