//! What travels on the engine's channel.

use madeira_core::{Command, RunSnapshot};
use tokio::sync::oneshot;

use crate::EngineError;
use crate::executor::AttemptResult;
use crate::trace::RunTrace;

pub(crate) type Reply = oneshot::Sender<Result<(), EngineError>>;

/// A fresh run's snapshot and trace, built by the creator from its request.
pub(crate) type Fresh = Box<(RunSnapshot, RunTrace)>;

pub(crate) enum Envelope {
    /// Start a run the store admitted to start (created with room, or promoted):
    /// `Command::Start`, the only way a run starts.
    Start {
        run_id: String,
        /// The snapshot of a run just created and already claimed by this replica
        /// (the creator claims it): the loop neither claims nor loads it.
        fresh: Option<Fresh>,
    },
    /// Take charge of an unfinished run again, reloaded from the store (restart,
    /// reconcile sweep, lease takeover, a commit that failed): `Command::Recover`
    /// for a RUNNING run, `Command::Start` for one admitted but never started.
    Resume { run_id: String },
    /// Take over a run another replica offered (it waits for sidecars this
    /// replica has): claimed like an idle run, then every node is evaluated.
    Adopt { run_id: String, from: String },
    /// An operator action or internal command on one run.
    Command {
        run_id: String,
        cmd: Command,
        actor: String,
        /// `(action, reason)` to write to the audit log with the change.
        audit: Option<(String, Option<String>)>,
        /// The forwarded action (`run_commands` id) this applies: its answer is
        /// committed with the change.
        answer_to: Option<i64>,
        reply: Option<Reply>,
    },
    /// The fleet placed a sidecar attempt on sidecar `host` (`engine_loop::hosts`).
    AttemptPlaced { run_id: String, node: String, attempt: u32, host: String },
    /// An executor finished an attempt.
    AttemptDone { run_id: String, node: usize, attempt: u32, result: AttemptResult },
    /// Global permits of `(flow, node)` may be free: hand them to waiters.
    PermitPoll { flow: String, node: usize },
    /// A MANUAL_CONFIRM node passed its `alert_after`.
    ConfirmOverdue { run_id: String, node: usize },
    /// An executor's availability changed: look at the nodes waiting for it again.
    ExecutorsChanged,
    /// This replica may have lost runs to another one (its leases went unrenewed
    /// longer than they last: it was frozen or cut off from the store): every run
    /// in memory is claimed again, and those another replica holds now are dropped
    /// with their attempts stopped (`engine_loop::fence`).
    CheckHeld,
    /// A run of `flow` was created held (`depends_on_past`): look at its held
    /// runs now (release, reason, alert) rather than at the next sweep.
    Promote { flow: String },
    /// A run was created held by `after`: when a failed upstream holds it, tell
    /// the observers (`crate::holds`).
    Held { run_id: String },
    /// A node of the run may have its `after` met: look at its held nodes
    /// (`crate::node_after`).
    NodeAfter { run_id: String },
    /// A `madeira exec` run of an observe-only flow ended (`node` is its index).
    ObservedDone { run_id: String, node: usize, result: AttemptResult, reply: Option<Reply> },
}
