//! Sub-flows: a node `run: {flow: other, params: {...}}` whose attempt is a child
//! run of another flow. This module owns what is pure about it: the child's
//! idempotency key and actor (one child per parent run, node and attempt, so a
//! replayed start never makes two), the child's params from the parent's
//! `params`/`nodes`, and what the child's end means for the parent's attempt
//! (its outputs, or the failure naming the child's root cause).

use serde_json::{Map, Value as Json};

use crate::keys::RunKey;
pub use crate::model::{SubflowDef, SubflowParam};
use crate::plan::RunSnapshot;
use crate::state::{NodeState, RunState};

/// The trigger name of a child run.
pub const TRIGGER: &str = "subflow";
/// The child run's idempotency key (`RunKey::Subflow`): one child per (parent run, node, attempt).
pub fn child_key(parent_run: &str, node: &str, attempt: u32) -> String {
    RunKey::Subflow { parent_run: parent_run.to_string(), node: node.to_string(), attempt }.to_string()
}

/// `(parent run, node, attempt)` of a key `child_key` made.
pub fn parse_child_key(key: &str) -> Option<(String, String, u32)> {
    match RunKey::parse(key) {
        RunKey::Subflow { parent_run, node, attempt } => Some((parent_run, node, attempt)),
        _ => None,
    }
}

/// The actor a child run is started by: `run:<parent id>/<node>`.
pub fn child_actor(parent_run: &str, node: &str) -> String {
    format!("run:{parent_run}/{node}")
}

impl SubflowDef {
    /// The child's params: each expression evaluated over the parent's values.
    pub fn child_params(&self, params: &Json, nodes: &Json, biz_date: Option<&str>) -> Result<Json, String> {
        let mut out = Map::new();
        for (name, param) in &self.params {
            let value = match param {
                SubflowParam::Literal(v) => v.clone(),
                SubflowParam::Expr(e) => e
                    .eval_dated(params, nodes, biz_date)
                    .map_err(|err| format!("sub-flow param `{name}` (`{}`): {err}", e.source()))?,
            };
            out.insert(name.clone(), value);
        }
        Ok(Json::Object(out))
    }
}

/// How a child run's end ends the parent node's attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildEnd {
    /// The child is not terminal yet (QUEUED or RUNNING).
    Running,
    /// SUCCESS: the merged outputs of the child's sink nodes.
    Succeeded(Map<String, Json>),
    /// FAILED or CANCELLED: the parent's attempt fails with this message (retryable).
    Failed(String),
}

