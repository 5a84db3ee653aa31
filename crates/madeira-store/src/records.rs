//! Rows and write batches exchanged with a store.

use madeira_core::admit::RunEdge;
use madeira_core::{Cause, NodeState, RunState};
use serde::Serialize;
use serde_json::{Map, Value as Json};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutFlow {
    pub version: u32,
    /// False when the content equalled the latest version.
    pub created: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct FlowRecord {
    pub name: String,
    pub latest_version: u32,
    pub paused: bool,
    pub source: String,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone)]
pub struct FlowVersion {
    pub flow: String,
    pub version: u32,
    pub source: String,
    pub content_hash: String,
    pub created_at: i64,
}

/// One version of a calendar applied through the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarVersion {
    pub name: String,
    pub version: u32,
    pub source: String,
    pub content_hash: String,
    pub created_at: i64,
}

/// What `create_run` does when the flow already has `max_active_runs`: the core's
/// `OnOverlap`, which `madeira_core::admit` decides with.
pub use madeira_core::OnOverlap as Overlap;
/// A throttled node a new run claims (`madeira_core::admit::Throttle`).
pub use madeira_core::admit::Throttle as ThrottleClaim;

#[derive(Debug, Clone)]
pub struct NewRun {
    pub id: String,
    pub flow: String,
    pub version: u32,
    pub params: Json,
    pub idempotency_key: Option<String>,
    pub trigger: String,
    pub node_names: Vec<String>,
    /// 0 = unlimited.
    pub max_active_runs: u32,
    pub overlap: Overlap,
    /// Throttled nodes of the flow: the run is refused when one of them already has
    /// `max_permits + queue_size` claims (running, waiting, or still to come).
    pub throttles: Vec<ThrottleClaim>,
    pub actor: String,
    pub now_ms: i64,
    /// W3C `traceparent` of the run's span, kept so the run has one trace for life.
    pub trace_context: Option<String>,
    /// The replica creating the run: a run admitted RUNNING is written held by this
    /// lease in its creation transaction, so it needs no claim of its own.
    pub lease: Option<crate::Lease>,
    /// The run's business date, `YYYY-MM-DD` in the flow's timezone.
    pub biz_date: Option<String>,
    /// One run per business date among the flow's scheduled runs (`cron`,
    /// `cron_catchup`): a scheduled run for a `biz_date` one already has answers
    /// `CreateOutcome::Existing` with it (`cron:<flow>:<biz_date>` semantics).
    pub one_per_biz_date: bool,
    /// Set: the run may not start yet whatever admission says, for this reason
    /// (`concurrency.depends_on_past`: the run for the previous business date is
    /// not SUCCESS). Kept as `RunRow::wait_reason` until `release_waiting`.
    pub wait_reason: Option<String>,
    /// What the flow's `after:` entries resolved to for `biz_date`: while one is
    /// not SUCCESS the run is held (QUEUED, not admitted, `wait_reason` set).
    pub after: Vec<AfterWait>,
    /// What its nodes' `after:` entries resolved to for `biz_date`: the run starts
    /// as usual, the node stays INIT while one of its waits is not SUCCESS.
    pub node_after: Vec<NodeWait>,
}

/// One wait of one node of a run (node-level `after:`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeWait {
    /// The waiting node of the run.
    pub node: String,
    pub wait: AfterWait,
}

/// A node wait with where its upstream stands now (`RunStore::node_waits`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeWaitState {
    pub node: String,
    pub wait: AfterWait,
    /// A run of the upstream flow for the date is SUCCESS (or has the node SUCCESS).
    pub met: bool,
    /// The upstream's latest run for the date, if any: its id, and the state and
    /// start of that run (or of its node, for a node wait).
    pub upstream_run: Option<String>,
    pub upstream_state: Option<String>,
    pub upstream_since: Option<i64>,
}

/// A node of a RUNNING run held by an unmet node-level `after` (`RunStore::held_nodes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldNode {
    pub run_id: String,
    pub flow: String,
    pub version: u32,
    pub node: String,
    /// When the run was created (`after_policy.wait` counts from it).
    pub created_at: i64,
    /// The replica holding the run (it applies the policy).
    pub owner: Option<String>,
}

/// One upstream a run waits for: the run of `flow` for business date `date`
/// (`YYYY-MM-DD`), or only its node `node`, SUCCESS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AfterWait {
    pub flow: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub date: String,
}

