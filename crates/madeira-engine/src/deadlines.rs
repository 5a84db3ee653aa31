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
//!
//! With `warn_before`, the next deadline is also watched before it passes: once
//! the remaining critical path's usual duration no longer fits before `deadline
//! − warn_before` (`madeira_core::deadline_risk`), one warning
//! `MadeiraDeadlineAtRisk` per flow and date, recorded in the store first
//! (`RunStore::record_once`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use madeira_core::bizdate::{DeadlineDef, format_date, last_passed, next_deadline};
use madeira_core::deadline_risk::{self, NodeProgress};
use madeira_core::{FlowDef, NodeAction, NodeState};
use madeira_store::{Batch, FlowRecord, RunQuery, RunRow};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{AlertSource, BusinessAlert, EngineHandle, EngineObserver, WallClock};

/// How often deadlines are looked at.
const EVERY: Duration = Duration::from_secs(1);
/// How long a flow's usual node durations are kept before they are read again.
const USUAL_FOR: Duration = Duration::from_secs(30);
/// How many of a flow's latest runs its usual durations are taken from.
const USUAL_RUNS: u32 = 200;

/// Usual node durations by flow, with when they were read (ms).
type UsualCache = HashMap<String, (i64, Arc<HashMap<String, Duration>>)>;

pub struct DeadlineWatcher {
    engine: EngineHandle,
    observers: Vec<Arc<dyn EngineObserver>>,
    wall: WallClock,
    usual: Mutex<UsualCache>,
    /// At-risk keys already decided here (raised, or raised by another replica).
    at_risk: Mutex<HashSet<String>>,
}

