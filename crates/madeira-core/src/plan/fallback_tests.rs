//! Planner tests of a manual node's fallback: `then: skip` ends the node SKIPPED
//! (strong downstream skipped, weak downstream run), `then: success` (the default)
//! ends it SUCCESS, and a failing fallback fails the node whatever `then` says.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, json};

use super::tests::flow;
use super::*;
use crate::model::{BuiltinDef, BuiltinKind, DepKind, ExecutorDef, FallbackThen, FlowDef, ManualDef};

const CTX: PlanCtx = PlanCtx { now_ms: 1_000, jitter_unit: 0.5 };

/// manual node 0 with a fallback ending `then`; node 1 needs it strongly, node 2 weakly.
fn with_fallback(then: FallbackThen) -> Arc<FlowDef> {
    let mut f = Arc::unwrap_or_clone(flow(vec![
        (vec![], true, 1, None),
        (vec![(0, DepKind::Strong)], false, 1, None),
        (vec![(0, DepKind::Weak)], false, 1, None),
    ]));
    f.nodes[0].action = NodeAction::Manual(ManualDef {
        prompt: "ok?".into(),
        alert_after: None,
        fallback_after: Some(Duration::from_secs(60)),
        fallback: Some(ExecutorDef::Builtin(BuiltinDef { kind: BuiltinKind::Noop, outputs: Map::new() })),
        fallback_then: then,
    });
    Arc::new(f)
}

fn fall_back(then: FallbackThen, ok: bool) -> (RunSnapshot, Plan) {
    let mut snap = RunSnapshot::new("r1".into(), with_fallback(then), json!({}));
    apply(&mut snap, &Command::Start, &CTX).expect("start");
    assert_eq!(snap.nodes[0].state, NodeState::ManualConfirm);
    apply(&mut snap, &Command::Fallback { node: 0 }, &CTX).expect("fallback");
    assert_eq!(snap.nodes[0].state, NodeState::Running);
    let cmd = if ok {
        let mut outputs = Map::new();
        outputs.insert("drafted".into(), json!(true));
        Command::AttemptSucceeded { node: 0, attempt: 1, outputs }
    } else {
        Command::AttemptFailed { node: 0, attempt: 1, error: "no template".into(), retryable: true }
    };
    let plan = apply(&mut snap, &cmd, &CTX).expect("result");
    (snap, plan)
}

#[test]
fn then_skip_ends_the_node_skipped_and_skips_strong_downstream() {
    let (snap, plan) = fall_back(FallbackThen::Skip, true);
    assert_eq!(snap.nodes[0].state, NodeState::Skipped);
    assert_eq!(snap.nodes[0].reason.as_deref(), Some("fallback_skip"));
    assert_eq!(snap.nodes[0].outputs.get("drafted"), Some(&json!(true)), "the fallback's outputs are kept");
    assert_eq!(snap.nodes[0].data_version, 0, "a skipped node produces no data version");
    let change = plan.nodes.iter().find(|c| c.node == 0).expect("node 0 changed");
    assert_eq!(
        (change.from, change.to, change.cause),
        (NodeState::Running, NodeState::Skipped, Cause::FallbackSkipped)
    );
    assert_eq!(snap.nodes[1].reason.as_deref(), Some("upstream_skipped"));
    assert!(plan.actions.contains(&Action::Ready { node: 2 }), "the weak reader runs: {plan:?}");
}

#[test]
fn then_success_ends_the_node_successful() {
    let (snap, plan) = fall_back(FallbackThen::Success, true);
    assert_eq!(snap.nodes[0].state, NodeState::Success);
    assert_eq!(snap.nodes[0].data_version, 1);
    assert!(plan.actions.contains(&Action::Ready { node: 1 }), "{plan:?}");
}

#[test]
fn a_failing_fallback_fails_the_node_whatever_then_says() {
    for then in [FallbackThen::Skip, FallbackThen::Success] {
        let (snap, _) = fall_back(then, false);
        assert_eq!(snap.nodes[0].state, NodeState::Failed, "{then:?}: fallbacks are not retried");
        assert_eq!(snap.nodes[1].reason.as_deref(), Some("upstream_failed"));
    }
}
