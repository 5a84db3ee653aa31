//! The run planner: given a run's current snapshot and one command, decide every
//! node and run transition that follows (checked against the tables in `state`),
//! and the actions the engine must perform once they are durable. Pure: the engine
//! persists the returned `Plan` in one transaction, then acts on it.

mod cascade;
pub use cascade::run_outcome;
#[cfg(test)]
mod fallback_tests;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;

use serde_json::{Map, Value as Json};

use crate::model::{FlowDef, NodeAction};
use crate::state::{Cause, NodeState, RunCause, RunState};

/// The live state of one node in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRt {
    pub state: NodeState,
    /// Skip reason, failure message, or last retryable error.
    pub reason: Option<String>,
    /// Attempts started so far, over every series.
    pub attempt: u32,
    /// `attempt` when the current series began (a rerun starts a new series, with a
    /// fresh retry budget).
    pub series_start: u32,
    /// Increases each time the node succeeds (SPEC §5).
    pub data_version: u32,
    pub outputs: Map<String, Json>,
    /// `(upstream index, data_version)` read by the latest attempt.
    pub reads: Vec<(usize, u32)>,
    /// An upstream produced a newer version after this node read it.
    pub stale: bool,
    /// The attempt in flight runs the manual node's fallback executor.
    pub fallback: bool,
    pub next_attempt_at_ms: Option<i64>,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
}

impl Default for NodeRt {
    fn default() -> Self {
        Self {
            state: NodeState::Init,
            reason: None,
            attempt: 0,
            series_start: 0,
            data_version: 0,
            outputs: Map::new(),
            reads: Vec::new(),
            stale: false,
            fallback: false,
            next_attempt_at_ms: None,
            started_at_ms: None,
            finished_at_ms: None,
        }
    }
}

/// One run as the planner sees it: its flow version, params, and node states
/// (index-aligned with `flow.nodes`).
#[derive(Debug, Clone)]
pub struct RunSnapshot {
    pub run_id: String,
    pub flow: Arc<FlowDef>,
    pub state: RunState,
    pub params: Json,
    pub nodes: Vec<NodeRt>,
    /// The run's business date (`YYYY-MM-DD`), bound as `biz_date` in conditions.
    pub biz_date: Option<String>,
}

impl RunSnapshot {
    /// A fresh run admission let start: ADMITTED (`Command::Start` takes it
    /// RUNNING), every node INIT. A run that waits is read from the store.
    pub fn new(run_id: String, flow: Arc<FlowDef>, params: Json) -> Self {
        let nodes = vec![NodeRt::default(); flow.nodes.len()];
        Self { run_id, flow, state: RunState::Admitted, params, nodes, biz_date: None }
    }

    /// The idempotency key handed to every attempt of `node` until it next succeeds:
    /// stable across retries, new after a successful version was produced.
    pub fn idempotency_key(&self, node: usize) -> String {
        let n = &self.nodes[node];
        format!("{}:{}:v{}", self.run_id, self.flow.nodes[node].id, n.data_version + 1)
    }

    /// `{"X": {"status", "outputs", "data_version"}}` for the given nodes.
    pub fn nodes_json(&self, which: impl IntoIterator<Item = usize>) -> Json {
        let mut map = Map::new();
        for i in which {
            let n = &self.nodes[i];
            let mut entry = Map::new();
            entry.insert("status".into(), Json::from(n.state.as_str()));
            entry.insert("outputs".into(), Json::Object(n.outputs.clone()));
            entry.insert("data_version".into(), Json::from(n.data_version));
            map.insert(self.flow.nodes[i].id.clone(), Json::Object(entry));
        }
        Json::Object(map)
    }
}

