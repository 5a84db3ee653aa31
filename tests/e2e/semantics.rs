//! Strong, weak and conditional dependencies, retries and their delays.

use serde_json::json;

use crate::support::{Dev, status_of};

const DEPS: &str = "flow: deps
nodes:
  root: {run: {builtin: fail, message: root broke}}
  strong_child: {needs: [root], run: {builtin: noop}}
  grandchild: {needs: [strong_child], run: {builtin: noop}}
  weak_child: {needs: [{node: root, kind: weak}], run: {builtin: noop, outputs: {saw: ok}}}
  ok: {run: {builtin: noop, outputs: {count: 0}}}
  cond: {needs: [ok], when: 'nodes.ok.outputs.count > 0 || params.force == true', run: {builtin: noop}}
";

#[tokio::test]
async fn strong_weak_and_conditional_semantics() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(DEPS).await;
    let run_id = dev.trigger("deps", json!({"force": false})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(status_of(&run, "root"), "FAILED");
    assert_eq!(status_of(&run, "strong_child"), "SKIPPED");
    assert_eq!(run["nodes"]["strong_child"]["reason"], "upstream_failed");
    assert_eq!(run["nodes"]["grandchild"]["reason"], "upstream_skipped");
    assert_eq!(status_of(&run, "weak_child"), "SUCCESS");
    assert_eq!(status_of(&run, "cond"), "SKIPPED");
    assert_eq!(run["nodes"]["cond"]["reason"], "condition_false");
    assert_eq!(run["status"], "FAILED", "root fails the run: it has strong downstream");

    let forced = dev.trigger("deps", json!({"force": true})).await;
    let run = dev.finished(&forced).await;
    assert_eq!(status_of(&run, "cond"), "SUCCESS", "params.force makes the condition true");
}

#[tokio::test]
async fn only_weak_failures_still_succeed() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: weakonly
nodes:
  flaky: {run: {builtin: fail, message: nope}}
  after: {needs: [{node: flaky, kind: weak}], run: {builtin: noop}}
",
    )
    .await;
    let run_id = dev.trigger("weakonly", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(status_of(&run, "flaky"), "FAILED");
    assert_eq!(run["status"], "SUCCESS");
}

#[tokio::test]
async fn retries_are_counted_and_delays_stay_within_bounds() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: retries
defaults:
  retry: {attempts: 4, backoff: 200ms, factor: 2, max_backoff: 300ms, jitter: 100ms}
nodes:
  flaky: {run: {builtin: fail, message: 'try again', times: 3}}
",
    )
    .await;
    let run_id = dev.trigger("retries", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS");
    let node = &run["nodes"]["flaky"];
    assert_eq!(node["attempts"], 4);
    let history = node["attempt_history"].as_array().expect("history");
    assert_eq!(history.len(), 4);
    let time = |v: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().expect("time")).expect("rfc3339").timestamp_millis()
    };
    // delay before retry n = min(200ms * 2^(n-1), 300ms) + [0, 100ms)
    let bounds = [(200, 300), (300, 400), (300, 400)];
    for (i, (lo, hi)) in bounds.iter().enumerate() {
        let gap = time(&history[i + 1]["started_at"]) - time(&history[i]["finished_at"]);
        assert!(gap >= *lo && gap <= hi + 150, "retry {} waited {gap} ms, expected {lo}..{hi} ms", i + 1);
    }
}
