//! What travels on the engine's channel.

use madeira_core::Command;
use tokio::sync::oneshot;

use crate::EngineError;
use crate::executor::AttemptResult;

pub(crate) type Reply = oneshot::Sender<Result<(), EngineError>>;

pub(crate) enum Envelope {
    /// Load the run (created or promoted in the store, or found at start) and
    /// evaluate every node.
    Resume { run_id: String },
    /// A run this replica just created and claimed, loaded off the loop (saves the
    /// loop two round trips per new run); handled like `Resume`.
    Adopt { stored: Box<madeira_store::StoredRun> },
    /// An operator action or internal command on one run.
    Command {
        run_id: String,
        cmd: Command,
        actor: String,
        /// `(action, reason)` to write to the audit log with the change.
        audit: Option<(String, Option<String>)>,
        reply: Option<Reply>,
    },
    /// An executor finished an attempt.
    AttemptDone { run_id: String, node: usize, attempt: u32, result: AttemptResult },
    /// Global permits of `(flow, node)` may be free: hand them to waiters.
    PermitPoll { flow: String, node: usize },
    /// A MANUAL_CONFIRM node passed its `alert_after`.
    ConfirmOverdue { run_id: String, node: usize },
}
