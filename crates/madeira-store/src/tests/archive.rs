//! The run archive: a finished run (retries, outputs, a failed node, a rerun
//! history) reads the same folded as before, through every reader (the run and
//! its nodes and attempts, the transition log, logs, durations, node waits and
//! `after` promotion on one of its nodes); its former holder's late commit is
//! fenced out; a claim unfolds it and a rerun of it completes with its history
//! whole; it folds again, and retention deletes it with its archive.

use madeira_core::{Cause, NodeState, RunCause, RunState};
use serde_json::json;

use crate::tests::suite::new_run;
use crate::*;

const DAY: &str = "2026-12-04";

fn run_of(flow: &str, id: &str, nodes: &[&str]) -> NewRun {
    NewRun {
        flow: flow.into(),
        biz_date: Some(DAY.into()),
        node_names: nodes.iter().map(|n| n.to_string()).collect(),
        ..new_run(id, None, 0, Overlap::Queue)
    }
}

fn wait(node: &str) -> AfterWait {
    AfterWait { flow: "up".into(), node: Some(node.into()), date: DAY.into() }
}

fn lease(owner: &str, length_ms: i64) -> Lease {
    Lease { owner: owner.into(), now_ms: 0, until_ms: length_ms }
}

/// Every view of run `up1` a reader has.
#[derive(Debug, PartialEq)]
struct Views {
    run: RunRow,
    nodes: Vec<NodeRow>,
    attempts: Vec<AttemptRecord>,
    log: Vec<TransitionRecord>,
    logs: Vec<Vec<LogRecord>>,
    durations: Vec<(String, i64)>,
    waits: Vec<NodeWaitState>,
}

async fn views(s: &dyn Store) -> Views {
    let stored = s.load_run("up1").await.expect("load").expect("up1");
    let mut logs = Vec::new();
    for n in &stored.nodes {
        logs.push(s.logs("up1", &n.node).await.expect("logs"));
    }
    Views {
        run: stored.run,
        nodes: stored.nodes,
        attempts: stored.attempts,
        log: s.transitions("up1").await.expect("transitions"),
        logs,
        durations: s.node_durations("up", 10).await.expect("durations"),
        waits: s.node_waits("down1").await.expect("node waits"),
    }
}

fn node_edge(
    node: &str,
    from: NodeState,
    to: NodeState,
    cause: Cause,
    attempt: u32,
    at: i64,
) -> TransitionRecord {
    TransitionRecord {
        run_id: "up1".into(),
        node: Some(node.into()),
        edge: Edge::Node { from, to, cause },
        actor: "engine".into(),
        attempt,
        reason: None,
        at,
    }
}

fn run_edge(from: RunState, cause: RunCause, to: RunState, actor: &str, at: i64) -> TransitionRecord {
    TransitionRecord {
        run_id: "up1".into(),
        node: None,
        edge: Edge::run(Some(from), cause, to),
        actor: actor.into(),
        attempt: 0,
        reason: Some("by \"ops\"\nagain".into()),
        at,
    }
}

fn attempt(node: &str, n: u32, start: i64, end: i64, outcome: &str) -> AttemptRecord {
    AttemptRecord {
        run_id: "up1".into(),
        node: node.into(),
        attempt: n,
        started_at: start,
        finished_at: Some(end),
        outcome: Some(outcome.into()),
        error: (outcome != "SUCCESS").then(|| format!("exit 1 on try {n}")),
        host: Some("replica-a".into()),
    }
}

fn set(n: &NodeRow, state: NodeState, attempt: u32, at: i64) -> NodeRow {
    let mut n = n.clone();
    n.state = state;
    n.attempt = attempt;
    n.started_at = Some(at - 5);
    n.finished_at = state.is_terminal().then_some(at);
    n.reason = (state == NodeState::Failed).then(|| format!("attempt {attempt} failed"));
    n
}

fn finish(state: RunState, at: i64) -> RunWrite {
    RunWrite { run_id: "up1".into(), state, started_at: Some(20), finished_at: Some(at) }
}

