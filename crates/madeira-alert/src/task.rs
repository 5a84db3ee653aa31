//! The alert task: owns aggregation. It takes events (failed and succeeded runs,
//! raised and resolved alerts, test requests) in batches, persists the alerts they
//! change and the deliveries they create in one store write, then hands the
//! deliveries to each channel's worker. On start it reloads what was open, so
//! pending groups still fire and pending deliveries are still sent.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use madeira_core::NodeState;
use madeira_store::{AlertBatch, DeliveryRow, Fence, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, error, info, info_span};

use crate::aggregate::{Aggregator, Changes};
use crate::model::{Alert, AlertStatus, Failure, Raise};
use crate::route::Router;
use crate::worker::{Item, Queued, Shared, TestOutcome, Worker, WorkerMsg};

/// Most events applied before one store write.
/// The name of the cluster-wide role in the store's `leaders` table.
pub(crate) const ROLE: &str = "alerts";
/// How often the leader reads the inbox and followers flush what they could not push.
pub(crate) const POLL_MS: i64 = 250;
/// How often open stall and slow alerts are checked against the run store.
pub(crate) const PROBE_MS: i64 = 30_000;
const BATCH_MAX: usize = 4096;
const PRUNE_EVERY_MS: i64 = 3600 * 1000;

/// What aggregation takes in; also the form kept in a cluster's inbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Event {
    Failed(Failure),
    Succeeded {
        run_id: String,
        /// The flow, when it is scheduled (cron or observed): its success resolves
        /// the flow's open failure alerts, not only those that counted this run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        recovers: Option<String>,
    },
    Raise(Box<Raise>),
    /// A run is held behind a failed run (`after`): listed on its failure alert.
    Held(crate::model::Held),
    /// `cause`: the transition's cause when a node's change resolves it
    /// (`fallback`: the fallback ran instead of an answer).
    Resolve {
        key: String,
        #[serde(default)]
        cause: Option<String>,
    },
    /// A stalled or slow node of `run_id` moved on: the alert `key` stops counting it.
    Leave {
        key: String,
        run_id: String,
    },
    /// An operator acknowledged or silenced the open alert `id`.
    Mark {
        id: String,
        what: crate::aggregate::MarkKind,
        mark: crate::model::Mark,
    },
}

pub(crate) enum Input {
    Event(Event),
    Test { channel: String, reply: oneshot::Sender<TestOutcome> },
    Settle(oneshot::Sender<()>),
}

/// This replica's part in the cluster.
pub(crate) struct Cluster {
    pub replica: String,
    pub lease_ms: i64,
    pub leading: bool,
    /// When to renew (leader) or ask again (follower).
    pub campaign_at: i64,
    /// Until when the last successful renewal holds.
    pub lease_until: i64,
    /// Events not yet in the store's inbox (the store was unreachable).
    pub outbox: Vec<Json>,
}

/// Where a node of a run stands, for the safety net.
#[async_trait]
pub trait NodeProbe: Send + Sync + 'static {
    /// The node's state while its run is unfinished; `None` when the run ended or
    /// is unknown.
    async fn node_state(&self, run_id: &str, node: &str) -> Result<Option<NodeState>, StoreError>;
}

pub struct AlertTask {
    pub(crate) shared: Arc<Shared>,
    pub(crate) rx: mpsc::UnboundedReceiver<Input>,
    pub(crate) agg: Aggregator,
    pub(crate) router: Router,
    pub(crate) workers: HashMap<String, mpsc::UnboundedSender<WorkerMsg>>,
    pub(crate) idle_workers: Vec<Worker>,
    pub(crate) retention_ms: i64,
    pub(crate) intervals: crate::aggregate::Intervals,
    /// Set when replicas share the store (`AlertTask::clustered`).
    pub(crate) cluster: Option<Cluster>,
    /// Checks open stall and slow alerts against the run store (`with_probe`).
    pub(crate) probe: Option<Arc<dyn NodeProbe>>,
}