impl DeadlineWatcher {
    pub fn new(engine: EngineHandle, observers: Vec<Arc<dyn EngineObserver>>) -> Self {
        Self {
            engine,
            observers,
            wall: Arc::new(crate::now_ms),
            usual: Mutex::default(),
            at_risk: Mutex::default(),
        }
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
                _ = tick.tick() => self.look().await,
            }
        }
    }

    /// One look, what each tick of `run` does; tests call it at the wall time
    /// they set (`with_wall_clock`) instead of waiting for ticks.
    pub async fn look(&self) {
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
        let next = next_deadline(deadline, now, cal);
        let next_secs = next.map(|(_, at)| at.timestamp() as f64);
        self.observers.iter().for_each(|o| o.next_deadline(&def.name, next_secs));
        if let (Some(warn_before), Some((date, at))) = (deadline.warn_before, next)
            && at.timestamp_millis() > record.created_at
        {
            self.check_risk(record, def, (deadline, warn_before), (format_date(date), at), now).await;
        }
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
        let key = format!("deadline:{}:{date}", def.name);
        let alert = BusinessAlert {
            key: &key,
            alertname: "MadeiraDeadlineMissed",
            critical: true,
            flow: &def.name,
            node: None,
            biz_date: &date,
            summary: &summary,
            run_id: runs.first().map(|r| r.id.as_str()),
            held_by: held_by.as_deref(),
        };
        raise(self.engine.store().as_ref(), &self.observers, alert, "deadlines", "deadline_missed").await;
    }

    /// The at-risk warning for the next deadline, at `at` for business date `date`.
    async fn check_risk(
        &self,
        record: &FlowRecord,
        def: &FlowDef,
        (deadline, warn_before): (&DeadlineDef, Duration),
        (date, at): (String, DateTime<Utc>),
        now: DateTime<Utc>,
    ) {
        let key = format!("deadline_at_risk:{}:{date}", def.name);
        if lock(&self.at_risk).contains(&key) {
            return;
        }
        let (now_ms, at_ms) = (now.timestamp_millis(), at.timestamp_millis());
        let Some(usual) = self.usual(&def.name, now_ms).await else { return };
        // The whole path is the most the work left can weigh: no store read
        // while even that fits.
        if !deadline_risk::at_risk(now_ms, deadline_risk::remaining(def, None, &usual), at_ms, warn_before) {
            return;
        }
        let store = self.engine.store();
        let query = RunQuery {
            flow: Some(def.name.clone()),
            biz_date: Some(date.clone()),
            limit: 20,
            ..Default::default()
        };
        let Ok(runs) = store.list_runs(&query).await else { return };
        if runs.iter().any(|r| r.state.as_str() == "SUCCESS") {
            return;
        }
        let stored = match runs.first() {
            Some(run) => store.load_run(&run.id).await.ok().flatten(),
            None => None,
        };
        let progress: Option<Vec<NodeProgress>> = stored.as_ref().map(|s| progress(def, s, now_ms));
        let left = deadline_risk::remaining(def, progress.as_deref(), &usual);
        if !deadline_risk::at_risk(now_ms, left, at_ms, warn_before) {
            return;
        }
        match store.record_once(&def.name, &key, now_ms).await {
            Ok(first) => {
                lock(&self.at_risk).insert(key.clone());
                if !first {
                    return;
                }
            }
            Err(e) => {
                warn!(flow = %def.name, error = %e, "deadlines: cannot record an at-risk warning; trying again");
                return;
            }
        }
        let tz = deadline.timezone;
        let by = at.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z");
        let line = (at - chrono::Duration::from_std(warn_before).unwrap_or_default()).with_timezone(&tz);
        let state = match runs.first() {
            None => "no run has been created for this date yet".to_string(),
            Some(run) => self.root_cause(def, Some(run), record.paused).await.0,
        };
        let summary = format!(
            "flow {}: the run for business date {date} is at risk of missing its deadline {by}: about {} of \
             work is left on its critical path (each node's median of its last {} successes), past the \
             warning line {} ({} before the deadline); {state}",
            def.name,
            short(left),
            deadline_risk::SAMPLES,
            line.format("%H:%M:%S"),
            short(warn_before),
        );
        info!(flow = %def.name, biz_date = %date, left_s = left.as_secs(), "deadline at risk");
        let alert = BusinessAlert {
            key: &key,
            alertname: "MadeiraDeadlineAtRisk",
            critical: false,
            flow: &def.name,
            node: None,
            biz_date: &date,
            summary: &summary,
            run_id: runs.first().map(|r| r.id.as_str()),
            held_by: None,
        };
        raise(store.as_ref(), &self.observers, alert, "deadlines", "deadline_at_risk").await;
    }

    /// The flow's usual node durations (`deadline_risk::usual_durations`), read
    /// at most every `USUAL_FOR`.
    async fn usual(&self, flow: &str, now_ms: i64) -> Option<Arc<HashMap<String, Duration>>> {
        let fresh = i64::try_from(USUAL_FOR.as_millis()).unwrap_or(i64::MAX);
        if let Some((at, usual)) = lock(&self.usual).get(flow)
            && now_ms.saturating_sub(*at) < fresh
        {
            return Some(usual.clone());
        }
        let samples = match self.engine.store().node_durations(flow, USUAL_RUNS).await {
            Ok(samples) => samples,
            Err(e) => {
                debug!(flow = %flow, error = %e, "deadlines: cannot read node durations; trying again");
                return None;
            }
        };
        let samples: Vec<(String, Duration)> = samples
            .into_iter()
            .map(|(node, ms)| (node, Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
            .collect();
        let usual = Arc::new(deadline_risk::usual_durations(&samples));
        lock(&self.usual).insert(flow.to_string(), (now_ms, usual.clone()));
        Some(usual)
    }
}

/// Where each node of a stored run is, for the estimate.
fn progress(def: &FlowDef, stored: &madeira_store::StoredRun, now_ms: i64) -> Vec<NodeProgress> {
    def.nodes
        .iter()
        .map(|n| match stored.nodes.iter().find(|row| row.node == n.id) {
            Some(row) => NodeProgress {
                state: row.state,
                running_for: Duration::from_millis(
                    u64::try_from(now_ms.saturating_sub(row.started_at.unwrap_or(now_ms))).unwrap_or(0),
                ),
            },
            None => NodeProgress { state: NodeState::Init, running_for: Duration::ZERO },
        })
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `25m`, `1h30m`, `45s`.
pub(crate) fn short(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// Raises a business alert through the observers and records it: audit
/// `action` by `actor`, and the alert inbox event on a shared store.
pub(crate) async fn raise(
    store: &dyn madeira_store::Store,
    observers: &[Arc<dyn EngineObserver>],
    alert: BusinessAlert<'_>,
    actor: &str,
    action: &str,
) {
    observers.iter().for_each(|o| o.business_alert(&alert));
    let alert_events = observers.iter().flat_map(|o| o.alert_events(AlertSource::Business(alert))).collect();
    let mut details = serde_json::json!({"flow": alert.flow});
    if !alert.biz_date.is_empty() {
        details["biz_date"] = serde_json::json!(alert.biz_date);
    }
    if let Some(node) = alert.node {
        details["node"] = serde_json::json!(node);
    }
    if let Some(held_by) = alert.held_by {
        details["held_by"] = serde_json::json!(held_by);
    }
    let audit = madeira_store::AuditRecord {
        at: crate::now_ms(),
        actor: actor.into(),
        action: action.into(),
        run_id: alert.run_id.map(str::to_string),
        node: alert.node.map(str::to_string),
        reason: Some(alert.summary.to_string()),
        details: Some(details),
    };
    let batch = Batch { audit: vec![audit], alert_events, ..Default::default() };
    if let Err(e) = store.commit(&batch).await {
        warn!(flow = %alert.flow, error = %e, "cannot record an alert ({})", alert.alertname);
    }
}

impl DeadlineWatcher {
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
        if def.nodes.iter().any(|n| !n.after.is_empty())
            && let Ok(Some((node, why, root))) =
                crate::holds::root_of_held_node(self.engine.store().as_ref(), &run.id).await
        {
            let error = root.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
            let text = format!(
                "run {}: node {node} is held ({why}); root cause: {} FAILED in run {} for {}{error}",
                run.id,
                root.label(),
                root.run_id,
                root.biz_date
            );
            return (text, Some(root.run_id));
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
