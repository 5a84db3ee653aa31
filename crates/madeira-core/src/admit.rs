//! Run admission: what a trigger does to a flow's runs (return the run its
//! idempotency key already made, refuse because a throttle queue is full, skip,
//! queue, cancel the previous runs, or start) and whether a QUEUED run may start
//! (promotion). Pure: the store gathers the `Facts` inside the transaction that
//! holds the flow's lock, calls `admit`/`promote`, and writes what they decide.
//!
//! Admission creates a run (the run table's edge NONE -> QUEUED, `created`) and
//! decides whether it may *start*; it never starts one. A run admitted to start
//! counts against `max_active_runs` from that decision on, while still QUEUED;
//! the planner's `Command::Start` takes its QUEUED -> RUNNING edge (`started`)
//! in the engine's next group commit. So admission is a decision, starting is a
//! state change, and each state change has one writer.

#[cfg(test)]
mod tests;

use crate::model::OnOverlap;
use crate::state::{RunCause, RunRefusal, RunState, run_edge};

/// Backfill runs are admitted below every other run: a QUEUED backfill run
/// waiting for room ranks as if it was created this much later (a scheduled or
/// manual run overtakes it), so one waiting longer than this still goes first
/// and a backfill always progresses.
pub const BACKFILL_DEFER_MS: i64 = 60_000;

/// The trigger of a backfill's runs.
pub const BACKFILL_TRIGGER: &str = "backfill";

/// A throttled node of the flow: the trigger is refused while the node already has
/// `max_permits + queue_size` claims (runs that will still run it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Throttle {
    pub node: String,
    pub max_permits: u32,
    pub queue_size: u32,
}

/// The flow's admission rules, as the trigger's flow version states them.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    /// 0 = unlimited.
    pub max_active_runs: u32,
    pub on_overlap: OnOverlap,
    pub throttles: &'a [Throttle],
}

/// The run an idempotency key already made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing {
    pub run_id: String,
    pub version: u32,
}

/// What the store knows about the flow when a trigger arrives. `admit` reads the
/// fields in this order and stops at the first that decides, so a store may leave
/// the later ones empty: nothing after `existing` when it is `Some`, and `active`
/// and `queued` unset when `max_active_runs` is 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The run made earlier with the trigger's idempotency key, if any.
    pub existing: Option<Existing>,
    /// Claims on each throttled node, index-aligned with `Policy::throttles`: its
    /// INIT, RETRYING or RUNNING rows in QUEUED or RUNNING runs of the flow.
    pub claims: Vec<u32>,
    /// Ids of the flow's active runs, in id order: RUNNING, or QUEUED and already
    /// admitted to start (`Decision::Create::start`, `promote`).
    pub active: Vec<String>,
    /// Whether the flow has a QUEUED run waiting for room, not yet admitted to
    /// start (a new run never overtakes it).
    pub queued: bool,
}

/// One run transition: an edge of the run table. Admission takes only creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEdge {
    /// `None`: the run is being created.
    pub from: Option<RunState>,
    pub cause: RunCause,
    pub to: RunState,
}

impl RunEdge {
    fn take(from: Option<RunState>, cause: RunCause) -> Result<RunEdge, RunRefusal> {
        run_edge(from, cause).map(|to| RunEdge { from, cause, to })
    }

    /// A run's creation edge: NONE -> ADMITTED when it may start at once, NONE ->
    /// QUEUED when it waits (for room, for its `after`, or for a reason of its own).
    pub fn creation(start: bool) -> Result<RunEdge, RunRefusal> {
        RunEdge::take(None, if start { RunCause::Admitted } else { RunCause::Created })
    }

    /// A waiting run admitted to start: QUEUED -> ADMITTED (`promote`, a released wait).
    pub fn admission() -> Result<RunEdge, RunRefusal> {
        RunEdge::take(Some(RunState::Queued), RunCause::Admitted)
    }
}

/// What the store does with a trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The idempotency key already made this run; nothing is written.
    Existing(Existing),
    /// A throttled node's queue is full; nothing is written.
    Throttled { node: String, claims: u32, max_permits: u32, queue_size: u32 },
    /// `on_overlap: skip` and the flow has no room; nothing is written.
    Skip { active: Vec<String> },
    /// Create the run: the edge `created`, NONE -> ADMITTED when `start` (there is
    /// room: the engine's `Command::Start` takes it RUNNING), else NONE -> QUEUED
    /// (it waits for `promote`). With `on_overlap:
    /// cancel_previous`, the runs to cancel.
    Create { created: RunEdge, start: bool, cancel_previous: Vec<String> },
}

impl Decision {
    /// Whether the decision creates a run admitted to start at once.
    pub fn starts(&self) -> bool {
        matches!(self, Decision::Create { start: true, .. })
    }
}

/// Decides a trigger. Refuses only if the run table lost its creation edge (a
/// bug in the table, caught by its tests).
pub fn admit(facts: &Facts, policy: &Policy<'_>) -> Result<Decision, RunRefusal> {
    if let Some(existing) = &facts.existing {
        return Ok(Decision::Existing(existing.clone()));
    }
    for (i, t) in policy.throttles.iter().enumerate() {
        let claims = facts.claims.get(i).copied().unwrap_or(0);
        if u64::from(claims) >= u64::from(t.max_permits) + u64::from(t.queue_size) {
            let (max_permits, queue_size) = (t.max_permits, t.queue_size);
            return Ok(Decision::Throttled { node: t.node.clone(), claims, max_permits, queue_size });
        }
    }
    let room = policy.max_active_runs == 0
        || (facts.active.len() < policy.max_active_runs as usize && !facts.queued);
    let create = |start: bool, cancel_previous| {
        RunEdge::creation(start).map(|created| Decision::Create { created, start, cancel_previous })
    };
    match (room, policy.on_overlap) {
        (true, _) => create(true, Vec::new()),
        (false, OnOverlap::Skip) => Ok(Decision::Skip { active: facts.active.clone() }),
        (false, OnOverlap::Queue) => create(false, Vec::new()),
        (false, OnOverlap::CancelPrevious) => create(false, facts.active.clone()),
    }
}

/// The flow's state when a queued run may be promoted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueFacts {
    /// How many of the flow's runs are active (as `Facts::active`).
    pub active: u32,
    /// The flow's waiting QUEUED run (not admitted to start) with the smallest id
    /// (ids sort by creation time).
    pub oldest_queued: Option<String>,
}

/// Admits the oldest waiting QUEUED run to start when `max_active_runs` (0 =
/// unlimited) leaves room: the run to start. Like `admit`'s `start`, a decision:
/// the store writes its QUEUED -> ADMITTED edge (`RunEdge::admission`), and the
/// ADMITTED -> RUNNING edge is the planner's `Command::Start`.
pub fn promote(facts: &QueueFacts, max_active_runs: u32) -> Option<String> {
    if max_active_runs != 0 && facts.active >= max_active_runs {
        return None;
    }
    facts.oldest_queued.clone()
}