impl AfterWait {
    /// `payments-pull 2026-12-04` or `fx-rates.publish 2026-12-03`.
    pub fn label(&self) -> String {
        match &self.node {
            Some(n) => format!("{}.{} {}", self.flow, n, self.date),
            None => format!("{} {}", self.flow, self.date),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The run was written QUEUED (its `created` edge recorded). `start`: admission
    /// let it start at once (`RunRow::admitted_at`); the engine's `Command::Start`
    /// takes it RUNNING. Otherwise it waits for `promote_queued`.
    Created { run_id: String, start: bool, cancel_previous: Vec<String> },
    /// The idempotency key already made this run.
    Existing { run_id: String, version: u32 },
    /// `on_overlap: skip` and the flow is at `max_active_runs`.
    Skipped { active: Vec<String> },
    /// A throttled node's queue is full; nothing was stored.
    Throttled { node: String, claims: u32, max_permits: u32, queue_size: u32 },
    /// The flow is paused and the run's trigger is one a pause stops
    /// (`NewRun::stopped_by_pause`); nothing was stored.
    Paused,
}

/// A node row as written and read.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub run_id: String,
    pub idx: u32,
    pub node: String,
    pub state: NodeState,
    pub reason: Option<String>,
    pub attempt: u32,
    pub series_start: u32,
    pub data_version: u32,
    pub outputs: Map<String, Json>,
    pub reads: Vec<(usize, u32)>,
    pub stale: bool,
    pub fallback: bool,
    pub next_attempt_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    pub id: String,
    pub flow: String,
    pub version: u32,
    #[serde(serialize_with = "state_name")]
    pub state: RunState,
    pub params: Json,
    pub idempotency_key: Option<String>,
    pub trigger: String,
    /// Who started the run (`NewRun::actor`): a token's name, `scheduler`, …
    pub actor: String,
    pub created_at: i64,
    /// When admission let the run start (at creation or by promotion): from then
    /// on it counts against `max_active_runs`, QUEUED until `Command::Start` takes
    /// it RUNNING. `None` for a run waiting for room (and for runs started before
    /// this column existed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// W3C `traceparent` of the run's span (`None` for runs older than tracing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_context: Option<String>,
    /// The business date, `YYYY-MM-DD` (`None` for runs older than business dates).
    pub biz_date: Option<String>,
    /// Why a QUEUED run is not admitted yet (`concurrency.depends_on_past`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_reason: Option<String>,
}

/// A run state as its name (`"RUNNING"`), as every API answer shows it.
fn state_name<S: serde::Serializer>(state: &RunState, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(state.as_str())
}

#[derive(Debug, Clone)]
pub struct StoredRun {
    pub run: RunRow,
    pub nodes: Vec<NodeRow>,
    pub attempts: Vec<AttemptRecord>,
}

/// Update of a run's state columns.
#[derive(Debug, Clone, PartialEq)]
pub struct RunWrite {
    pub run_id: String,
    pub state: RunState,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// What a transition record says changed, typed: a node's state (`NODE_TABLE`'s
/// names) or the run's (`RUN_TABLE`'s; `from: None` is the run's creation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    Node { from: NodeState, to: NodeState, cause: Cause },
    Run(RunEdge),
}

impl Edge {
    /// The run-level edge `from` -> `to` by `cause`.
    pub fn run(from: Option<RunState>, cause: madeira_core::RunCause, to: RunState) -> Edge {
        Edge::Run(RunEdge { from, cause, to })
    }

    /// The `from_state` column: a state's name, `NONE` before a run's creation.
    pub fn from_name(&self) -> &'static str {
        match self {
            Edge::Node { from, .. } => from.as_str(),
            Edge::Run(e) => e.from.map_or("NONE", RunState::as_str),
        }
    }

