//! Planner tests: hand-written scenarios for each dependency rule and operator
//! action, and property tests over random DAGs and random outcomes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Map, json};

use super::*;
use crate::expr::Condition;
use crate::model::*;
use crate::retry::RetryPolicy;

/// A test node: `(needs, manual, attempts, when)`.
pub(crate) type TestNode<'a> = (Vec<(usize, DepKind)>, bool, u32, Option<&'a str>);

pub(crate) fn flow(nodes: Vec<TestNode<'_>>) -> Arc<FlowDef> {
    let n = nodes.len();
    let mut downstream = vec![Vec::new(); n];
    let defs = nodes
        .into_iter()
        .enumerate()
        .map(|(i, (needs, manual, attempts, when))| {
            for (u, kind) in &needs {
                downstream[*u].push((i, *kind));
            }
            NodeDef {
                id: format!("n{i}"),
                needs: needs.into_iter().map(|(upstream, kind)| Need { upstream, kind }).collect(),
                when: when.map(|w| Condition::compile(w).expect("test condition compiles")),
                action: if manual {
                    NodeAction::Manual(ManualDef {
                        prompt: "ok?".into(),
                        alert_after: None,
                        fallback_after: None,
                        fallback: None,
                        fallback_then: Default::default(),
                    })
                } else {
                    NodeAction::Run(ExecutorDef::Builtin(BuiltinDef {
                        kind: BuiltinKind::Noop,
                        outputs: Map::new(),
                    }))
                },
                timeout: Duration::from_secs(60),
                retry: RetryPolicy { attempts, ..RetryPolicy::default() },
                stall_after: std::time::Duration::from_secs(600),
                warn_after: None,
                foreach: None,
                max_duration: None,
                after: Vec::new(),
                throttle: None,
            }
        })
        .collect();
    Arc::new(FlowDef {
        name: "t".into(),
        description: None,
        labels: BTreeMap::new(),
        triggers: vec![],
        concurrency: ConcurrencyDef::default(),
        rate_limit: None,
        routing: None,
        observe: false,
        business: Default::default(),
        nodes: defs,
        downstream,
        topo: (0..n).collect(),
        after: vec![],
        after_policy: Default::default(),
        max_duration: None,
    })
}

const CTX: PlanCtx = PlanCtx { now_ms: 1_000, jitter_unit: 0.5 };

fn started(f: Arc<FlowDef>) -> (RunSnapshot, Plan) {
    let mut snap = RunSnapshot::new("r1".into(), f, json!({}));
    let plan = apply(&mut snap, &Command::Start, &CTX).expect("start");
    (snap, plan)
}

fn run_node(snap: &mut RunSnapshot, node: usize, ok: bool) -> Plan {
    apply(snap, &Command::Dispatch { node }, &CTX).expect("dispatch");
    let attempt = snap.nodes[node].attempt;
    let cmd = if ok {
        Command::AttemptSucceeded { node, attempt, outputs: Map::new() }
    } else {
        Command::AttemptFailed { node, attempt, error: "boom".into(), retryable: false }
    };
    apply(snap, &cmd, &CTX).expect("result")
}

fn ready(plan: &Plan) -> Vec<usize> {
    plan.actions
        .iter()
        .filter_map(|a| if let Action::Ready { node } = a { Some(*node) } else { None })
        .collect()
}

#[test]
fn strong_failure_skips_downstream_and_fails_run() {
    let f = flow(vec![
        (vec![], false, 1, None),
        (vec![(0, DepKind::Strong)], false, 1, None),
        (vec![(1, DepKind::Strong)], false, 1, None),
    ]);
    let (mut snap, plan) = started(f);
    assert_eq!(ready(&plan), vec![0]);
    run_node(&mut snap, 0, false);
    assert_eq!(snap.nodes[1].state, NodeState::Skipped);
    assert_eq!(snap.nodes[1].reason.as_deref(), Some("upstream_failed"));
    assert_eq!(snap.nodes[2].reason.as_deref(), Some("upstream_skipped"));
    assert_eq!(snap.state, RunState::Failed);
}

#[test]
fn weak_edge_runs_after_failure_and_run_succeeds() {
    let f = flow(vec![(vec![], false, 1, None), (vec![(0, DepKind::Weak)], false, 1, None)]);
    let (mut snap, _) = started(f);
    let plan = run_node(&mut snap, 0, false);
    assert_eq!(ready(&plan), vec![1]);
    run_node(&mut snap, 1, true);
    assert_eq!(snap.state, RunState::Success);
}

