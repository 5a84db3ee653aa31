//! Builtins whose result is known without running anything (`noop`, `fail`) take
//! it into the engine's next batch without a task: the attempt's start is still
//! committed first (one commit per node of a chain, as for any attempt), the
//! attempt is recorded on this replica, and `fail`'s retries behave as before.

mod common;

use common::{manual, sqlite_store, start_engine, wait_finished};
use madeira_core::RunState;

const FLOW: &str = "\
flow: quick
nodes:
  a: {run: {builtin: noop, outputs: {k: 1}}}
  b: {needs: [a], run: {builtin: noop}}
  c: {needs: [b], run: {builtin: fail, message: first try fails, times: 1}, retry: {attempts: 2, backoff: 10ms, jitter: 0s}}
";

#[tokio::test]
async fn a_noop_chain_commits_each_start_before_its_result_and_fail_retries_as_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = sqlite_store(&dir).await;
    let (handle, cancel) = start_engine(store.clone());
    handle.apply_flow("quick.yaml", FLOW).await.expect("flow");
    let before = handle.stats().snapshot(false).commits;
    let run = handle.trigger(manual("quick")).await.expect("trigger").run_id;
    assert_eq!(wait_finished(store.as_ref(), &run).await, RunState::Success);

    // The run's start with a's start; b's start with a's result; c's with b's;
    // c's failure (its retry armed); c's second start; its result with the run's end.
    // Had a result shared its start's commit, there would be fewer.
    let commits = handle.stats().snapshot(false).commits - before;
    assert_eq!(commits, 6, "group commits of the run");

    let stored = store.load_run(&run).await.expect("load").expect("run");
    let attempts: Vec<_> = stored
        .attempts
        .iter()
        .map(|a| (a.node.as_str(), a.attempt, a.outcome.as_deref(), a.error.as_deref(), a.host.is_some()))
        .collect();
    assert_eq!(
        attempts,
        [
            ("a", 1, Some("SUCCESS"), None, true),
            ("b", 1, Some("SUCCESS"), None, true),
            ("c", 1, Some("RETRYABLE"), Some("first try fails"), true),
            ("c", 2, Some("SUCCESS"), None, true),
        ]
    );
    let a = stored.nodes.iter().find(|n| n.node == "a").expect("node a");
    assert_eq!(a.outputs.get("k"), Some(&serde_json::json!(1)), "a's outputs");
    cancel.cancel();
}