/// What happened, or what someone asks for, in one run.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Start a run admission let start (ADMITTED: `admit`, `promote`): the run's
    /// ADMITTED -> RUNNING edge, then every node is evaluated. The only way a run
    /// starts.
    Start,
    /// Give a ready node its permit and start an attempt.
    Dispatch {
        node: usize,
    },
    AttemptSucceeded {
        node: usize,
        attempt: u32,
        outputs: Map<String, Json>,
    },
    AttemptFailed {
        node: usize,
        attempt: u32,
        error: String,
        retryable: bool,
    },
    RetryDue {
        node: usize,
    },
    Confirm {
        node: usize,
    },
    Reject {
        node: usize,
    },
    /// `fallback_after` elapsed on a MANUAL_CONFIRM node: run its fallback executor.
    Fallback {
        node: usize,
    },
    Rerun {
        node: usize,
        downstream: bool,
    },
    MarkSuccess {
        node: usize,
    },
    Skip {
        node: usize,
    },
    Cancel,
    /// A held QUEUED run whose `after_policy.wait` ran out with `then: fail`:
    /// every node FAILED (`after_expired`), the run QUEUED -> FAILED.
    AfterExpired,
    /// A RUNNING run taken in charge again (restart, lease takeover, adoption):
    /// attempts that were in flight start again, timers re-arm, INIT nodes are
    /// evaluated. Does nothing to a run that is not RUNNING.
    Recover,
}

impl Command {
    /// The node the command is about, if any.
    pub fn node(&self) -> Option<usize> {
        match *self {
            Command::Dispatch { node }
            | Command::AttemptSucceeded { node, .. }
            | Command::AttemptFailed { node, .. }
            | Command::RetryDue { node }
            | Command::Confirm { node }
            | Command::Reject { node }
            | Command::Fallback { node }
            | Command::Rerun { node, .. }
            | Command::MarkSuccess { node }
            | Command::Skip { node } => Some(node),
            Command::Start | Command::Cancel | Command::AfterExpired | Command::Recover => None,
        }
    }
}

/// Inputs the planner needs from outside: the time, and a uniform sample in
/// `[0, 1)` for retry jitter.
#[derive(Debug, Clone, Copy)]
pub struct PlanCtx {
    pub now_ms: i64,
    pub jitter_unit: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeChange {
    pub node: usize,
    pub from: NodeState,
    pub to: NodeState,
    pub cause: Cause,
    pub attempt: u32,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunChange {
    pub from: RunState,
    pub to: RunState,
    pub cause: RunCause,
}

/// Work for the engine once the plan is durable.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The node's needs are met: acquire a permit, then `Command::Dispatch`.
    Ready {
        node: usize,
    },
    /// Start attempt `attempt` of the node (its fallback executor when `fallback`).
    Execute {
        node: usize,
        attempt: u32,
        fallback: bool,
    },
    ScheduleRetry {
        node: usize,
        at_ms: i64,
    },
    /// The node waits for a person; arm its escalation timers.
    AwaitConfirm {
        node: usize,
    },
    /// Stop the attempt in flight.
    Abort {
        node: usize,
        attempt: u32,
    },
    /// The node left RUNNING: release its permit.
    ReleasePermit {
        node: usize,
    },
    RunFinished {
        state: RunState,
    },
}

/// Everything one command changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub nodes: Vec<NodeChange>,
    /// Nodes whose fields changed without a state change (e.g. marked stale).
    pub touched: Vec<usize>,
    pub runs: Vec<RunChange>,
    pub actions: Vec<Action>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.runs.is_empty() && self.actions.is_empty()
    }
}

/// Why a command was not applied. The snapshot is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("node {node} is {state}: cannot {action}")]
    Node { node: String, state: NodeState, action: &'static str },
    #[error("run is {state}: cannot {action}")]
    Run { state: RunState, action: &'static str },
    /// A result for an attempt that is no longer the one in flight.
    #[error("stale result for node {node} attempt {attempt}")]
    StaleAttempt { node: String, attempt: u32 },
    #[error("node {node} is not a manual node and has no fallback")]
    NotManual { node: String },
    #[error("node index {index} is out of range")]
    NoSuchNode { index: usize },
    /// A command that would start an attempt of an observe-only flow's node: no
    /// executor may start it (`madeira exec` reports its runs), so the attempt
    /// would stay RUNNING forever.
    #[error(
        "node {node}: observe-only job: Madeira does not run it; promote it (`madeira promote {flow}`) to let \
         Madeira run it, or mark-success"
    )]
    ObserveOnly { flow: String, node: String },
}

