//! API contract: idempotency keys, on_overlap, node actions and their refusals,
//! error shapes, body limits.

use serde_json::{Value, json};

use crate::support::{Dev, audit_entries, status_of};

#[tokio::test]
async fn same_idempotency_key_returns_the_same_run_with_200() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: idem\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let key = [("Idempotency-Key", "settle-2026-11-30")];
    let (first, a) = dev.post("/flows/idem/runs", json!({"params": {}}), &key).await;
    let (second, b) = dev.post("/flows/idem/runs", json!({"params": {}}), &key).await;
    assert_eq!((first, second), (201, 200));
    assert_eq!(a["run_id"], b["run_id"]);
    assert_eq!(b, json!({"run_id": a["run_id"], "flow": "idem", "version": 1}));
    let (_, runs) = dev.get("/runs?flow=idem").await;
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn on_overlap_skip_refuses_and_queue_waits() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: skipper
concurrency: {max_active_runs: 1, on_overlap: skip}
nodes:
  wait: {run: {builtin: sleep, for: 2s}}
",
    )
    .await;
    let first = dev.trigger("skipper", json!({})).await;
    let (status, body) = dev.post("/flows/skipper/runs", json!({}), &[]).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "overlap_skipped");
    dev.finished(&first).await;

    dev.put_flow(
        "flow: queuer
concurrency: {max_active_runs: 1, on_overlap: queue}
nodes:
  wait: {run: {builtin: sleep, for: 300ms}}
",
    )
    .await;
    let a = dev.trigger("queuer", json!({})).await;
    let b = dev.trigger("queuer", json!({})).await;
    let (_, b_run) = dev.get(&format!("/runs/{b}")).await;
    assert_eq!(b_run["status"], "QUEUED");
    let a_run = dev.finished(&a).await;
    let b_run = dev.finished(&b).await;
    assert_eq!((a_run["status"].as_str(), b_run["status"].as_str()), (Some("SUCCESS"), Some("SUCCESS")));
    let time = |v: &Value| chrono::DateTime::parse_from_rfc3339(v.as_str().expect("time")).expect("rfc3339");
    assert!(
        time(&b_run["started_at"]) >= time(&a_run["finished_at"]),
        "queued run started before the first ended"
    );
}

#[tokio::test]
async fn manual_confirm_mark_success_and_refusals_are_audited() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: ops
nodes:
  broken: {run: {builtin: fail, message: disk full}}
  after: {needs: [broken], run: {builtin: noop, outputs: {diff: 3}}}
  approve:
    needs: [after]
    manual: {prompt: 'diff is {{ nodes.after.outputs.diff }}'}
",
    )
    .await;
    let run_id = dev.trigger("ops", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "FAILED");
    assert_eq!(status_of(&run, "after"), "SKIPPED");

    let (status, body) =
        dev.post(&format!("/runs/{run_id}/nodes/approve/confirm"), json!({"reason": "too early"}), &[]).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["details"]["state"], "SKIPPED");
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("SKIPPED"));

    let (status, _) = dev
        .post(&format!("/runs/{run_id}/nodes/broken/mark-success"), json!({"reason": "fixed by hand"}), &[])
        .await;
    assert_eq!(status, 200);
    let run = dev.wait_run(&run_id, 20, |r| r["nodes"]["approve"]["status"] == "MANUAL_CONFIRM").await;
    assert_eq!(run["status"], "RUNNING");
    assert_eq!(run["nodes"]["approve"]["prompt"], "diff is 3");
    let (status, _) = dev
        .post(&format!("/runs/{run_id}/nodes/approve/confirm"), json!({"reason": "numbers ok"}), &[])
        .await;
    assert_eq!(status, 200);
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS");

    let (_, audit) = dev.get(&format!("/audit?run_id={run_id}")).await;
    let actions = audit_entries(&audit);
    assert_eq!(actions, [("confirm", "local", "numbers ok"), ("mark_success", "local", "fixed by hand")]);
}

#[tokio::test]
async fn errors_have_the_contract_shape() {
    let (_dir, dev) = Dev::start();
    let (status, body) = dev.get("/runs/nope").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "not_found");
    let (status, body) = dev.post("/flows/missing/runs", json!({}), &[]).await;
    assert_eq!(status, 404, "{body}");

    let resp = dev
        .http
        .put(dev.url("/flows/bad"))
        .body("flow: bad\nnodes:\n  a: {nedds: [b], run: {builtin: noop}}\n")
        .send()
        .await
        .expect("put");
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.expect("json");
    let errors = body["error"]["details"]["errors"].as_array().expect("errors");
    assert!(errors[0].as_str().unwrap_or("").contains("did you mean `needs`"), "{body}");
    let (status, _) = dev.get("/flows/bad").await;
    assert_eq!(status, 404, "an invalid flow is never stored");

    let huge = "x".repeat(2 * 1024 * 1024);
    // A client of its own: the server answers 413 without reading the body and
    // closes that connection.
    let resp = reqwest::Client::new().put(dev.url("/flows/huge")).body(huge).send().await.expect("put");
    assert_eq!(resp.status().as_u16(), 413);

    dev.put_flow("flow: ok\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let (status, body) = dev.post("/flows/ok/runs", json!({"params": [1, 2]}), &[]).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("params"));
    let run_id = dev.trigger("ok", json!({})).await;
    dev.finished(&run_id).await;
    let (status, _) =
        dev.post(&format!("/runs/{run_id}/nodes/ghost/rerun"), json!({"reason": "why not"}), &[]).await;
    assert_eq!(status, 404);
    let (status, _) = dev.get(&format!("/runs/{run_id}/nodes/ghost/logs")).await;
    assert_eq!(status, 404);
    let (status, logs) = dev.get(&format!("/runs/{run_id}/nodes/a/logs")).await;
    assert_eq!(status, 200);
    // noop prints nothing: no log row is stored, and the attempt answers empty.
    assert_eq!(logs["logs"], json!([{"attempt": 1, "content": ""}]), "{logs}");
}

#[tokio::test]
async fn arbitrary_json_bodies_get_clean_errors() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: fuzz\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let bodies = [
        json!(null),
        json!(1),
        json!("params"),
        json!({"params": "x"}),
        json!({"params": {"a": {"deep": [1, {"b": null}]}}, "extra": 1}),
        json!({"version": -1}),
        json!({"version": 99}),
        json!([{"params": {}}]),
    ];
    for body in bodies {
        let (status, reply) = dev.post("/flows/fuzz/runs", body.clone(), &[]).await;
        assert!(matches!(status, 201 | 400 | 404), "body {body} got {status}: {reply}");
        if status != 201 {
            assert!(reply["error"]["message"].is_string(), "body {body}: {reply}");
        }
    }
    let (status, flow) = dev.get("/flows/fuzz").await;
    assert_eq!((status, flow["flow"].as_str()), (200, Some("fuzz")), "server still answers");
}