    pub fn to_name(&self) -> &'static str {
        match self {
            Edge::Node { to, .. } => to.as_str(),
            Edge::Run(e) => e.to.as_str(),
        }
    }

    pub fn cause_name(&self) -> &'static str {
        match self {
            Edge::Node { cause, .. } => cause.as_str(),
            Edge::Run(e) => e.cause.as_str(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TransitionRecord {
    pub run_id: String,
    /// `None` for a run-level transition (then `edge` is `Edge::Run`).
    pub node: Option<String>,
    pub edge: Edge,
    pub actor: String,
    pub attempt: u32,
    pub reason: Option<String>,
    pub at: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutputWrite {
    pub run_id: String,
    pub node: String,
    pub data_version: u32,
    pub key: String,
    pub value: Json,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRecord {
    pub run_id: String,
    pub node: String,
    pub attempt: u32,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    /// SUCCESS, FAILED, RETRYABLE or ABORTED once finished.
    pub outcome: Option<String>,
    pub error: Option<String>,
    /// Where it ran: the replica id for an attempt in the control plane's process,
    /// the sidecar(s) it was placed on for a sidecar attempt (`AttemptHost`).
    /// Written when the row is first inserted; later records leave it alone.
    pub host: Option<String>,
}

/// The sidecar(s) an attempt was placed on, learned after its start was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptHost {
    pub run_id: String,
    pub node: String,
    pub attempt: u32,
    /// Sidecar names, comma-separated, in placement order.
    pub host: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub run_id: Option<String>,
    pub node: Option<String>,
    pub reason: Option<String>,
    pub details: Option<Json>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogRecord {
    pub run_id: String,
    pub node: String,
    pub attempt: u32,
    pub content: String,
}

/// One group commit: everything in it is durable together, or nothing is.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// When set, the commit is fenced: it fails with `LeaseLost`, writing nothing,
    /// unless this replica holds every run the batch touches.
    pub owner: Option<String>,
    pub runs: Vec<RunWrite>,
    pub nodes: Vec<NodeRow>,
    pub transitions: Vec<TransitionRecord>,
    pub outputs: Vec<OutputWrite>,
    pub attempts: Vec<AttemptRecord>,
    /// Hosts of attempts already written (applied after `attempts`).
    pub attempt_hosts: Vec<AttemptHost>,
    pub audit: Vec<AuditRecord>,
    pub logs: Vec<LogRecord>,
    /// Throttle permits given back with this batch's transitions.
    pub permit_releases: Vec<PermitKey>,
    /// Answers to forwarded actions (`run_commands`), written with the change they
    /// report so the asking replica never misses an action that was applied.
    pub answers: Vec<CommandAnswer>,
    /// Alert events (JSON) for the shared alert inbox, written with the run ends
    /// they report so that none is lost between the commit and the alert task.
    pub alert_events: Vec<String>,
}

/// One group of live sidecars a replica has, with the jobs they declare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarPresence {
    pub group: String,
    pub jobs: Vec<String>,
}

/// The answer to the forwarded action `id`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandAnswer {
    pub id: i64,
    /// JSON.
    pub answer: String,
    pub at: i64,
}

impl Batch {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
            && self.nodes.is_empty()
            && self.transitions.is_empty()
            && self.outputs.is_empty()
            && self.attempts.is_empty()
            && self.attempt_hosts.is_empty()
            && self.audit.is_empty()
            && self.logs.is_empty()
            && self.permit_releases.is_empty()
            && self.answers.is_empty()
            && self.alert_events.is_empty()
    }
}

#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    pub flow: Option<String>,
    pub state: Option<String>,
    /// Only runs this actor started (`RunRow::actor`).
    pub actor: Option<String>,
    /// Only runs of this business date (`YYYY-MM-DD`).
    pub biz_date: Option<String>,
    /// Only runs with an id smaller than this (the previous page's last id).
    pub before: Option<String>,
    pub limit: u32,
}

#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub run_id: Option<String>,
    pub actor: Option<String>,
    pub since_ms: Option<i64>,
    pub limit: u32,
}

/// An operator action forwarded to the replica holding its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCommand {
    /// Assigned by `send_command`.
    pub id: i64,
    pub run_id: String,
    /// The holder's replica id.
    pub target: String,
    pub action: String,
    pub node: Option<String>,
    pub actor: String,
    pub reason: Option<String>,
    pub created_at: i64,
}

/// One run's permit of a throttled node (`throttle.max_permits`, global across replicas).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitKey {
    pub flow: String,
    pub node: String,
    pub run_id: String,
}

/// A signed-in console session, as stored (`console_sessions`): the cookie's value
/// is never stored, only its SHA-256 (`id_hash`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// Lowercase hex SHA-256 of the session cookie's value.
    pub id_hash: String,
    /// The token's name.
    pub name: String,
    /// `viewer`, `operator` or `admin`.
    pub role: String,
    /// The token's flow-label scope as a JSON object; `None`: every flow.
    pub scope: Option<String>,
    pub csrf: String,
    pub created_at: i64,
    pub expires_at: i64,
}

/// A run held by an unmet `after` (`RunStore::held_by_after`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRun {
    pub run_id: String,
    pub flow: String,
    pub version: u32,
    pub created_at: i64,
    /// Whom it waits for (`waiting for FLOW DATE`).
    pub wait_reason: Option<String>,
}