/// What `child`'s current state means for its parent's attempt.
///
/// The outputs of a SUCCESS are those of the child's sink nodes (nodes nothing
/// depends on) that ended SUCCESS, merged in file order: a key two sinks give
/// takes the later node's value. A FAILED child names its first root cause
/// (`child run R failed at node X: error`).
pub fn child_end(child: &RunSnapshot) -> ChildEnd {
    match child.state {
        RunState::Queued | RunState::Admitted | RunState::Running => ChildEnd::Running,
        RunState::Success => {
            let mut outputs = Map::new();
            for (i, node) in child.nodes.iter().enumerate() {
                if child.flow.downstream[i].is_empty() && node.state == NodeState::Success {
                    outputs.extend(node.outputs.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            ChildEnd::Succeeded(outputs)
        }
        RunState::Cancelled => ChildEnd::Failed(format!("child run {} was cancelled", child.run_id)),
        RunState::Failed => {
            let message = match crate::rootcause::root_causes(child).into_iter().next() {
                Some(root) => format!(
                    "child run {} failed at node {}: {}",
                    child.run_id,
                    root.node,
                    root.error.as_deref().unwrap_or("failed")
                ),
                None => format!("child run {} failed", child.run_id),
            };
            ChildEnd::Failed(message)
        }
    }
}

/// The child run a parent node's failure names (`child_end`'s message
/// `child run R failed at node X: …`), if it is one.
pub fn failed_child(error: &str) -> Option<&str> {
    let rest = error.strip_prefix("child run ")?;
    let (id, tail) = rest.split_once(' ')?;
    tail.starts_with("failed").then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn keys_round_trip_and_differ_per_attempt() {
        let key = child_key("r-1:x", "call_child", 3);
        assert_eq!(parse_child_key(&key), Some(("r-1:x".into(), "call_child".into(), 3)));
        assert_ne!(child_key("r", "n", 1), child_key("r", "n", 2));
        assert_eq!(parse_child_key("after:f:2026-12-04"), None);
        assert_eq!(parse_child_key("subflow:r:n:x"), None);
        assert_eq!(child_actor("r", "n"), "run:r/n");
    }

    fn child(source: &str) -> RunSnapshot {
        let def = crate::spec::parse_flow("c.yaml", source).expect("parses");
        RunSnapshot::new("c1".into(), Arc::new(def), Json::Null)
    }

    #[test]
    fn success_merges_the_sinks_outputs_in_file_order() {
        let mut snap = child(
            "flow: c\nnodes:\n  a: {run: {builtin: noop}}\n  b: {needs: [a], run: {builtin: noop}}\n  c: {needs: [a], run: {builtin: noop}}\n",
        );
        snap.state = RunState::Success;
        for (i, outputs) in [
            serde_json::json!({"inner": 1}),
            serde_json::json!({"x": "b", "only_b": true}),
            serde_json::json!({"x": "c"}),
        ]
        .into_iter()
        .enumerate()
        {
            snap.nodes[i].state = NodeState::Success;
            snap.nodes[i].outputs = outputs.as_object().cloned().unwrap_or_default();
        }
        let ChildEnd::Succeeded(out) = child_end(&snap) else { panic!("not a success") };
        assert_eq!(Json::Object(out), serde_json::json!({"x": "c", "only_b": true}));
    }

    #[test]
    fn the_failed_child_is_read_back_from_the_message() {
        assert_eq!(failed_child("child run r-9 failed at node pull: HTTP 503"), Some("r-9"));
        assert_eq!(failed_child("child run r-9 failed"), Some("r-9"));
        assert_eq!(failed_child("child run r-9 was cancelled"), None);
        assert_eq!(failed_child("HTTP 503"), None);
    }

    #[test]
    fn failure_names_the_root_cause_and_cancel_says_so() {
        let mut snap = child(
            "flow: c\nnodes:\n  load: {run: {builtin: noop}}\n  after: {needs: [load], run: {builtin: noop}}\n",
        );
        assert_eq!(child_end(&snap), ChildEnd::Running);
        snap.state = RunState::Failed;
        snap.nodes[0].state = NodeState::Failed;
        snap.nodes[0].reason = Some("disk full".into());
        snap.nodes[1].state = NodeState::Skipped;
        assert_eq!(child_end(&snap), ChildEnd::Failed("child run c1 failed at node load: disk full".into()));
        snap.state = RunState::Cancelled;
        assert_eq!(child_end(&snap), ChildEnd::Failed("child run c1 was cancelled".into()));
    }

    #[test]
    fn params_are_cel_or_literals() {
        let def = SubflowDef {
            flow: "c".into(),
            line: None,
            params: vec![
                (
                    "day".into(),
                    SubflowParam::Expr(crate::keyexpr::ValueExpr::compile("biz_date").expect("cel")),
                ),
                (
                    "n".into(),
                    SubflowParam::Expr(
                        crate::keyexpr::ValueExpr::compile("nodes.a.outputs.n + 1").expect("cel"),
                    ),
                ),
                ("fixed".into(), SubflowParam::Literal(serde_json::json!([1, 2]))),
            ],
        };
        let nodes = serde_json::json!({"a": {"outputs": {"n": 41}}});
        let got = def.child_params(&serde_json::json!({}), &nodes, Some("2026-12-04")).expect("evaluates");
        assert_eq!(got, serde_json::json!({"day": "2026-12-04", "n": 42, "fixed": [1, 2]}));
        let err =
            def.child_params(&serde_json::json!({}), &serde_json::json!({}), None).expect_err("no node a");
        assert!(err.starts_with("sub-flow param `day`") || err.starts_with("sub-flow param `n`"), "{err}");
    }
}
