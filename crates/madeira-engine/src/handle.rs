//! `EngineHandle`: the cheap-to-clone way the API, CLI and demo talk to the engine
//! — apply flows, trigger runs (idempotency, overlap, routing), act on nodes.

use std::sync::Arc;

use madeira_core::keys::RunKey;
use madeira_core::{Command, FlowDef};
use madeira_store::{CreateOutcome, NewRun, Store};
use serde_json::Value as Json;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::creator::CreateRequest;
use crate::envelope::Envelope;
use crate::lease::Holder;
use crate::stats::EngineStats;
use crate::wake::Wake;
use crate::{ApplyOutcome, EngineError, FlowCache, RunEvent, clock::now_ms};

#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Envelope>,
    create: mpsc::Sender<CreateRequest>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) flows: FlowCache,
    events: broadcast::Sender<Arc<RunEvent>>,
    stats: Arc<EngineStats>,
    /// Names of flows whose definition or pause state changed (for the scheduler).
    pub(crate) flow_changes: broadcast::Sender<String>,
    throttle_view: crate::ThrottleView,
    waiting: crate::gate::WaitingNodes,
    pub(crate) holder: Holder,
    pub(crate) wake: Wake,
    health: Arc<crate::health::StoreHealth>,
    live_logs: crate::LiveLogs,
    /// Held while this process starts a paused flow's queued events (`events`).
    pub(crate) event_drain: Arc<tokio::sync::Mutex<()>>,
    /// Sub-flow attempts waiting for their child run's end.
    pub(crate) children: crate::subflow::Children,
}

/// What a handle shares with its engine.
pub(crate) struct Shared {
    pub tx: mpsc::Sender<Envelope>,
    /// Run creation requests, group-committed by the creator task.
    pub create: mpsc::Sender<CreateRequest>,
    pub store: Arc<dyn Store>,
    pub flows: FlowCache,
    pub events: broadcast::Sender<Arc<RunEvent>>,
    pub stats: Arc<EngineStats>,
    pub throttle_view: crate::ThrottleView,
    pub waiting: crate::gate::WaitingNodes,
    pub holder: Holder,
    pub wake: Wake,
    pub health: Arc<crate::health::StoreHealth>,
    pub live_logs: crate::LiveLogs,
}

#[derive(Debug, Clone)]
pub struct TriggerRequest {
    pub flow: String,
    pub params: Json,
    pub idempotency_key: Option<String>,
    /// `manual`, `cron`, `event`, ...
    pub trigger: String,
    pub actor: String,
    /// Run this version instead of the routed/latest one.
    pub version: Option<u32>,
    /// The run's business date, given by the caller (`--biz-date`, the API's
    /// `biz_date`, a message trigger's `biz_date:` expression).
    pub biz_date: Option<chrono::NaiveDate>,
    /// The instant a business date not given follows from (a cron tick; now
    /// when `None`), by the flow's `biz_date` rule.
    pub at_ms: Option<i64>,
}

