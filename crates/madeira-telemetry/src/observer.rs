//! `MetricsObserver`: turns the engine's post-commit notifications into metric
//! updates. Gauges that count runs or waiting confirmations are kept from a set of
//! the runs/nodes they count, so a run announced twice (resume after a failed
//! commit, restart) is never counted twice, and a restart rebuilds them from the
//! runs the engine resumes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use madeira_core::{NodeState, RunSnapshot};
use madeira_engine::{AttemptOutcome, EngineObserver, NodeWatch, RunEvent};

use crate::metrics::{FlowStatusLabels, Metrics, NodeStatusLabels, flow, node};

/// Runs and confirmations the gauges currently count.
#[derive(Default)]
struct Live {
    /// run id -> flow, for `madeira_runs_active`.
    active: HashMap<String, String>,
    /// (run id, node) -> flow, for `madeira_manual_confirm_pending`.
    confirm: HashSet<(String, String, String)>,
}

/// Feeds `Metrics` from the engine.
pub struct MetricsObserver {
    metrics: Metrics,
    live: Mutex<Live>,
}

impl MetricsObserver {
    pub fn new(metrics: Metrics) -> Arc<Self> {
        Arc::new(Self { metrics, live: Mutex::default() })
    }

    fn live(&self) -> MutexGuard<'_, Live> {
        match self.live.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn run_active(&self, live: &mut Live, run_id: &str, flow_name: &str) {
        if live.active.insert(run_id.to_string(), flow_name.to_string()).is_none() {
            self.metrics.runs_active.get_or_create(&flow(flow_name)).inc();
        }
    }

    fn run_ended(&self, live: &mut Live, run_id: &str) {
        if let Some(flow_name) = live.active.remove(run_id) {
            self.metrics.runs_active.get_or_create(&flow(&flow_name)).dec();
        }
        let ended: Vec<_> = live.confirm.iter().filter(|(r, _, _)| r == run_id).cloned().collect();
        for key in ended {
            self.confirm_left(live, key);
        }
    }

    fn confirm_entered(&self, live: &mut Live, key: (String, String, String)) {
        let labels = node(&key.2, &key.1);
        if live.confirm.insert(key) {
            self.metrics.manual_confirm_pending.get_or_create(&labels).inc();
        }
    }

    fn confirm_left(&self, live: &mut Live, key: (String, String, String)) {
        if live.confirm.remove(&key) {
            self.metrics.manual_confirm_pending.get_or_create(&node(&key.2, &key.1)).dec();
        }
    }

    fn node_event(&self, live: &mut Live, e: &RunEvent, name: &str) {
        if e.to == "RETRYING" {
            self.metrics.node_retries.get_or_create(&node(&e.flow, name)).inc();
        }
        let confirm = NodeState::ManualConfirm.as_str();
        if e.to != confirm && e.from != confirm {
            return;
        }
        let key = (e.run_id.clone(), name.to_string(), e.flow.clone());
        if e.to == confirm {
            self.confirm_entered(live, key);
        } else {
            self.confirm_left(live, key);
        }
    }

    fn run_event(&self, live: &mut Live, e: &RunEvent) {
        match e.to.as_str() {
            "RUNNING" => self.run_active(live, &e.run_id, &e.flow),
            "SUCCESS" | "FAILED" | "CANCELLED" => {
                self.run_ended(live, &e.run_id);
                let labels = FlowStatusLabels { flow: e.flow.clone(), status: e.to.clone() };
                self.metrics.runs.get_or_create(&labels).inc();
                if e.to == "SUCCESS" {
                    let at = e.at_ms as f64 / 1000.0;
                    self.metrics.flow_last_success.get_or_create(&flow(&e.flow)).set(at);
                }
            }
            _ => {}
        }
    }

