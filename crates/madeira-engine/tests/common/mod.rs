//! Helpers shared by the engine's integration tests: a real engine over a store,
//! and waiting (with a deadline) for a run to finish.

use std::sync::Arc;
use std::time::{Duration, Instant};

use madeira_core::RunState;
use madeira_engine::{EngineHandle, EngineOptions, Executors, TriggerRequest};
use madeira_store::Store;
use madeira_store::sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;

/// A durable SQLite store in `dir`.
pub async fn sqlite_store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"))
}

/// A manual trigger of `flow`'s current version by `sre`, without params or key.
pub fn manual(flow: &str) -> TriggerRequest {
    TriggerRequest::manual(flow, "sre")
}

/// An engine with the default options over `store`, running until the token is cancelled.
#[allow(dead_code)] // each test binary compiles this module; not every one starts its engine so
pub fn start_engine(store: Arc<dyn Store>) -> (EngineHandle, CancellationToken) {
    let (engine, handle) = madeira_engine::build(
        store,
        Executors::new(Default::default()),
        Vec::new(),
        EngineOptions::default(),
    );
    let cancel = CancellationToken::new();
    tokio::spawn(engine.run(cancel.clone()));
    (handle, cancel)
}

/// The state `run_id` ends in, read from the store; fails after 10 s.
pub async fn wait_finished(store: &dyn Store, run_id: &str) -> RunState {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = store.load_run(run_id).await.expect("load").expect("run").run.state;
        if state.is_terminal() {
            return state;
        }
        assert!(Instant::now() < deadline, "run {run_id} still {state} after 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until node `idx` of `run_id` is in `state`, read from the store; fails
/// after 10 s naming `what`.
#[allow(dead_code)] // each test binary compiles this module; not every one waits on a node
pub async fn wait_node(
    store: &dyn Store,
    run_id: &str,
    idx: usize,
    state: madeira_core::NodeState,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let run = store.load_run(run_id).await.expect("load").expect("run");
        if run.nodes.get(idx).is_some_and(|n| n.state == state) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: run {run_id} node {idx} not {state} after 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
