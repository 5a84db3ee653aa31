//! Between a backend and `madeira_core::admit`: a new run's admission policy, the
//! core's decision turned into the store's answer, the creation edge written as a
//! transition record, and the SQL conditions that say which runs are active.
//! Backends gather the facts in their transaction.

use std::collections::HashMap;

use madeira_core::admit::{Decision, Policy, RunEdge};
use madeira_core::state::RunRefusal;

use crate::{CreateOutcome, NewRun, StoreError};

/// Claims on throttled `(flow, node)`, counted once per transaction and then kept
/// up to date as runs are created in it (the transaction holds the flow's lock, or
/// is SQLite's only writer, so no one else creates runs of the flow meanwhile).
pub(crate) type ClaimCache = HashMap<(String, String), i64>;

/// The triggers a paused flow stops (`cron`, events, messages); a manual or API
/// run, `madeira exec` and a benchmark's runs still start.
const STOPPED_BY_PAUSE: [&str; 4] = ["cron", "cron_catchup", "event", "message"];

impl NewRun {
    /// A paused flow refuses this run (`CreateOutcome::Paused`).
    pub fn stopped_by_pause(&self) -> bool {
        STOPPED_BY_PAUSE.contains(&self.trigger.as_str())
    }

    /// The admission rules this run's flow version states.
    pub fn policy(&self) -> Policy<'_> {
        Policy { max_active_runs: self.max_active_runs, on_overlap: self.overlap, throttles: &self.throttles }
    }
}

/// The run table lost an edge admission needs: nothing is written.
pub(crate) fn refused(e: RunRefusal) -> StoreError {
    StoreError::Refused(e.to_string())
}

/// The wait `w` (a `run_waits` or `node_waits` row) is met: a run of its upstream
/// flow for its date is SUCCESS, or has the node it names SUCCESS (in its node
/// rows, or in the SUCCESS nodes of its archive row when it is folded: one
/// statement, so a fold meanwhile is seen one way or the other).
macro_rules! wait_met {
    () => {
        concat!(
            "EXISTS (SELECT 1 FROM runs u WHERE u.flow = w.upstream_flow ",
            "AND u.biz_date = w.upstream_date AND ((w.upstream_node IS NULL AND u.state = 'SUCCESS') ",
            "OR (w.upstream_node IS NOT NULL AND (EXISTS (SELECT 1 FROM nodes n WHERE n.run_id = u.id ",
            "AND n.node = w.upstream_node AND n.state = 'SUCCESS') OR EXISTS (SELECT 1 FROM run_archive a ",
            "WHERE a.run_id = u.id AND a.succeeded LIKE CONCAT('%,', REPLACE(w.upstream_node, '_', '!'), ',%'))))))"
        )
    };
}
pub(crate) use wait_met;

/// `EXISTS` a wait of the run (`runs.id`) whose upstream run (or node) for its
/// date is not SUCCESS.
macro_rules! unmet_wait {
    () => {
        concat!("EXISTS (SELECT 1 FROM run_waits w WHERE w.run_id = runs.id AND NOT ", wait_met!(), ")")
    };
}

/// A run counts against `max_active_runs` (`admit::Facts::active`): RUNNING, or
/// ADMITTED (admitted to start, not started yet).
pub(crate) const ACTIVE: &str = "state IN ('ADMITTED', 'RUNNING')";
/// A run not finished yet: QUEUED, ADMITTED or RUNNING.
pub(crate) const UNFINISHED: &str = "('QUEUED', 'ADMITTED', 'RUNNING')";
/// A QUEUED run waiting for room (`admit::Facts::queued`): not held by `after`
/// (`run_waits` not all met), nor for a reason of its own (`wait_reason` of a run
/// without `after`, e.g. `depends_on_past`, until `set_wait_reason` releases it;
/// on a run with `after` it only says whom it waits for).
pub(crate) const WAITING: &str = concat!(
    "state = 'QUEUED' ",
    "AND (wait_reason IS NULL OR EXISTS (SELECT 1 FROM run_waits h WHERE h.run_id = runs.id)) ",
    "AND NOT ",
    unmet_wait!()
);

/// A QUEUED run whose `after` is not met: held by `after`.
pub(crate) const HELD_BY_AFTER: &str = concat!("state = 'QUEUED' AND ", unmet_wait!());

/// Whether the run of flow `$1` for business date `$2` is SUCCESS.
pub(crate) const RUN_MET: &str =
    "SELECT u.id FROM runs u WHERE u.flow = $1 AND u.biz_date = $2 AND u.state = 'SUCCESS' LIMIT 1";
/// Whether node `$3` (bound again as `$4`) of a run of flow `$1` for business
/// date `$2` is SUCCESS, in its rows or its archive (`wait_met`).
pub(crate) const NODE_MET: &str = "SELECT u.id FROM runs u WHERE u.flow = $1 AND u.biz_date = $2 \
     AND (EXISTS (SELECT 1 FROM nodes n WHERE n.run_id = u.id AND n.node = $3 AND n.state = 'SUCCESS') \
     OR EXISTS (SELECT 1 FROM run_archive a WHERE a.run_id = u.id \
     AND a.succeeded LIKE CONCAT('%,', REPLACE($4, '_', '!'), ',%'))) LIMIT 1";

/// What `Create` writes: the creation edge, whether the run may start at once,
/// the runs to cancel; or the answer for a decision that writes nothing.
pub(crate) type ToWrite = (RunEdge, bool, Vec<String>);

pub(crate) fn to_write(decision: Decision) -> Result<ToWrite, CreateOutcome> {
    Err(match decision {
        Decision::Create { created, start, cancel_previous } => return Ok((created, start, cancel_previous)),
        Decision::Existing(e) => CreateOutcome::Existing { run_id: e.run_id, version: e.version },
        Decision::Throttled { node, claims, max_permits, queue_size } => {
            CreateOutcome::Throttled { node, claims, max_permits, queue_size }
        }
        Decision::Skip { active } => CreateOutcome::Skipped { active },
    })
}