impl AlertTask {
    /// Runs until `cancel` fires: recovers (alone; in a cluster once it leads),
    /// starts the channel workers, loops.
    pub async fn run(mut self, cancel: CancellationToken) {
        if self.cluster.is_none() {
            self.recover().await;
        }
        let tracker = TaskTracker::new();
        for worker in self.idle_workers.drain(..) {
            let span = info_span!("alert_channel", channel = %worker.name());
            tracker.spawn(worker.run(cancel.clone()).instrument(span));
        }
        let clock = self.shared.clock.clone();
        let mut prune_at = clock.now_ms();
        let mut tick_at = clock.now_ms();
        let mut probe_at = clock.now_ms() + PROBE_MS;
        loop {
            if self.cluster.is_some() && clock.now_ms() >= tick_at {
                self.cluster_tick().await;
                tick_at = clock.now_ms() + POLL_MS;
            }
            let now = clock.now_ms();
            let mut wake = i64::MAX;
            if self.aggregating() {
                if now >= prune_at {
                    self.prune(now).await;
                    prune_at = now + PRUNE_EVERY_MS;
                }
                if now >= probe_at {
                    self.probe_watched().await;
                    probe_at = now + PROBE_MS;
                }
                wake = self.agg.next_due().map_or(prune_at, |due| due.min(prune_at));
                if self.probe.is_some() {
                    wake = wake.min(probe_at);
                }
            }
            if self.cluster.is_some() {
                wake = wake.min(tick_at);
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                input = self.rx.recv() => {
                    let Some(first) = input else { break };
                    let mut batch = vec![first];
                    while batch.len() < BATCH_MAX {
                        match self.rx.try_recv() {
                            Ok(more) => batch.push(more),
                            Err(_) => break,
                        }
                    }
                    self.process(batch).await;
                }
                _ = clock.sleep_until(wake) => {
                    if self.aggregating() {
                        let mut out = Changes::default();
                        self.agg.flush_due(clock.now_ms(), &mut out);
                        self.apply(out, Vec::new()).await;
                    }
                }
            }
        }
        self.leave_cluster().await;
        tracker.close();
        tracker.wait().await;
        info!("alert task stopped");
    }

    async fn process(&mut self, batch: Vec<Input>) {
        let now = self.shared.clock.now_ms();
        let mut out = Changes::default();
        let mut settle = Vec::new();
        for input in batch {
            match input {
                Input::Event(event) if self.cluster.is_some() => self.queue_for_inbox(&event),
                Input::Event(event) => self.aggregate(event, now, &mut out),
                Input::Test { channel, reply } => self.test(channel, reply, now),
                Input::Settle(reply) => settle.push(reply),
            }
        }
        // In a cluster the events wait for the next tick (`POLL_MS`): one
        // insert per tick instead of one per finished run.
        if self.cluster.is_none() {
            self.agg.flush_due(now, &mut out);
            self.apply(out, Vec::new()).await;
        }
        for reply in settle {
            self.settle_workers(reply);
        }
    }

    pub(crate) fn aggregate(&mut self, event: Event, now: i64, out: &mut Changes) {
        match event {
            Event::Failed(f) => self.agg.failure(f, now, out),
            Event::Succeeded { run_id, recovers } => {
                self.agg.run_succeeded(&run_id, now, out);
                if let Some(flow) = recovers {
                    self.agg.flow_recovered(&flow, &run_id, now, out);
                }
            }
            Event::Raise(r) => self.agg.raise(*r, now, out),
            Event::Held(h) => {
                self.agg.held(h, now, out);
            }
            Event::Resolve { key, cause } => self.agg.resolve_key(&key, cause.as_deref(), now, out),
            Event::Leave { key, run_id } => self.agg.leave(&key, &run_id, now, out),
            Event::Mark { id, what, mark } => {
                if let Err(e) = self.agg.mark(&id, what, mark, out) {
                    tracing::warn!(error = %e, "an operator's mark of an alert not applied");
                }
            }
        }
    }

    /// Answers `reply` once every worker has handled what it was given so far.
    fn settle_workers(&self, reply: oneshot::Sender<()>) {
        let acks: Vec<_> = self
            .workers
            .values()
            .map(|worker| {
                let (tx, rx) = oneshot::channel();
                let _ = worker.send(WorkerMsg::Settle(tx));
                rx
            })
            .collect();
        tokio::spawn(async move {
            for ack in acks {
                let _ = ack.await;
            }
            let _ = reply.send(());
        });
    }

