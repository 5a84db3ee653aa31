//! Whose result is this: a sidecar's `AttemptResult` is taken only when it answers
//! an attempt placed on that sidecar. A result for an assignment in flight must
//! come from the sidecar it was sent to and name that assignment's run, node and
//! idempotency key. A result for an assignment the fleet has no record of (a
//! spooled result after a control-plane restart, a late one after a move) must
//! name a node of its run that runs on the sender's group, under that node's key,
//! and — when the store recorded where that attempt was placed — a placement on
//! the sender's name. Anything else is refused: logged (sidecar, group, run, node,
//! why), counted in `madeira_sidecar_results_refused_total{group,reason}`,
//! acknowledged (so it leaves the sender's spool) and never applied. A check the
//! store cannot answer now leaves the result unacknowledged, to be delivered again.

use madeira_core::ExecutorDef;
use madeira_core::model::{NodeAction, NodeDef};
use madeira_proto::v1::AttemptResult;
use tracing::{debug, warn};

use crate::Fleet;
use crate::registry::Pending;

/// What to do with a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It answers an attempt placed on its sender: take it.
    Take,
    /// Refused (already logged and counted); acknowledge it, apply nothing.
    Refused,
    /// The store cannot tell now: neither take nor acknowledge it.
    Unsure,
}

/// Why a result was refused (the metric's `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The assignment was made to another sidecar.
    OtherSidecar,
    /// The node runs on another group's sidecars.
    OtherGroup,
    /// Its run, node, key or attempt do not match the assignment it names.
    Mismatch,
    /// No such run, node or placement.
    Unplaced,
}

impl Refusal {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Refusal::OtherSidecar => "other_sidecar",
            Refusal::OtherGroup => "other_group",
            Refusal::Mismatch => "mismatch",
            Refusal::Unplaced => "unplaced",
        }
    }

    fn says(self) -> &'static str {
        match self {
            Refusal::OtherSidecar => "the attempt was not placed on this sidecar",
            Refusal::OtherGroup => "the node runs on another group's sidecars",
            Refusal::Mismatch => "its run, node or idempotency key differ from the assignment's",
            Refusal::Unplaced => "no such attempt was placed",
        }
    }
}

impl Pending {
    /// Whether `r` names this assignment's run, node, key and shard (and not a later attempt).
    fn answered_by(&self, r: &AttemptResult) -> bool {
        let (run_id, node, attempt) = &self.attempt;
        *run_id == r.run_id
            && *node == r.node
            && r.attempt <= *attempt
            && self.key.0 == r.idempotency_key
            && self.key.1 == r.shard_index
    }
}

/// Whether `key` is an idempotency key of `run_id`'s `node` (`<run>:<node>:v<n>`,
/// a shard's with `:s<index>` after it).
fn key_of(key: &str, run_id: &str, node: &str) -> bool {
    key.strip_prefix(run_id)
        .and_then(|k| k.strip_prefix(':'))
        .and_then(|k| k.strip_prefix(node))
        .and_then(|k| k.strip_prefix(":v"))
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// Judges a result `name` delivered (see the module doc).
pub(crate) async fn check(fleet: &Fleet, name: &str, r: &AttemptResult) -> Verdict {
    let (group, why) = {
        let state = fleet.state();
        if state.seen(&r.report_id) {
            // A repeat of one already taken: `take_result` answers it.
            return Verdict::Take;
        }
        let group = state.sidecars.get(name).map(|s| s.group.clone()).unwrap_or_default();
        let why = match state.pending.get(&r.assignment_id) {
            Some(p) if p.sidecar != name => Some(Refusal::OtherSidecar),
            Some(p) if !p.answered_by(r) => Some(Refusal::Mismatch),
            Some(_) => return Verdict::Take,
            None => None,
        };
        (group, why)
    };
    if let Some(why) = why {
        return refuse(fleet, name, &group, r, why);
    }
    if !key_of(&r.idempotency_key, &r.run_id, &r.node) {
        return refuse(fleet, name, &group, r, Refusal::Mismatch);
    }
    let Some(engine) = fleet.inner.engine.get().cloned() else {
        // Without an engine nothing outlives the process: only assignments in flight count.
        return refuse(fleet, name, &group, r, Refusal::Unplaced);
    };
    match placed_on(&engine, name, &group, r).await {
        Ok(None) => Verdict::Take,
        Ok(Some(why)) => refuse(fleet, name, &group, r, why),
        Err(e) => {
            debug!(sidecar = %name, group = %group, run_id = %r.run_id, error = %e, "cannot check a result's placement now; it is delivered again");
            Verdict::Unsure
        }
    }
}

/// `None` when the store shows `r`'s attempt may have been placed on `name` of
/// `group`; otherwise why not.
async fn placed_on(
    engine: &crate::Attached,
    name: &str,
    group: &str,
    r: &AttemptResult,
) -> Result<Option<Refusal>, madeira_engine::EngineError> {
    let Some(stored) = engine.runs.load_run(&r.run_id).await? else {
        return Ok(Some(Refusal::Unplaced));
    };
    let def = match engine.flow(&stored.run.flow, Some(stored.run.version)).await {
        Ok(def) => def,
        Err(madeira_engine::EngineError::FlowNotFound(_)) => return Ok(Some(Refusal::Unplaced)),
        Err(e) => return Err(e),
    };
    let Some(node) = def.nodes.iter().find(|n| n.id == r.node) else {
        return Ok(Some(Refusal::Unplaced));
    };
    if !sidecar_groups(node).any(|g| g == group) {
        return Ok(Some(Refusal::OtherGroup));
    }
    let attempt = stored.attempts.iter().find(|a| a.node == r.node && a.attempt == r.attempt);
    // The placement is written shortly after the start (`attempts.host`); a crash in
    // between loses it, and a long broadcast list is cut short ("...").
    let recorded = attempt.and_then(|a| a.host.as_deref()).filter(|h| !h.ends_with("..."));
    match recorded {
        Some(hosts) if !hosts.split(", ").any(|h| h == name) => Ok(Some(Refusal::OtherSidecar)),
        _ => Ok(None),
    }
}

/// The sidecar groups an attempt of `node` may run on (its executor, or a manual
/// node's fallback).
fn sidecar_groups(node: &NodeDef) -> impl Iterator<Item = &str> {
    let executors = match &node.action {
        NodeAction::Run(executor) => [Some(executor), None],
        NodeAction::Manual(manual) => [manual.fallback.as_ref(), None],
    };
    executors.into_iter().flatten().filter_map(|e| match e {
        ExecutorDef::Sidecar(def) => Some(def.group.as_str()),
        _ => None,
    })
}

fn refuse(fleet: &Fleet, name: &str, group: &str, r: &AttemptResult, why: Refusal) -> Verdict {
    fleet.state().first_time(&r.report_id);
    fleet.inner.metrics.refused(group, why.label());
    warn!(
        sidecar = %name, group = %group, run_id = %r.run_id, node = %r.node, attempt = r.attempt,
        assignment = %r.assignment_id, reason = why.label(),
        "result refused: {}; not applied", why.says()
    );
    Verdict::Refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_its_run_and_node() {
        assert!(key_of("r1:b:v1", "r1", "b"));
        assert!(key_of("r1:b:v12:s3", "r1", "b"));
        assert!(!key_of("r1:b:v1", "r1", "a"));
        assert!(!key_of("r1:bb:v1", "r1", "b"));
        assert!(!key_of("r2:b:v1", "r1", "b"));
        assert!(!key_of("r1:b:x", "r1", "b"));
        assert!(!key_of("", "", ""));
    }
}
