//! `EngineHandle`: the cheap-to-clone way the API, CLI and demo talk to the engine
//! — apply flows, trigger runs (idempotency, overlap, routing), act on nodes.

use std::sync::Arc;

use madeira_core::{Command, FlowDef, RunState};
use madeira_store::{CreateOutcome, NewRun, Overlap, Store};
use serde_json::Value as Json;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::envelope::Envelope;
use crate::lease::Holder;
use crate::stats::EngineStats;
use crate::wake::Wake;
use crate::{ApplyOutcome, EngineError, FlowCache, RunEvent, clock::now_ms};

#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::Sender<Envelope>,
    pub(crate) store: Arc<dyn Store>,
    flows: FlowCache,
    events: broadcast::Sender<RunEvent>,
    stats: Arc<EngineStats>,
    pub(crate) holder: Holder,
    pub(crate) wake: Wake,
}

/// What a handle shares with its engine.
pub(crate) struct Shared {
    pub tx: mpsc::Sender<Envelope>,
    pub store: Arc<dyn Store>,
    pub flows: FlowCache,
    pub events: broadcast::Sender<RunEvent>,
    pub stats: Arc<EngineStats>,
    pub holder: Holder,
    pub wake: Wake,
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
        let Shared { tx, store, flows, events, stats, holder, wake } = shared;
        Self { tx, store, flows, events, stats, holder, wake }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn subscribe(&self) -> broadcast::Receiver<RunEvent> {
        self.events.subscribe()
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Validates and stores a flow (a new version only when its content changed).
    pub async fn apply_flow(&self, file: &str, source: &str) -> Result<ApplyOutcome, EngineError> {
        self.flows.apply(self.store.as_ref(), file, source).await
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

    /// Creates a run, or returns the one its idempotency key already made.
    pub async fn trigger(&self, req: TriggerRequest) -> Result<TriggerOutcome, EngineError> {
        let latest = self.flow(&req.flow, None).await?;
        if latest.observe {
            return Err(EngineError::ObserveOnly(req.flow));
        }
        let version = match req.version {
            Some(v) => v,
            None => route(&latest, &req.params, self.latest_version(&req.flow).await?)?,
        };
        let def = self.flows.get(self.store.as_ref(), &req.flow, version).await?;
        let run = NewRun {
            id: uuid::Uuid::now_v7().to_string(),
            flow: req.flow.clone(),
            version,
            params: req.params,
            idempotency_key: req.idempotency_key,
            trigger: req.trigger,
            node_names: def.nodes.iter().map(|n| n.id.clone()).collect(),
            max_active_runs: def.concurrency.max_active_runs,
            overlap: match def.concurrency.on_overlap {
                madeira_core::OnOverlap::Queue => Overlap::Queue,
                madeira_core::OnOverlap::Skip => Overlap::Skip,
                madeira_core::OnOverlap::CancelPrevious => Overlap::CancelPrevious,
            },
            actor: req.actor.clone(),
            now_ms: now_ms(),
        };
        match self.store.create_run(&run).await? {
            CreateOutcome::Existing { run_id, version } => {
                Ok(TriggerOutcome { run_id, flow: req.flow, version, created: false })
            }
            CreateOutcome::Skipped { active } => {
                Err(EngineError::OverlapSkipped { flow: req.flow, active: active.len() })
            }
            CreateOutcome::Created { run_id, state, cancel_previous } => {
                for previous in cancel_previous {
                    let cancel = Envelope::Command {
                        run_id: previous,
                        cmd: Command::Cancel,
                        actor: req.actor.clone(),
                        audit: Some((
                            "cancel".into(),
                            Some(format!("cancel_previous: superseded by {run_id}")),
                        )),
                        reply: None,
                    };
                    self.send(cancel).await?;
                }
                if state == RunState::Running {
                    self.send(self.adopt(&run_id).await).await?;
                }
                Ok(TriggerOutcome { run_id, flow: req.flow, version, created: true })
            }
        }
    }

    /// Claims a run this replica just created and loads it here, off the engine
    /// loop; falls back to a plain `Resume` (the loop claims and loads) on any miss.
    async fn adopt(&self, run_id: &str) -> Envelope {
        let resume = Envelope::Resume { run_id: run_id.to_string() };
        match self.store.claim_run(run_id, &self.holder.lease_now(), false).await {
            Ok(madeira_store::Claim::Held) => {}
            _ => return resume,
        }
        match self.store.load_run(run_id).await {
            Ok(Some(stored)) => Envelope::Adopt { stored: Box::new(stored) },
            _ => resume,
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
        match self.act_here(req.clone()).await {
            Err(EngineError::HeldElsewhere { owner, .. }) => self.forward(req, owner).await,
            other => other,
        }
    }

    /// Applies an operator action through this replica's engine.
    pub(crate) async fn act_here(&self, req: ActionRequest) -> Result<(), EngineError> {
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

    async fn send(&self, envelope: Envelope) -> Result<(), EngineError> {
        self.tx.send(envelope).await.map_err(|_| EngineError::ShuttingDown)
    }
}

/// The version a run with `params` goes to: the first matching routing rule, the
/// routing default, or the latest version.
fn route(latest: &FlowDef, params: &Json, latest_version: u32) -> Result<u32, EngineError> {
    let Some(routing) = &latest.routing else {
        return Ok(latest_version);
    };
    for rule in &routing.rules {
        let matched = rule
            .when
            .eval(params, &Json::Object(Default::default()))
            .map_err(|e| EngineError::Routing { flow: latest.name.clone(), message: e.to_string() })?;
        if matched {
            return Ok(rule.version);
        }
    }
    Ok(routing.default)
}