    fn test(&self, channel: String, reply: oneshot::Sender<TestOutcome>, now: i64) {
        let Some(worker) = self.workers.get(&channel) else {
            let error = Some(format!("no channel named `{channel}`"));
            let _ = reply.send(TestOutcome { channel, delivered: false, error });
            return;
        };
        let row = new_delivery(None, &channel, "test", now);
        let q = Queued { row, item: Item::Test(reply), mentions: Default::default() };
        let _ = worker.send(WorkerMsg::Deliver(vec![q]));
    }

    /// Persists what changed (and, in a cluster, the inbox events `consumed`
    /// through, under the leader's fence) and hands new deliveries to the workers.
    /// False when a cluster leader's write failed: it has stepped down.
    pub(crate) async fn apply(&mut self, out: Changes, consumed: Vec<i64>) -> bool {
        if out.is_empty() && consumed.is_empty() {
            return true;
        }
        let now = self.shared.clock.now_ms();
        let mut batch = AlertBatch { consumed, ..AlertBatch::default() };
        if let Some(c) = &self.cluster {
            batch.fence = Some(Fence { role: ROLE.into(), holder: c.replica.clone() });
        }
        let mut seen = HashSet::new();
        for id in &out.touched {
            if seen.insert(id.as_str())
                && let Some(alert) = self.agg.get(id)
            {
                batch.alerts.push(alert.to_row());
            }
        }
        batch.alerts.extend(out.removed.iter().map(Alert::to_row));
        for id in &out.grouped {
            if let Some(alert) = self.agg.get(id).filter(|a| a.status == AlertStatus::Firing) {
                for (channel, _) in self.router.route(alert) {
                    self.shared.metrics.suppressed(&channel, "grouped", 1);
                }
            }
        }
        let mut queued: HashMap<String, Vec<Queued>> = HashMap::new();
        for id in &out.fire {
            if let Some(alert) = self.agg.get(id) {
                let alert = Arc::new(alert.clone());
                self.enqueue(alert, "firing", now, &mut batch, &mut queued);
            }
        }
        for (ids, kind) in [(&out.update, "update"), (&out.remind, "reminder")] {
            for id in ids {
                if let Some(alert) = self.agg.get(id) {
                    let alert = Arc::new(alert.clone());
                    self.enqueue(alert, kind, now, &mut batch, &mut queued);
                }
            }
        }
        for alert in out.removed.into_iter().filter(|a| out.resolve.contains(&a.id)) {
            self.enqueue(Arc::new(alert), "resolved", now, &mut batch, &mut queued);
        }
        if let Err(e) = self.shared.store.write_alerts(&batch).await {
            if self.cluster.is_some() {
                // The inbox still holds the events: the next leader (maybe this
                // replica again, after reloading) aggregates them from the store.
                error!(error = %e, "cannot save alerts; handing aggregation back to the store");
                self.step_down("its alert write failed");
                return false;
            }
            error!(error = %e, "cannot save alerts; delivering anyway");
        }
        for (channel, items) in queued {
            if let Some(worker) = self.workers.get(&channel) {
                let _ = worker.send(WorkerMsg::Deliver(items));
            }
        }
        true
    }

    fn enqueue(
        &self,
        alert: Arc<Alert>,
        kind: &str,
        now: i64,
        batch: &mut AlertBatch,
        queued: &mut HashMap<String, Vec<Queued>>,
    ) {
        let routes = self.router.route(&alert);
        if routes.is_empty() && !self.workers.is_empty() {
            info!(alert = %alert.id, summary = %alert.summary, "alert matches no route; recorded only");
        }
        for (channel, mentions) in routes {
            if kind == "firing" && alert.count > 1 {
                self.shared.metrics.suppressed(&channel, "grouped", alert.count - 1);
            }
            let row = new_delivery(Some(&alert.id), &channel, kind, now);
            batch.deliveries.push(row.clone());
            queued.entry(channel).or_default().push(Queued {
                row,
                item: Item::Alert(alert.clone()),
                mentions,
            });
        }
    }