/// up1: `fetch_x` succeeds on its second try with outputs; `verify` fails, is
/// rerun and fails again; `post` is skipped; the run ends FAILED at 200.
async fn history(s: &dyn Store, owner: &str) {
    let nodes = s.load_run("up1").await.expect("load").expect("up1").nodes;
    let mut fetch = set(&nodes[0], NodeState::Success, 2, 60);
    fetch.data_version = 1;
    fetch.outputs.insert("rows".into(), json!(12));
    fetch.reads = vec![];
    s.commit(&Batch {
        owner: Some(owner.into()),
        runs: vec![RunWrite {
            run_id: "up1".into(),
            state: RunState::Running,
            started_at: Some(20),
            finished_at: None,
        }],
        nodes: vec![
            fetch,
            set(&nodes[1], NodeState::Failed, 1, 90),
            set(&nodes[2], NodeState::Skipped, 0, 91),
        ],
        attempts: vec![
            attempt("fetch_x", 1, 21, 30, "RETRYABLE"),
            attempt("fetch_x", 2, 40, 60, "SUCCESS"),
            attempt("verify", 1, 61, 90, "FAILED"),
        ],
        outputs: vec![OutputWrite {
            run_id: "up1".into(),
            node: "fetch_x".into(),
            data_version: 1,
            key: "rows".into(),
            value: json!(12),
        }],
        logs: vec![LogRecord {
            run_id: "up1".into(),
            node: "verify".into(),
            attempt: 1,
            content: "Traceback…\n".into(),
        }],
        transitions: vec![
            run_edge(RunState::Admitted, RunCause::Started, RunState::Running, "engine", 20),
            node_edge("fetch_x", NodeState::Init, NodeState::Running, Cause::Dispatch, 1, 21),
            node_edge("fetch_x", NodeState::Running, NodeState::Retrying, Cause::RetryScheduled, 1, 30),
            node_edge("fetch_x", NodeState::Retrying, NodeState::Running, Cause::RetryDue, 2, 40),
            node_edge("fetch_x", NodeState::Running, NodeState::Success, Cause::Succeeded, 2, 60),
            node_edge("verify", NodeState::Running, NodeState::Failed, Cause::AttemptFailed, 1, 90),
            node_edge("post", NodeState::Init, NodeState::Skipped, Cause::UpstreamFailed, 0, 91),
            run_edge(RunState::Running, RunCause::Failed, RunState::Failed, "engine", 92),
        ],
        ..Batch::default()
    })
    .await
    .expect("first try");
    s.commit(&Batch {
        owner: Some(owner.into()),
        runs: vec![finish(RunState::Failed, 200)],
        nodes: vec![set(&nodes[1], NodeState::Failed, 2, 190)],
        attempts: vec![attempt("verify", 2, 150, 190, "FAILED")],
        transitions: vec![
            node_edge("verify", NodeState::Failed, NodeState::Init, Cause::Rerun, 1, 140),
            run_edge(RunState::Failed, RunCause::Reactivated, RunState::Running, "ops", 141),
            node_edge("verify", NodeState::Running, NodeState::Failed, Cause::AttemptFailed, 2, 190),
            run_edge(RunState::Running, RunCause::Failed, RunState::Failed, "engine", 200),
        ],
        ..Batch::default()
    })
    .await
    .expect("rerun");
}