#[test]
fn false_condition_skips_with_reason() {
    let f = flow(vec![
        (vec![], false, 1, None),
        (vec![(0, DepKind::Strong)], false, 1, Some("nodes.n0.outputs.count > 0")),
    ]);
    let (mut snap, _) = started(f);
    apply(&mut snap, &Command::Dispatch { node: 0 }, &CTX).expect("dispatch");
    let mut outputs = Map::new();
    outputs.insert("count".into(), json!(0));
    apply(&mut snap, &Command::AttemptSucceeded { node: 0, attempt: 1, outputs }, &CTX).expect("ok");
    assert_eq!(snap.nodes[1].state, NodeState::Skipped);
    assert_eq!(snap.nodes[1].reason.as_deref(), Some("condition_false"));
    assert_eq!(snap.state, RunState::Success);
}

#[test]
fn retry_then_final_failure() {
    let f = flow(vec![(vec![], false, 2, None)]);
    let (mut snap, _) = started(f);
    apply(&mut snap, &Command::Dispatch { node: 0 }, &CTX).expect("dispatch");
    let fail = |attempt| Command::AttemptFailed { node: 0, attempt, error: "503".into(), retryable: true };
    let plan = apply(&mut snap, &fail(1), &CTX).expect("fail 1");
    assert_eq!(snap.nodes[0].state, NodeState::Retrying);
    assert!(
        matches!(plan.actions[..], [Action::ReleasePermit { .. }, Action::ScheduleRetry { node: 0, at_ms }] if at_ms >= 6_000)
    );
    apply(&mut snap, &Command::RetryDue { node: 0 }, &CTX).expect("due");
    apply(&mut snap, &Command::Dispatch { node: 0 }, &CTX).expect("dispatch 2");
    apply(&mut snap, &fail(2), &CTX).expect("fail 2");
    assert_eq!(snap.nodes[0].state, NodeState::Failed);
    assert_eq!(snap.state, RunState::Failed);
}

#[test]
fn stale_result_is_refused() {
    let f = flow(vec![(vec![], false, 1, None)]);
    let (mut snap, _) = started(f);
    apply(&mut snap, &Command::Dispatch { node: 0 }, &CTX).expect("dispatch");
    let cmd = Command::AttemptSucceeded { node: 0, attempt: 7, outputs: Map::new() };
    assert!(matches!(apply(&mut snap, &cmd, &CTX), Err(Refusal::StaleAttempt { .. })));
}

#[test]
fn mark_success_reactivates_skipped_and_finishes_run() {
    let f = flow(vec![(vec![], false, 1, None), (vec![(0, DepKind::Strong)], false, 1, None)]);
    let (mut snap, _) = started(f);
    run_node(&mut snap, 0, false);
    assert_eq!(snap.state, RunState::Failed);
    let plan = apply(&mut snap, &Command::MarkSuccess { node: 0 }, &CTX).expect("mark");
    assert_eq!(snap.state, RunState::Running);
    assert_eq!(ready(&plan), vec![1]);
    run_node(&mut snap, 1, true);
    assert_eq!(snap.state, RunState::Success);
}

#[test]
fn confirm_refused_unless_waiting() {
    let f = flow(vec![(vec![], true, 1, None)]);
    let (mut snap, plan) = started(f);
    assert!(plan.actions.contains(&Action::AwaitConfirm { node: 0 }));
    apply(&mut snap, &Command::Confirm { node: 0 }, &CTX).expect("confirm");
    let again = apply(&mut snap, &Command::Confirm { node: 0 }, &CTX);
    assert!(matches!(again, Err(Refusal::Node { state: NodeState::Success, .. })));
    assert_eq!(snap.state, RunState::Success);
}

#[test]
fn rerun_marks_reader_stale_and_downstream_refreshes() {
    let f = flow(vec![(vec![], false, 1, None), (vec![(0, DepKind::Strong)], false, 1, None)]);
    let (mut snap, _) = started(f);
    run_node(&mut snap, 0, true);
    run_node(&mut snap, 1, true);
    assert_eq!(snap.nodes[1].reads, vec![(0, 1)]);
    apply(&mut snap, &Command::Rerun { node: 0, downstream: false }, &CTX).expect("rerun");
    let plan = run_node(&mut snap, 0, true);
    assert!(snap.nodes[1].stale);
    assert_eq!(plan.touched, vec![1], "the stale flag must reach the store");
    assert_eq!(snap.state, RunState::Success);
    apply(&mut snap, &Command::Rerun { node: 0, downstream: true }, &CTX).expect("rerun");
    assert_eq!(snap.nodes[1].state, NodeState::Init);
    run_node(&mut snap, 0, true);
    run_node(&mut snap, 1, true);
    assert!(!snap.nodes[1].stale);
    assert_eq!(snap.nodes[1].reads, vec![(0, 3)]);
}