    async fn prune(&self, now: i64) {
        match self.shared.store.prune_alerts(now - self.retention_ms).await {
            Ok(0) => {}
            Ok(n) => info!(alerts = n, "pruned old resolved alerts"),
            Err(e) => error!(error = %e, "alert retention sweep failed"),
        }
    }

    /// Reloads open alerts and pending deliveries after a restart (in a cluster:
    /// on taking the lead).
    /// False when the store could not be read.
    pub(crate) async fn recover(&mut self) -> bool {
        let open = match self.shared.store.open_alerts().await {
            Ok(open) => open,
            Err(e) => {
                error!(error = %e, "cannot load open alerts; starting without them");
                return false;
            }
        };
        let mut alerts = HashMap::new();
        for row in &open.alerts {
            match Alert::from_row(row) {
                Ok(alert) => {
                    alerts.insert(alert.id.clone(), Arc::new(alert.clone()));
                    self.agg.restore(alert);
                }
                Err(e) => error!(error = %e, "skipping an unreadable alert"),
            }
        }
        let (queued, failed) = crate::recover::rebuild(open.deliveries, &alerts, &self.router, &self.workers);
        if !failed.is_empty() {
            let batch = AlertBatch { deliveries: failed, ..AlertBatch::default() };
            if let Err(e) = self.shared.store.write_alerts(&batch).await {
                error!(error = %e, "cannot mark orphaned deliveries failed");
            }
        }
        let mut pending = 0;
        for (channel, items) in queued {
            pending += items.len();
            if let Some(worker) = self.workers.get(&channel) {
                let _ = worker.send(WorkerMsg::Deliver(items));
            }
        }
        for alert in alerts.values().filter(|a| a.status == AlertStatus::Firing) {
            for (channel, _) in self.router.route(alert) {
                if let Some(worker) = self.workers.get(&channel) {
                    let _ = worker.send(WorkerMsg::Track(alert.clone()));
                }
            }
        }
        if !alerts.is_empty() || pending > 0 {
            info!(alerts = alerts.len(), deliveries = pending, "alerts resumed from the store");
        }
        true
    }
}

pub(crate) fn new_delivery(alert_id: Option<&str>, channel: &str, kind: &str, now: i64) -> DeliveryRow {
    DeliveryRow {
        id: uuid::Uuid::now_v7().to_string(),
        alert_id: alert_id.map(str::to_string),
        channel: channel.to_string(),
        kind: kind.to_string(),
        status: "pending".into(),
        attempts: 0,
        last_error: None,
        digest_id: None,
        created_at: now,
        sent_at: None,
    }
}

#[cfg(test)]
mod tests {
    use super::Event;
    use crate::model::{Held, Raise, Severity};

    /// Events kept in a cluster's inbox read back as written (a held run, a raise
    /// naming the failed run that holds it).
    #[test]
    fn inbox_events_read_back_as_written() {
        let held = Held {
            run_id: "b1".into(),
            flow: "warehouse-clean".into(),
            biz_date: "2026-12-04".into(),
            root_run: "a1".into(),
            root_flow: "payments-pull".into(),
            root_node: Some("pull".into()),
        };
        let raise = Raise {
            key: "deadline:warehouse-clean:2026-12-04".into(),
            alertname: "MadeiraDeadlineMissed".into(),
            severity: Severity::Critical,
            flow: Some("warehouse-clean".into()),
            node: None,
            labels: Default::default(),
            summary: "late".into(),
            description: None,
            run_id: Some("b1".into()),
            fallback_note: None,
            held_by: Some("a1".into()),
        };
        for event in [Event::Held(held.clone()), Event::Raise(Box::new(raise))] {
            let text = serde_json::to_string(&event).expect("encode");
            let back: Event = serde_json::from_str(&text).expect("decode");
            assert_eq!(serde_json::to_string(&back).expect("encode"), text);
        }
        let text = serde_json::to_string(&Event::Held(held)).expect("encode");
        assert!(text.starts_with(r#"{"kind":"held","run_id":"b1""#), "{text}");
    }
}