    /// Sets the last-success gauge of `flow` (seeded from the store at start).
    pub fn seed_last_success(&self, flow_name: &str, at_unix_seconds: f64) {
        let gauge = self.metrics.flow_last_success.get_or_create(&flow(flow_name));
        if gauge.get() < at_unix_seconds {
            gauge.set(at_unix_seconds);
        }
    }
}

impl EngineObserver for MetricsObserver {
    fn transitions(&self, events: &[RunEvent]) {
        let mut live = self.live();
        for e in events {
            match &e.node {
                Some(name) => self.node_event(&mut live, e, name),
                None => self.run_event(&mut live, e),
            }
        }
    }

    fn dispatched(&self, _flow: &str, _node: &str, latency: Duration) {
        self.metrics.dispatch_latency.observe(latency.as_secs_f64());
    }

    fn attempt_finished(&self, o: &AttemptOutcome<'_>) {
        let labels = NodeStatusLabels { flow: o.flow.into(), node: o.node.into(), status: o.outcome.into() };
        self.metrics.node_attempts.get_or_create(&labels).inc();
        self.metrics.node_duration.get_or_create(&node(o.flow, o.node)).observe(o.duration.as_secs_f64());
    }

    fn run_resumed(&self, snap: &RunSnapshot) {
        if snap.state.is_terminal() {
            return;
        }
        let mut live = self.live();
        self.run_active(&mut live, &snap.run_id, &snap.flow.name);
        for (i, n) in snap.nodes.iter().enumerate() {
            if n.state == NodeState::ManualConfirm {
                let key = (snap.run_id.clone(), snap.flow.nodes[i].id.clone(), snap.flow.name.clone());
                self.confirm_entered(&mut live, key);
            }
        }
    }

    fn run_finished(&self, snap: &RunSnapshot) {
        self.run_ended(&mut self.live(), &snap.run_id);
    }

    fn throttle(&self, flow_name: &str, node_name: &str, in_use: u32, waiting: usize) {
        let labels = node(flow_name, node_name);
        self.metrics.node_permits_in_use.get_or_create(&labels).set(i64::from(in_use));
        self.metrics.node_queue_depth.get_or_create(&labels).set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    fn node_stalled(&self, w: &NodeWatch<'_>) {
        let gauge = self.metrics.nodes_stalled.get_or_create(&node(w.flow, w.node));
        if w.active {
            gauge.inc()
        } else {
            gauge.dec()
        };
    }

    fn node_slow(&self, w: &NodeWatch<'_>) {
        let gauge = self.metrics.nodes_slow.get_or_create(&node(w.flow, w.node));
        if w.active {
            gauge.inc()
        } else {
            gauge.dec()
        };
    }

    fn store_up(&self, up: bool) {
        self.metrics.store_up.set(i64::from(up));
        if !up {
            self.metrics.store_outages.inc();
        }
    }

    fn cron_fired(&self, flow_name: &str, lateness: Duration) {
        let labels = flow(flow_name);
        self.metrics.cron_lateness.get_or_create(&labels).observe(lateness.as_secs_f64());
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let scheduled = now.saturating_sub(lateness).as_secs_f64();
        self.metrics.flow_last_scheduled.get_or_create(&labels).set(scheduled);
    }

    fn cron_clock_jump(&self, _by_ms: i64) {
        self.metrics.cron_clock_jumps.inc();
    }

    fn next_deadline(&self, flow_name: &str, at_unix_seconds: Option<f64>) {
        match at_unix_seconds {
            Some(at) => {
                self.metrics.flow_deadline.get_or_create(&flow(flow_name)).set(at);
            }
            None => {
                self.metrics.flow_deadline.remove(&flow(flow_name));
            }
        }
    }

    fn next_run(&self, flow_name: &str, at_unix_seconds: Option<f64>) {
        match at_unix_seconds {
            Some(at) => {
                self.metrics.flow_next_run.get_or_create(&flow(flow_name)).set(at);
            }
            None => {
                self.metrics.flow_next_run.remove(&flow(flow_name));
            }
        }
    }
}