#[test]
fn observe_only_node_refuses_rerun_but_takes_mark_success_and_skip() {
    let mut def =
        (*flow(vec![(vec![], false, 1, None), (vec![(0, DepKind::Strong)], false, 1, None)])).clone();
    def.observe = true;
    let (mut snap, _) = started(Arc::new(def));
    run_node(&mut snap, 0, false);
    assert_eq!(snap.state, RunState::Failed);
    for (node, downstream) in [(0, false), (0, true), (1, false)] {
        let before = snap.nodes.clone();
        let refusal =
            apply(&mut snap, &Command::Rerun { node, downstream }, &CTX).expect_err("rerun refused");
        assert_eq!(refusal, Refusal::ObserveOnly { flow: "t".into(), node: format!("n{node}") });
        assert!(refusal.to_string().contains("promote it (`madeira promote t`)"), "{refusal}");
        assert_eq!(snap.nodes, before, "a refused rerun changes nothing");
    }
    apply(&mut snap.clone(), &Command::Skip { node: 0 }, &CTX).expect("skip is allowed");
    apply(&mut snap, &Command::MarkSuccess { node: 0 }, &CTX).expect("mark-success is allowed");
    assert_eq!(snap.nodes[0].state, NodeState::Success);
}

#[test]
fn cancel_aborts_running_and_skips_rest() {
    let f = flow(vec![(vec![], false, 1, None), (vec![(0, DepKind::Strong)], false, 1, None)]);
    let (mut snap, _) = started(f);
    apply(&mut snap, &Command::Dispatch { node: 0 }, &CTX).expect("dispatch");
    let plan = apply(&mut snap, &Command::Cancel, &CTX).expect("cancel");
    assert!(plan.actions.contains(&Action::Abort { node: 0, attempt: 1 }));
    assert_eq!(snap.state, RunState::Cancelled);
    assert_eq!(snap.nodes[1].state, NodeState::Skipped);
    assert!(apply(&mut snap, &Command::Rerun { node: 0, downstream: false }, &CTX).is_err());
}

#[test]
fn recover_restarts_in_flight_attempts() {
    let f = flow(vec![(vec![], false, 1, None)]);
    let (mut snap, _) = started(f);
    apply(&mut snap, &Command::Dispatch { node: 0 }, &CTX).expect("dispatch");
    let plan = apply(&mut snap, &Command::Recover, &CTX).expect("recover");
    assert_eq!(snap.nodes[0].state, NodeState::Init);
    assert_eq!(ready(&plan), vec![0]);
    let key = snap.idempotency_key(0);
    apply(&mut snap, &Command::Dispatch { node: 0 }, &CTX).expect("dispatch again");
    assert_eq!(snap.idempotency_key(0), key, "same key across recovery");
}

#[test]
fn a_recovered_sidecar_attempt_keeps_its_number_and_an_in_process_one_starts_anew() {
    let mut def = (*flow(vec![(vec![], false, 2, None), (vec![], false, 2, None)])).clone();
    let sidecar =
        SidecarDef { group: "g".into(), job: "j".into(), shards: 1, route: SidecarRoute::default() };
    def.nodes[0].action = NodeAction::Run(ExecutorDef::Sidecar(sidecar));
    let (mut snap, _) = started(Arc::new(def));
    for node in [0, 1] {
        apply(&mut snap, &Command::Dispatch { node }, &CTX).expect("dispatch");
    }
    let plan = apply(&mut snap, &Command::Recover, &CTX).expect("recover");
    let recovered: Vec<u32> = plan.nodes.iter().map(|c| c.attempt).collect();
    assert_eq!(recovered, [1, 1], "the recovery names the attempt it found in flight");
    for node in [0, 1] {
        apply(&mut snap, &Command::Dispatch { node }, &CTX).expect("dispatch again");
    }
    assert_eq!(snap.nodes[0].attempt, 1, "the sidecar's attempt is adopted, not a second one");
    assert_eq!(snap.nodes[1].attempt, 2, "an in-process attempt died with the process: a new one");
    let attempt = snap.nodes[0].attempt;
    let cmd = Command::AttemptFailed { node: 0, attempt, error: "x".into(), retryable: true };
    apply(&mut snap, &cmd, &CTX).expect("its result is the attempt's");
    assert_eq!(snap.nodes[0].state, NodeState::Retrying, "the recovery spent none of the retry budget");
}