/// Applies `cmd` to `snap`, returning what changed. On refusal `snap` is untouched.
pub fn apply(snap: &mut RunSnapshot, cmd: &Command, ctx: &PlanCtx) -> Result<Plan, Refusal> {
    precheck(snap, cmd)?;
    let mut p = cascade::Planner { snap, ctx, plan: Plan::default() };
    p.run_command(cmd);
    p.update_run_state();
    Ok(p.plan)
}

/// Checks everything that could refuse `cmd` before anything is changed.
fn precheck(snap: &RunSnapshot, cmd: &Command) -> Result<(), Refusal> {
    if let Some(index) = cmd.node().filter(|i| *i >= snap.nodes.len()) {
        return Err(Refusal::NoSuchNode { index });
    }
    let node_refusal = |node: usize, action: &'static str| Refusal::Node {
        node: snap.flow.nodes[node].id.clone(),
        state: snap.nodes[node].state,
        action,
    };
    let needs = |node: usize, cause: Cause, action: &'static str| {
        snap.nodes[node].state.apply(cause).map(|_| ()).map_err(|_| node_refusal(node, action))
    };
    let run_active = |action: &'static str| {
        if snap.state == RunState::Running { Ok(()) } else { Err(Refusal::Run { state: snap.state, action }) }
    };
    let not_cancelled = |action: &'static str| {
        if matches!(snap.state, RunState::Cancelled | RunState::Queued | RunState::Admitted) {
            Err(Refusal::Run { state: snap.state, action })
        } else {
            Ok(())
        }
    };
    match *cmd {
        Command::Start => match snap.state.apply(RunCause::Started) {
            Ok(_) => Ok(()),
            Err(_) => Err(Refusal::Run { state: snap.state, action: "start" }),
        },
        Command::Dispatch { node } => {
            run_active("dispatch")?;
            needs(node, Cause::Dispatch, "dispatch")
        }
        Command::AttemptSucceeded { node, attempt, .. } | Command::AttemptFailed { node, attempt, .. } => {
            let n = &snap.nodes[node];
            if n.state != NodeState::Running || n.attempt != attempt {
                return Err(Refusal::StaleAttempt { node: snap.flow.nodes[node].id.clone(), attempt });
            }
            Ok(())
        }
        Command::RetryDue { node } => {
            run_active("retry")?;
            needs(node, Cause::RetryDue, "retry")
        }
        Command::Confirm { node } => needs(node, Cause::Confirmed, "confirm"),
        Command::Reject { node } => needs(node, Cause::Rejected, "reject"),
        Command::Fallback { node } => {
            let has_fallback = matches!(
                &snap.flow.nodes[node].action,
                NodeAction::Manual(m) if m.fallback.is_some()
            );
            if !has_fallback {
                return Err(Refusal::NotManual { node: snap.flow.nodes[node].id.clone() });
            }
            needs(node, Cause::FallbackStarted, "fall back")
        }
        Command::Rerun { node, .. } => {
            not_cancelled("rerun")?;
            // Every node of an observe-only flow is observed, so a rerun (with or
            // without downstream) would start an attempt nothing runs. Its first
            // attempt is the `madeira exec` report's, dispatched once at the start.
            if snap.flow.observe {
                let (flow, node) = (snap.flow.name.clone(), snap.flow.nodes[node].id.clone());
                return Err(Refusal::ObserveOnly { flow, node });
            }
            needs(node, Cause::Rerun, "rerun")
        }
        Command::MarkSuccess { node } => {
            not_cancelled("mark-success")?;
            needs(node, Cause::MarkSuccess, "mark-success")
        }
        Command::Skip { node } => {
            not_cancelled("skip")?;
            needs(node, Cause::OperatorSkip, "skip")
        }
        Command::Cancel => match snap.state.apply(RunCause::Cancelled) {
            Ok(_) => Ok(()),
            Err(_) => Err(Refusal::Run { state: snap.state, action: "cancel" }),
        },
        Command::AfterExpired => match snap.state {
            RunState::Queued => Ok(()),
            state => Err(Refusal::Run { state, action: "fail on after_policy" }),
        },
        Command::Recover => Ok(()),
    }
}