impl TriggerRequest {
    /// A manual trigger of `flow`'s routed version by `actor`: no params, key or
    /// business date (set the fields for more).
    pub fn manual(flow: &str, actor: &str) -> Self {
        Self {
            flow: flow.into(),
            params: serde_json::json!({}),
            idempotency_key: None,
            trigger: "manual".into(),
            actor: actor.into(),
            version: None,
            biz_date: None,
            at_ms: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerOutcome {
    pub run_id: String,
    pub flow: String,
    pub version: u32,
    /// False when the idempotency key had already made this run.
    pub created: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeActionKind {
    Confirm,
    Reject,
    Rerun { downstream: bool },
    MarkSuccess,
    Skip,
}

impl NodeActionKind {
    pub fn name(self) -> &'static str {
        match self {
            NodeActionKind::Confirm => "confirm",
            NodeActionKind::Reject => "reject",
            NodeActionKind::Rerun { downstream: false } => "rerun",
            NodeActionKind::Rerun { downstream: true } => "rerun_downstream",
            NodeActionKind::MarkSuccess => "mark_success",
            NodeActionKind::Skip => "skip",
        }
    }
}

/// An operator action on a run (`node: None` with `kind: None` cancels the run).
#[derive(Debug, Clone)]
pub struct ActionRequest {
    pub run_id: String,
    pub node: Option<String>,
    pub kind: Option<NodeActionKind>,
    pub actor: String,
    pub reason: Option<String>,
}

impl EngineHandle {
    pub(crate) fn new(shared: Shared) -> Self {
        let Shared {
            tx,
            create,
            store,
            flows,
            events,
            stats,
            throttle_view,
            waiting,
            holder,
            wake,
            health,
            live_logs,
        } = shared;
        let (flow_changes, _) = broadcast::channel(4096);
        Self {
            tx,
            create,
            store,
            flows,
            events,
            stats,
            flow_changes,
            throttle_view,
            waiting,
            holder,
            wake,
            health,
            live_logs,
            event_drain: Arc::default(),
            children: Default::default(),
        }
    }

    /// `Err(the last error)` while the store cannot write (disk full, I/O error,
    /// lost connection, deleted store file): `/readyz` answers 503 with it.
    pub fn store_status(&self) -> Result<(), String> {
        self.health.status()
    }

    /// Writes that failed because the store could not write, since start.
    pub fn store_write_failures(&self) -> u64 {
        self.health.failures()
    }

    /// Live output of attempts (the sidecar link appends to it as jobs print).
    pub fn live_logs(&self) -> &crate::LiveLogs {
        &self.live_logs
    }

    /// The output of `node`'s attempt `attempt` (default: its latest with live
    /// output) in `run_id` from byte `offset` on; `None` when none was seen (ended
    /// attempts' tails are in the store: `Store::logs`). Resume with `next_offset`.
    pub fn attempt_log(
        &self,
        run_id: &str,
        node: &str,
        attempt: Option<u32>,
        offset: u64,
    ) -> Option<crate::LogSlice> {
        let attempt = attempt.or_else(|| self.live_logs.latest_attempt(run_id, node))?;
        self.live_logs.read(&(run_id.to_string(), node.to_string(), attempt), offset)
    }

    /// A receiver woken when that attempt's output grows or it ends (its value is
    /// the end offset); `None` when none was seen. For `logs -f` and the console's SSE.
    pub fn follow_log(
        &self,
        run_id: &str,
        node: &str,
        attempt: Option<u32>,
    ) -> Option<tokio::sync::watch::Receiver<u64>> {
        let attempt = attempt.or_else(|| self.live_logs.latest_attempt(run_id, node))?;
        self.live_logs.subscribe(&(run_id.to_string(), node.to_string(), attempt))
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Records an operator's action that changes no run (an alert acknowledged
    /// or silenced): committed before the caller answers.
    pub async fn audit(&self, record: madeira_store::AuditRecord) -> Result<(), EngineError> {
        let batch = madeira_store::Batch { audit: vec![record], ..Default::default() };
        self.store.commit(&batch).await?;
        Ok(())
    }

    /// This replica's name (`replica_id`), as it appears in run leases.
    pub fn replica_id(&self) -> &str {
        &self.holder.owner
    }

    /// Committed state changes as they happen. Each event is shared (`Arc`), so a
    /// subscriber costs no copy of it; one that lags gets `Lagged`.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<RunEvent>> {
        self.events.subscribe()
    }

    /// Permits in use and waiting runs of a throttled node.
    pub fn throttle_state(&self, flow: &str, node: &str) -> crate::ThrottleState {
        self.throttle_view.get(flow, node)
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Validates and stores a flow (a new version only when its content changed).
    pub async fn apply_flow(&self, file: &str, source: &str) -> Result<ApplyOutcome, EngineError> {
        madeira_core::text::check_text(file, source).map_err(EngineError::BadText)?;
        let outcome = self.flows.apply(self.store.as_ref(), file, source).await?;
        if outcome.created {
            let _ = self.flow_changes.send(outcome.flow.clone());
        }
        Ok(outcome)
    }

    /// Flow names whose schedule may have changed (applied, paused, resumed).
    pub fn subscribe_flow_changes(&self) -> broadcast::Receiver<String> {
        self.flow_changes.subscribe()
    }

    /// Pauses or resumes a flow's triggers, audited with the actor; a paused flow
    /// is not backfilled either (its backfill steps wait). A resume starts the
    /// events kept while paused (`events`) and advances the backfills before it answers, holding
    /// the drain lock from the store update on so no other drain reports them.
    pub async fn set_paused(
        &self,
        flow: &str,
        paused: bool,
        actor: &str,
        reason: Option<String>,
    ) -> Result<crate::DrainReport, EngineError> {
        let drain = if paused { None } else { Some(self.event_drain.lock().await) };
        if !self.store.set_paused(flow, paused, now_ms()).await? {
            return Err(EngineError::FlowNotFound(flow.to_string()));
        }
        let audit = madeira_store::AuditRecord {
            at: now_ms(),
            actor: actor.to_string(),
            action: if paused { "pause" } else { "resume" }.to_string(),
            run_id: None,
            node: None,
            reason,
            details: Some(serde_json::json!({"flow": flow})),
        };
        self.store.commit(&madeira_store::Batch { audit: vec![audit], ..Default::default() }).await?;
        let report = match drain {
            Some(_held) => self.drain_locked(flow).await,
            None => crate::DrainReport { remaining: self.queued_count(flow).await, ..Default::default() },
        };
        let _ = self.flow_changes.send(flow.to_string());
        if !paused {
            // Backfill steps of the flow waited for this resume.
            self.sweep_backfills().await;
        }
        Ok(report)
    }

    /// The parsed flow at `version` (latest when `None`).
    pub async fn flow(&self, name: &str, version: Option<u32>) -> Result<Arc<FlowDef>, EngineError> {
        let version = match version {
            Some(v) => v,
            None => {
                let record = self
                    .store
                    .get_flow(name)
                    .await?
                    .ok_or_else(|| EngineError::FlowNotFound(name.to_string()))?;
                record.latest_version
            }
        };
        self.flows.get(self.store.as_ref(), name, version).await
    }

    /// The estate map for business date `date` (`YYYY-MM-DD`).
    pub async fn estate_map(&self, date: &str) -> Result<Vec<crate::estate_map::MapFlow>, EngineError> {
        crate::estate_map::build(self.store.as_ref(), &self.flows, date, crate::now_ms()).await
    }

    /// Starts, for `biz_date`, every flow whose `flow_succeeded` trigger names
    /// `upstream` (once per date: key `after:<upstream>:<biz_date>`).
    pub async fn fire_flow_succeeded(&self, upstream: &str, biz_date: &str) {
        let date = match madeira_core::estate::parse_date(biz_date) {
            Ok(d) => d,
            Err(e) => {
                return tracing::warn!(upstream, biz_date, error = %e, "flow_succeeded: bad business date");
            }
        };
        let flows = match self.flows.triggered_by(self.store.as_ref(), upstream).await {
            Ok(flows) => flows,
            Err(e) => return tracing::error!(upstream, error = %e, "flow_succeeded: cannot list flows"),
        };
        for def in flows {
            let req = TriggerRequest {
                flow: def.name.clone(),
                params: serde_json::json!({}),
                idempotency_key: Some(
                    RunKey::After { upstream: upstream.to_string(), biz_date: biz_date.to_string() }.into(),
                ),
                trigger: "after".into(),
                actor: format!("flow_succeeded:{upstream}"),
                version: None,
                biz_date: Some(date),
                at_ms: None,
            };
            match self.trigger(req).await {
                Ok(out) => {
                    tracing::info!(upstream, biz_date, flow = %def.name, run_id = %out.run_id, created = out.created, "flow_succeeded: run started")
                }
                Err(e) => {
                    tracing::warn!(upstream, biz_date, flow = %def.name, error = %e, "flow_succeeded: run not started")
                }
            }
        }
    }

    /// Creates a run, or returns the one its idempotency key already made. A
    /// manual trigger's key is the caller's: it may not take a namespace Madeira
    /// makes keys in, and reused with other params it is refused.
    pub async fn trigger(&self, req: TriggerRequest) -> Result<TriggerOutcome, EngineError> {
        madeira_core::text::check_json("params", &req.params).map_err(EngineError::BadText)?;
        if let Some(key) = &req.idempotency_key {
            madeira_core::text::check_text("idempotency key", key).map_err(EngineError::BadText)?;
        }
        let caller_key = if req.trigger == "manual" { req.idempotency_key.clone() } else { None };
        if let Some(key) = &caller_key
            && let Err(problem) = RunKey::caller(key)
        {
            return Err(EngineError::BadIdempotencyKey { key: key.clone(), problem: problem.to_string() });
        }
        let params = caller_key.is_some().then(|| req.params.clone());
        let latest = self.flow(&req.flow, None).await?;
        if latest.observe {
            return Err(EngineError::ObserveOnly(req.flow));
        }
        let (version, routing_warning) = match req.version {
            Some(v) => (v, None),
            None => crate::fallbacks::route(&latest, &req.params, self.latest_version(&req.flow).await?),
        };
        let def = self.flows.get(self.store.as_ref(), &req.flow, version).await?;
        let cals = self.flows.calendars();
        let biz_date =
            crate::bizdates::biz_date_of(&def, req.biz_date, req.at_ms.unwrap_or_else(now_ms), &cals)?;
        let one_per_biz_date = def.business.declared && req.trigger.starts_with("cron");
        let (after, node_after) = crate::estate::waits(&def, &biz_date, &self.flows.calendars())?;
        let wait_reason = match def.concurrency.depends_on_past {
            true => crate::bizdates::past_wait(self.store.as_ref(), &def, &biz_date, &cals).await?,
            false => None,
        };
        let run = NewRun {
            id: uuid::Uuid::now_v7().to_string(),
            flow: req.flow.clone(),
            version,
            params: req.params,
            idempotency_key: req.idempotency_key,
            trigger: req.trigger,
            node_names: def.nodes.iter().map(|n| n.id.clone()).collect(),
            max_active_runs: def.concurrency.max_active_runs,
            overlap: def.concurrency.on_overlap,
            throttles: def
                .nodes
                .iter()
                .filter_map(|n| {
                    n.throttle.map(|t| madeira_store::ThrottleClaim {
                        node: n.id.clone(),
                        max_permits: t.max_permits,
                        queue_size: t.queue_size,
                    })
                })
                .collect(),
            actor: req.actor.clone(),
            now_ms: now_ms(),
            trace_context: Some(crate::TraceContext::new_root().traceparent()),
            lease: None,
            biz_date: Some(biz_date),
            one_per_biz_date,
            after,
            node_after,
            wait_reason,
        };
        let held = run.wait_reason.is_some();
        let waits_after = !run.after.is_empty();
        let (reply, answer) = oneshot::channel();
        let request = CreateRequest { run, flow: def, reply };
        self.create.send(request).await.map_err(|_| EngineError::ShuttingDown)?;
        match answer.await.map_err(|_| EngineError::ShuttingDown)?? {
            CreateOutcome::Existing { run_id, version } => {
                if let (Some(key), Some(params)) = (caller_key, params) {
                    self.same_params(&req.flow, &key, &run_id, &params).await?;
                }
                Ok(TriggerOutcome { run_id, flow: req.flow, version, created: false })
            }
            CreateOutcome::Throttled { node, claims, max_permits, queue_size } => {
                Err(EngineError::QueueFull { flow: req.flow, node, claims, max_permits, queue_size })
            }
            CreateOutcome::Skipped { active } => {
                Err(EngineError::OverlapSkipped { flow: req.flow, active: active.len() })
            }
            CreateOutcome::Paused => Err(EngineError::Paused(req.flow)),
            CreateOutcome::Created { run_id, cancel_previous, start } => {
                if held {
                    self.send(Envelope::Promote { flow: req.flow.clone() }).await?;
                }
                if waits_after && !start {
                    self.send(Envelope::Held { run_id: run_id.clone() }).await?;
                }
                if let Some(warning) = routing_warning {
                    crate::fallbacks::record_routing_fallback(
                        self.store.as_ref(),
                        &req.flow,
                        &run_id,
                        version,
                        warning,
                    )
                    .await;
                }
                for previous in cancel_previous {
                    let cancel = Envelope::Command {
                        run_id: previous,
                        cmd: Command::Cancel,
                        actor: req.actor.clone(),
                        audit: Some((
                            "cancel".into(),
                            Some(format!("cancel_previous: superseded by {run_id}")),
                        )),
                        answer_to: None,
                        reply: None,
                    };
                    self.send(cancel).await?;
                }
                Ok(TriggerOutcome { run_id, flow: req.flow, version, created: true })
            }
        }
    }

    async fn latest_version(&self, flow: &str) -> Result<u32, EngineError> {
        Ok(self
            .store
            .get_flow(flow)
            .await?
            .ok_or_else(|| EngineError::FlowNotFound(flow.to_string()))?
            .latest_version)
    }

    /// Applies an operator action through the engine; answers once it is durable
    /// (or refused, naming the current state). A run another replica holds gets
    /// the action forwarded to that replica.
    pub async fn act(&self, req: ActionRequest) -> Result<(), EngineError> {
        if let Some(reason) = &req.reason {
            madeira_core::text::check_text("reason", reason).map_err(EngineError::BadText)?;
        }
        match self.act_here(req.clone()).await {
            Err(EngineError::HeldElsewhere { owner, .. }) => self.forward(req, owner).await,
            other => other,
        }
    }

    /// Applies an operator action through this replica's engine.
    pub(crate) async fn act_here(&self, req: ActionRequest) -> Result<(), EngineError> {
        self.act_on(req, None).await
    }

    /// Applies an action here; when it is the forwarded action `answer_to`, its
    /// `ok` answer is committed with the change.
    pub(crate) async fn act_on(&self, req: ActionRequest, answer_to: Option<i64>) -> Result<(), EngineError> {
        let stored = self
            .store
            .load_run(&req.run_id)
            .await?
            .ok_or_else(|| EngineError::RunNotFound(req.run_id.clone()))?;
        let def = self.flows.get(self.store.as_ref(), &stored.run.flow, stored.run.version).await?;
        let (cmd, action) = match (&req.node, req.kind) {
            (Some(node), Some(kind)) => {
                let node = def.node_index(node).ok_or_else(|| EngineError::NodeNotFound {
                    run: req.run_id.clone(),
                    node: node.clone(),
                })?;
                let cmd = match kind {
                    NodeActionKind::Confirm => Command::Confirm { node },
                    NodeActionKind::Reject => Command::Reject { node },
                    NodeActionKind::Rerun { downstream } => Command::Rerun { node, downstream },
                    NodeActionKind::MarkSuccess => Command::MarkSuccess { node },
                    NodeActionKind::Skip => Command::Skip { node },
                };
                (cmd, kind.name())
            }
            _ => (Command::Cancel, "cancel"),
        };
        let (reply, answer) = oneshot::channel();
        self.send(Envelope::Command {
            run_id: req.run_id,
            cmd,
            actor: req.actor,
            audit: Some((action.to_string(), req.reason)),
            answer_to,
            reply: Some(reply),
        })
        .await?;
        answer.await.map_err(|_| EngineError::ShuttingDown)?
    }

    /// The run as the planner sees it, loaded from the store.
    pub async fn snapshot(&self, run_id: &str) -> Result<madeira_core::RunSnapshot, EngineError> {
        let stored =
            self.store.load_run(run_id).await?.ok_or_else(|| EngineError::RunNotFound(run_id.to_string()))?;
        let def = self.flows.get(self.store.as_ref(), &stored.run.flow, stored.run.version).await?;
        crate::snapshot::from_stored(stored, def)
    }

    /// Nodes waiting in INIT for their executor, with the reason.
    pub fn waiting(&self) -> &crate::gate::WaitingNodes {
        &self.waiting
    }

    pub(crate) async fn send_envelope(&self, envelope: Envelope) -> Result<(), EngineError> {
        self.send(envelope).await
    }

    /// Creates a run through the group-committing creator (which also claims it and
    /// hands it to the engine loop).
    pub(crate) async fn create(
        &self,
        run: madeira_store::NewRun,
        flow: Arc<FlowDef>,
    ) -> Result<CreateOutcome, EngineError> {
        let (reply, answer) = oneshot::channel();
        self.create.send(CreateRequest { run, flow, reply }).await.map_err(|_| EngineError::ShuttingDown)?;
        answer.await.map_err(|_| EngineError::ShuttingDown)?
    }

    /// Refuses a caller's key that made `run_id` with params other than `params`.
    async fn same_params(
        &self,
        flow: &str,
        key: &str,
        run_id: &str,
        params: &Json,
    ) -> Result<(), EngineError> {
        let stored =
            self.store.load_run(run_id).await?.ok_or_else(|| EngineError::RunNotFound(run_id.into()))?;
        if stored.run.params == *params {
            return Ok(());
        }
        Err(EngineError::IdempotencyKeyReused { key: key.into(), flow: flow.into(), run_id: run_id.into() })
    }

    async fn send(&self, envelope: Envelope) -> Result<(), EngineError> {
        self.tx.send(envelope).await.map_err(|_| EngineError::ShuttingDown)
    }
}