pub(crate) async fn a_folded_run_reads_as_before_and_a_rerun_after_it_completes(s: &dyn Store) {
    s.create_run(&run_of("up", "up1", &["fetch_x", "verify", "post"])).await.expect("up1");
    let down = NewRun {
        node_after: vec![
            NodeWait { node: "a".into(), wait: wait("fetch_x") },
            NodeWait { node: "b".into(), wait: wait("verify") },
        ],
        ..run_of("down", "down1", &["a", "b"])
    };
    s.create_run(&down).await.expect("down1");
    // Held by `after` on up1's nodes: promoted only once the node is SUCCESS.
    s.create_run(&NewRun { after: vec![wait("fetch_x")], ..run_of("w1", "w1-1", &["a"]) }).await.expect("w1");
    s.create_run(&NewRun { after: vec![wait("verify")], ..run_of("w2", "w2-1", &["a"]) }).await.expect("w2");
    assert_eq!(s.claim_run("up1", &lease("old", -1), false).await.expect("claim"), Claim::Held);
    history(s, "old").await;
    let before = views(s).await;
    assert_eq!(before.attempts.len(), 4);
    assert_eq!(before.log.len(), 13, "{:?}", before.log);
    assert!(before.waits.iter().any(|w| w.met) && before.waits.iter().any(|w| !w.met), "{:?}", before.waits);
    assert_eq!(s.folded().await.expect("counts"), (0, 0));

    assert_eq!(s.fold_finished(150, 100).await.expect("fold"), 0, "finished after the cutoff");
    assert_eq!(s.fold_finished(1_000, 100).await.expect("fold"), 1, "only up1 is finished");
    assert_eq!(s.fold_finished(1_000, 100).await.expect("fold"), 0, "folded once");
    assert_eq!(s.folded().await.expect("counts"), (1, 3));
    assert_eq!(views(s).await, before, "folded, every view reads the same");
    assert_eq!(
        s.promote_queued("w1", 0, 300).await.expect("promote"),
        Some("w1-1".into()),
        "fetch_x SUCCESS"
    );
    assert_eq!(s.promote_queued("w2", 0, 300).await.expect("promote"), None, "verify FAILED");

    // The former holder's late write is fenced out, never written beside the archive.
    let late = Batch {
        owner: Some("old".into()),
        attempt_hosts: vec![AttemptHost {
            run_id: "up1".into(),
            node: "verify".into(),
            attempt: 2,
            host: "x".into(),
        }],
        ..Batch::default()
    };
    assert!(matches!(s.commit(&late).await, Err(StoreError::LeaseLost { .. })));
    assert_eq!(views(s).await, before);

    // An operator's rerun: the claim unfolds it, held, so it is not folded again.
    assert_eq!(s.claim_run("up1", &lease("ops", 60_000), true).await.expect("claim"), Claim::Held);
    assert_eq!(s.folded().await.expect("counts"), (0, 0));
    assert_eq!(views(s).await, before, "unfolded, the rows read the same");
    assert_eq!(s.fold_finished(1_000, 100).await.expect("fold"), 0, "held by a live lease");
    let stored = s.load_run("up1").await.expect("load").expect("up1");
    s.commit(&Batch {
        owner: Some("ops".into()),
        runs: vec![finish(RunState::Success, 400)],
        nodes: vec![
            set(&stored.nodes[1], NodeState::Success, 3, 390),
            set(&stored.nodes[2], NodeState::Success, 1, 395),
        ],
        attempts: vec![attempt("verify", 3, 350, 390, "SUCCESS"), attempt("post", 1, 391, 395, "SUCCESS")],
        transitions: vec![
            node_edge("verify", NodeState::Failed, NodeState::Init, Cause::Rerun, 2, 340),
            run_edge(RunState::Failed, RunCause::Reactivated, RunState::Running, "ops", 341),
            node_edge("verify", NodeState::Running, NodeState::Success, Cause::Succeeded, 3, 390),
            node_edge("post", NodeState::Running, NodeState::Success, Cause::Succeeded, 1, 395),
            run_edge(RunState::Running, RunCause::Succeeded, RunState::Success, "engine", 400),
        ],
        ..Batch::default()
    })
    .await
    .expect("rerun after the fold");
    let after = views(s).await;
    assert_eq!(after.run.state, RunState::Success);
    assert_eq!(after.log[..before.log.len()], before.log[..], "the history before the rerun is whole");
    assert_eq!(after.log.len(), before.log.len() + 5);
    assert_eq!(after.attempts.len(), 6);
    assert_eq!(after.logs[1].len(), 3, "verify's three attempts: {:?}", after.logs[1]);
    assert!(after.waits.iter().all(|w| w.met), "{:?}", after.waits);

    // The lease given up, it folds again and reads the same; retention deletes it whole.
    assert_eq!(s.claim_run("up1", &lease("ops", -1), true).await.expect("claim"), Claim::Held);
    assert_eq!(s.fold_finished(1_000, 100).await.expect("fold"), 1);
    assert_eq!(views(s).await, after);
    assert_eq!(s.promote_queued("w2", 0, 500).await.expect("promote"), Some("w2-1".into()), "verify SUCCESS");
    assert_eq!(s.prune(1_000, 100).await.expect("prune"), 1);
    assert!(s.load_run("up1").await.expect("load").is_none());
    assert!(s.transitions("up1").await.expect("transitions").is_empty());
    assert_eq!(s.folded().await.expect("counts"), (0, 0));
}

/// Two folds at once (two replicas): every run is folded exactly once.
pub(crate) async fn concurrent_folds_take_each_run_once(s: &dyn Store) {
    for i in 0..40 {
        let id = format!("c{i:02}");
        s.create_run(&NewRun { flow: "c".into(), ..new_run(&id, None, 0, Overlap::Queue) })
            .await
            .expect("create");
        let run = RunWrite {
            run_id: id.clone(),
            state: RunState::Success,
            started_at: Some(1),
            finished_at: Some(2),
        };
        s.commit(&Batch { runs: vec![run], ..Batch::default() }).await.expect("finish");
    }
    let mut total = 0;
    for _ in 0..10 {
        let (a, b) = futures::join!(s.fold_finished(100, 7), s.fold_finished(100, 7));
        total += a.expect("fold a") + b.expect("fold b");
        if total == 40 {
            break;
        }
    }
    assert_eq!(total, 40);
    assert_eq!(s.folded().await.expect("counts"), (40, 80));
    for i in 0..40 {
        let stored = s.load_run(&format!("c{i:02}")).await.expect("load").expect("run");
        assert_eq!(stored.nodes.len(), 2, "c{i:02}");
        assert_eq!(s.transitions(&format!("c{i:02}")).await.expect("log").len(), 1, "admitted");
    }
}
