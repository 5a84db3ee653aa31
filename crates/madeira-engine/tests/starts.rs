//! How a run starts, end to end on a real engine over a SQLite store: a trigger's
//! run is created ADMITTED (room) or QUEUED (none) by the store's admission,
//! promoted QUEUED -> ADMITTED when room frees, and started by the engine's
//! `Command::Start`, each run edge recorded once; a run whose process died
//! between its creation commit and its start (still ADMITTED) is started by the
//! recovery of the next engine on that store.

mod common;

use common::{manual, sqlite_store, start_engine, wait_finished, wait_node};
use madeira_core::{NodeState, RunState};
use madeira_engine::{ActionRequest, NodeActionKind};
use madeira_store::{CreateOutcome, NewRun, Overlap, Store, TransitionRecord};

const FLOW: &str = "flow: f\nconcurrency: {max_active_runs: 1}\nnodes:\n  a: {run: {builtin: noop}}\n";

type Names = (&'static str, &'static str, &'static str, String);

/// `(from, to, cause, actor)` of the run's run-level transition records.
async fn run_edges(store: &dyn Store, run_id: &str) -> Vec<Names> {
    let log = store.transitions(run_id).await.expect("transitions");
    let names = |t: TransitionRecord| (t.edge.from_name(), t.edge.to_name(), t.edge.cause_name(), t.actor);
    log.into_iter().filter(|t| t.node.is_none()).map(names).collect()
}

fn edge(from: &'static str, to: &'static str, cause: &'static str, actor: &str) -> Names {
    (from, to, cause, actor.into())
}

#[tokio::test]
async fn a_triggered_run_is_created_by_admission_and_started_by_the_engine_each_edge_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = sqlite_store(&dir).await;
    let (handle, cancel) = start_engine(store.clone());
    handle.apply_flow("f.yaml", FLOW).await.expect("flow");
    let run = handle.trigger(manual("f")).await.expect("trigger").run_id;
    assert_eq!(wait_finished(store.as_ref(), &run).await, RunState::Success);
    assert_eq!(
        run_edges(store.as_ref(), &run).await,
        [
            edge("NONE", "ADMITTED", "admitted", "sre"),
            edge("ADMITTED", "RUNNING", "started", "engine"),
            edge("RUNNING", "SUCCESS", "succeeded", "engine"),
        ]
    );
    cancel.cancel();
}

#[tokio::test]
async fn a_run_admitted_but_never_started_is_started_by_recovery() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = sqlite_store(&dir).await;
    store.put_flow("f", FLOW, "h1", 1).await.expect("flow");
    // The creation commit of a process killed before its engine started the run.
    let run = NewRun {
        id: "0190a1b2-0000-7000-8000-000000000001".into(),
        flow: "f".into(),
        version: 1,
        params: serde_json::json!({}),
        idempotency_key: None,
        trigger: "manual".into(),
        node_names: vec!["a".into()],
        max_active_runs: 1,
        overlap: Overlap::Queue,
        throttles: Vec::new(),
        actor: "sre".into(),
        now_ms: madeira_engine::now_ms(),
        trace_context: None,
        lease: None,
        biz_date: None,
        one_per_biz_date: false,
        after: Vec::new(),
        wait_reason: None,
    };
    let created = store.create_run(&run).await.expect("create");
    assert!(matches!(created, CreateOutcome::Created { start: true, .. }), "{created:?}");
    assert_eq!(store.load_run(&run.id).await.expect("load").expect("run").run.state, RunState::Admitted);

    let (_handle, cancel) = start_engine(store.clone());
    assert_eq!(wait_finished(store.as_ref(), &run.id).await, RunState::Success);
    assert_eq!(
        run_edges(store.as_ref(), &run.id).await,
        [
            edge("NONE", "ADMITTED", "admitted", "sre"),
            edge("ADMITTED", "RUNNING", "started", "engine"),
            edge("RUNNING", "SUCCESS", "succeeded", "engine"),
        ]
    );
    cancel.cancel();
}

const GATED: &str = "flow: g\nconcurrency: {max_active_runs: 1}\nnodes:\n  gate: {manual: {prompt: go}}\n";

#[tokio::test]
async fn a_run_without_room_waits_queued_and_its_promotion_is_a_recorded_edge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = sqlite_store(&dir).await;
    let (handle, cancel) = start_engine(store.clone());
    handle.apply_flow("g.yaml", GATED).await.expect("flow");
    let first = handle.trigger(manual("g")).await.expect("first").run_id;
    wait_node(store.as_ref(), &first, 0, NodeState::ManualConfirm, "the first run's gate").await;
    let second = handle.trigger(manual("g")).await.expect("second").run_id;
    assert_eq!(store.load_run(&second).await.expect("load").expect("run").run.state, RunState::Queued);
    for run_id in [&first, &second] {
        let confirm = ActionRequest {
            run_id: run_id.clone(),
            node: Some("gate".into()),
            kind: Some(NodeActionKind::Confirm),
            actor: "sre".into(),
            reason: None,
        };
        if run_id == &second {
            wait_node(store.as_ref(), run_id, 0, NodeState::ManualConfirm, "the second run, promoted").await;
        }
        handle.act(confirm).await.expect("confirm");
    }
    assert_eq!(wait_finished(store.as_ref(), &second).await, RunState::Success);
    assert_eq!(
        run_edges(store.as_ref(), &second).await,
        [
            edge("NONE", "QUEUED", "created", "sre"),
            edge("QUEUED", "ADMITTED", "admitted", "engine"),
            edge("ADMITTED", "RUNNING", "started", "engine"),
            edge("RUNNING", "SUCCESS", "succeeded", "sre"),
        ]
    );
    cancel.cancel();
}