/// A random DAG: each node needs a random subset of earlier nodes.
fn arb_flow() -> impl Strategy<Value = Arc<FlowDef>> {
    (1usize..12)
        .prop_flat_map(|n| {
            let nodes = (0..n)
                .map(|i| {
                    let needs = proptest::collection::vec((0..i.max(1), any::<bool>()), 0..3.min(i + 1));
                    (needs, prop::bool::weighted(0.15), 1u32..4, prop::bool::weighted(0.2))
                })
                .collect::<Vec<_>>();
            (Just(n), nodes)
        })
        .prop_map(|(_, nodes)| {
            let specs = nodes
                .into_iter()
                .enumerate()
                .map(|(i, (needs, manual, attempts, conditional))| {
                    let mut needs: Vec<(usize, DepKind)> = if i == 0 {
                        vec![]
                    } else {
                        needs
                            .into_iter()
                            .map(|(u, weak)| (u, if weak { DepKind::Weak } else { DepKind::Strong }))
                            .collect()
                    };
                    needs.sort_by_key(|(u, _)| *u);
                    needs.dedup_by_key(|(u, _)| *u);
                    let when = (conditional && !needs.is_empty())
                        .then_some("nodes.n0.status == 'SUCCESS' || params.force == true");
                    let when = if needs.iter().any(|(u, _)| *u == 0) { when } else { None };
                    (needs, manual, attempts, when)
                })
                .collect();
            flow(specs)
        })
}

proptest! {
    #[test]
    fn random_runs_terminate_and_respect_the_rules(
        f in arb_flow(),
        outcomes in proptest::collection::vec(0u8..4, 200),
    ) {
        let mut snap = RunSnapshot::new("r".into(), f.clone(), json!({"force": false}));
        let mut pending: VecDeque<Action> = VecDeque::new();
        let mut plan = apply(&mut snap, &Command::Start, &CTX).expect("start");
        let mut dice = outcomes.into_iter().cycle();
        for _step in 0..10_000 {
            for change in &plan.nodes {
                prop_assert_eq!(change.from.apply(change.cause), Ok(change.to));
                if change.cause == Cause::Dispatch {
                    for need in &f.nodes[change.node].needs {
                        let up = snap.nodes[need.upstream].state;
                        prop_assert!(up.is_terminal());
                        if need.kind == DepKind::Strong {
                            prop_assert_eq!(up, NodeState::Success);
                        }
                    }
                }
            }
            pending.extend(plan.actions.drain(..));
            let Some(action) = pending.pop_front() else { break };
            let cmd = match action {
                Action::Ready { node } => Command::Dispatch { node },
                Action::Execute { node, attempt, .. } => match dice.next().unwrap_or(0) {
                    0 | 1 => Command::AttemptSucceeded { node, attempt, outputs: Map::new() },
                    2 => Command::AttemptFailed { node, attempt, error: "x".into(), retryable: true },
                    _ => Command::AttemptFailed { node, attempt, error: "x".into(), retryable: false },
                },
                Action::ScheduleRetry { node, .. } => Command::RetryDue { node },
                Action::AwaitConfirm { node } => if dice.next().unwrap_or(0) < 3 {
                    Command::Confirm { node }
                } else {
                    Command::Reject { node }
                },
                _ => continue,
            };
            plan = apply(&mut snap, &cmd, &CTX).expect("engine-issued commands are accepted");
        }
        prop_assert!(pending.is_empty(), "run did not terminate");
        prop_assert!(snap.nodes.iter().all(|n| n.state.is_terminal()));
        prop_assert!(snap.state.is_terminal());
        let expected = match cascade::run_outcome(&snap) {
            RunCause::Succeeded => RunState::Success,
            _ => RunState::Failed,
        };
        prop_assert_eq!(snap.state, expected);
    }
}

use std::collections::VecDeque;

/// A node held by its own `after` (INIT while the engine holds it) whose
/// `after_policy` ran out: FAILED or SKIPPED through the table, its downstream
/// following; refused once the node left INIT.
#[test]
fn a_node_held_by_after_fails_or_is_skipped_by_its_policy() {
    let chain = || {
        flow(vec![
            (vec![], false, 1, None),
            (vec![], false, 1, None),
            (vec![(1, DepKind::Strong)], false, 1, None),
        ])
    };
    let (mut snap, _) = started(chain());
    run_node(&mut snap, 0, true);
    let plan = apply(&mut snap, &Command::NodeAfterExpired { node: 1, skip: false }, &CTX).expect("fail");
    assert_eq!(plan.nodes[0].cause, Cause::AfterExpired);
    assert_eq!((snap.nodes[1].state, snap.nodes[2].state), (NodeState::Failed, NodeState::Skipped));
    assert!(snap.nodes[1].reason.as_deref().is_some_and(|r| r.starts_with("after_policy: fail")));
    assert_eq!(snap.state, RunState::Failed);
    let again = apply(&mut snap, &Command::NodeAfterExpired { node: 1, skip: false }, &CTX);
    assert!(again.is_err(), "a node no longer INIT is refused");
    let (mut snap, _) = started(chain());
    run_node(&mut snap, 0, true);
    apply(&mut snap, &Command::NodeAfterExpired { node: 1, skip: true }, &CTX).expect("skip");
    assert_eq!((snap.nodes[1].state, snap.nodes[2].state), (NodeState::Skipped, NodeState::Skipped));
    assert_eq!(snap.state, RunState::Success);
}
