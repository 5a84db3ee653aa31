//! Between a backend and `madeira_core::admit`: a new run's admission policy, the
//! core's decision turned into the store's answer, and the run-table edges
//! written as transition records. Backends gather the facts in their transaction.

use std::collections::HashMap;

use madeira_core::RunState;
use madeira_core::admit::{Decision, Policy, RunEdge};
use madeira_core::state::RunRefusal;

use crate::{CreateOutcome, NewRun, StoreError};

/// Claims on throttled `(flow, node)`, counted once per transaction and then kept
/// up to date as runs are created in it (the transaction holds the flow's lock, or
/// is SQLite's only writer, so no one else creates runs of the flow meanwhile).
pub(crate) type ClaimCache = HashMap<(String, String), i64>;

impl NewRun {
    /// The admission rules this run's flow version states.
    pub fn policy(&self) -> Policy<'_> {
        Policy { max_active_runs: self.max_active_runs, on_overlap: self.overlap, throttles: &self.throttles }
    }
}

/// The run table lost an edge admission needs: nothing is written.
pub(crate) fn refused(e: RunRefusal) -> StoreError {
    StoreError::Refused(e.to_string())
}

/// The edges to write and runs to cancel for `Create`, or the answer for a
/// decision that writes nothing.
pub(crate) fn to_write(decision: Decision) -> Result<(Vec<RunEdge>, Vec<String>), CreateOutcome> {
    Err(match decision {
        Decision::Create { edges, cancel_previous } => return Ok((edges, cancel_previous)),
        Decision::Existing(e) => CreateOutcome::Existing { run_id: e.run_id, version: e.version },
        Decision::Throttled { node, claims, max_permits, queue_size } => {
            CreateOutcome::Throttled { node, claims, max_permits, queue_size }
        }
        Decision::Skip { active } => CreateOutcome::Skipped { active },
    })
}

/// The `from_state` column of a run edge (`NONE` before creation).
pub(crate) fn from_name(edge: &RunEdge) -> &'static str {
    edge.from.map_or("NONE", RunState::as_str)
}
