//! Store tests on a real SQLite file.

use madeira_core::{NodeState, RunState};
use serde_json::json;

use super::SqliteStore;
use crate::*;

async fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open_path(&dir.path().join("m.db")).await.expect("open");
    (dir, store)
}

fn new_run(id: &str, key: Option<&str>, max: u32, overlap: Overlap) -> NewRun {
    NewRun {
        id: id.into(),
        flow: "f".into(),
        version: 1,
        params: json!({"a": 1}),
        idempotency_key: key.map(str::to_string),
        trigger: "manual".into(),
        node_names: vec!["a".into(), "b".into()],
        max_active_runs: max,
        overlap,
        throttles: Vec::new(),
        actor: "test".into(),
        now_ms: 10,
        trace_context: Some(format!("00-{:0>32}-00f067aa0ba902b7-01", id.len())),
    }
}

#[tokio::test]
async fn flow_versions_only_change_with_content() {
    let (_d, s) = store().await;
    assert_eq!(s.put_flow("f", "x", "h1", 1).await.expect("put"), PutFlow { version: 1, created: true });
    assert_eq!(s.put_flow("f", "x", "h1", 2).await.expect("put"), PutFlow { version: 1, created: false });
    assert_eq!(s.put_flow("f", "y", "h2", 3).await.expect("put"), PutFlow { version: 2, created: true });
    assert_eq!(s.get_flow("f").await.expect("get").map(|f| f.source), Some("y".into()));
    assert_eq!(s.flow_version("f", 1).await.expect("v1").map(|v| v.source), Some("x".into()));
}

#[tokio::test]
async fn idempotency_key_returns_existing_run() {
    let (_d, s) = store().await;
    let first = s.create_run(&new_run("r1", Some("k"), 0, Overlap::Queue)).await.expect("create");
    assert!(matches!(first, CreateOutcome::Created { state: RunState::Running, .. }));
    let second = s.create_run(&new_run("r2", Some("k"), 0, Overlap::Queue)).await.expect("create");
    assert_eq!(second, CreateOutcome::Existing { run_id: "r1".into(), version: 1 });
    let stored = s.load_run("r1").await.expect("load").expect("exists");
    assert_eq!(stored.nodes.len(), 2);
    assert_eq!(stored.nodes[1].state, NodeState::Init);
    assert!(s.load_run("r2").await.expect("load").is_none());
}

#[tokio::test]
async fn overlap_policies_are_decided_in_the_store() {
    let (_d, s) = store().await;
    s.create_run(&new_run("r1", None, 1, Overlap::Skip)).await.expect("r1");
    let skipped = s.create_run(&new_run("r2", None, 1, Overlap::Skip)).await.expect("r2");
    assert_eq!(skipped, CreateOutcome::Skipped { active: vec!["r1".into()] });
    let queued = s.create_run(&new_run("r3", None, 1, Overlap::Queue)).await.expect("r3");
    assert!(matches!(queued, CreateOutcome::Created { state: RunState::Queued, .. }));
    assert_eq!(s.promote_queued("f", 1, 20).await.expect("promote"), None, "r1 still active");
    let mut batch = Batch::default();
    batch.runs.push(RunWrite {
        run_id: "r1".into(),
        state: RunState::Success,
        started_at: None,
        finished_at: Some(30),
    });
    s.commit(&batch).await.expect("commit");
    assert_eq!(s.promote_queued("f", 1, 40).await.expect("promote"), Some("r3".into()));
    let cancel = s.create_run(&new_run("r4", None, 1, Overlap::CancelPrevious)).await.expect("r4");
    assert_eq!(
        cancel,
        CreateOutcome::Created {
            run_id: "r4".into(),
            state: RunState::Queued,
            cancel_previous: vec!["r3".into()]
        }
    );
}

#[tokio::test]
async fn commit_writes_nodes_and_transitions_together_and_prune_removes_old_runs() {
    let (_d, s) = store().await;
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let mut stored = s.load_run("r1").await.expect("load").expect("exists");
    let node = &mut stored.nodes[0];
    node.state = NodeState::Success;
    node.data_version = 1;
    node.outputs.insert("k".into(), json!(5));
    node.reads = vec![(1, 2)];
    let batch = Batch {
        nodes: vec![node.clone()],
        runs: vec![RunWrite {
            run_id: "r1".into(),
            state: RunState::Success,
            started_at: None,
            finished_at: Some(50),
        }],
        transitions: vec![TransitionRecord {
            run_id: "r1".into(),
            node: Some("a".into()),
            from: "RUNNING".into(),
            to: "SUCCESS".into(),
            cause: "succeeded".into(),
            actor: "engine".into(),
            attempt: 1,
            reason: None,
            at: 50,
        }],
        ..Batch::default()
    };
    s.commit(&batch).await.expect("commit");
    let again = s.load_run("r1").await.expect("load").expect("exists");
    assert_eq!(again.nodes[0], stored.nodes[0]);
    assert_eq!(again.run.state, "SUCCESS");
    let log = s.transitions("r1").await.expect("transitions");
    assert_eq!(log.iter().map(|t| t.cause.as_str()).collect::<Vec<_>>(), ["created", "started", "succeeded"]);
    assert_eq!(s.prune(40, 100).await.expect("prune"), 0, "finished after the cutoff");
    assert_eq!(s.prune(60, 100).await.expect("prune"), 1);
    assert!(s.load_run("r1").await.expect("load").is_none());
    assert!(s.transitions("r1").await.expect("transitions").is_empty());
}

#[tokio::test]
async fn trace_context_is_kept_with_the_run() {
    let (_d, s) = store().await;
    let CreateOutcome::Created { run_id, .. } =
        s.create_run(&new_run("r-trace", None, 0, Overlap::Queue)).await.expect("create")
    else {
        panic!("not created");
    };
    let stored = s.load_run(&run_id).await.expect("load").expect("run");
    assert_eq!(
        stored.run.trace_context.as_deref(),
        Some("00-00000000000000000000000000000007-00f067aa0ba902b7-01")
    );
}
