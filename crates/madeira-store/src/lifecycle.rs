//! Rows of a flow's lifecycle: events kept for a paused flow until `resume`
//! (`Store::queue_event`), and deleting a flow with its history kept or purged
//! (`Store::delete_flow`).

use serde_json::Value as Json;

use crate::AuditRecord;

/// An event kept for a paused flow; its run's key is `event:<type>:<id>`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedEvent {
    /// Queue order (assigned by the store).
    pub id: i64,
    pub flow: String,
    pub event_type: String,
    pub event_id: String,
    /// The run's params.
    pub payload: Json,
    pub actor: String,
    pub queued_at: i64,
}

/// What `queue_event` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueOutcome {
    /// Kept; `position` counts the flow's queued events up to and with this one.
    Queued { id: i64, position: u64, queued_at: i64 },
    /// The same (flow, type, id) was already waiting.
    AlreadyQueued { id: i64, position: u64, queued_at: i64 },
    /// The event already made this run (before the pause): nothing to keep.
    Existing { run_id: String },
    /// The flow is not paused (any more): trigger it now instead.
    NotPaused,
    /// `limit` events of this type already wait for the flow.
    Full { queued: u64 },
    /// No such flow (or deleted).
    FlowNotFound,
}

/// A flow deletion: history kept (the flow leaves every list, its versions, runs
/// and audit stay readable) or purged (versions and runs deleted; audit kept).
#[derive(Debug, Clone)]
pub struct DeleteFlow {
    pub flow: String,
    pub purge: bool,
    /// Written in the deletion's transaction.
    pub audit: AuditRecord,
    pub now_ms: i64,
}

/// What `delete_flow` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// `runs`: the flow's runs kept (or, purged, deleted); `events_dropped`: events
    /// that were waiting for it while paused.
    Deleted {
        runs: u64,
        events_dropped: u64,
    },
    /// Runs still QUEUED or RUNNING (up to 100 ids, oldest first): nothing deleted.
    Active {
        runs: Vec<String>,
    },
    NotFound,
}
