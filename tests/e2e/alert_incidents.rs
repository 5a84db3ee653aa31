//! A failed run is one incident (issue 33 item 8), end to end against a real
//! local webhook receiver: a run fails at `pull` (the alert names `book` as
//! skipped because of it); `mark-success pull` lets the run go on, and `book`
//! fails — the same alert gets one `update` saying the root cause moved, not a
//! second critical page; `mark-success book` ends the run SUCCESS and sends
//! exactly one `resolved`, for that one alert.

use std::time::Duration;

use serde_json::json;

use crate::support::{Dev, hold_for};
use crate::webhook::{Webhook, kinds};

const FLOW: &str = "flow: halves
defaults:
  retry: {attempts: 1}
nodes:
  pull: {run: {builtin: fail, message: 'ledger down'}}
  book: {needs: [pull], run: {builtin: fail, message: 'balance mismatch'}}
";

async fn mark_success(dev: &Dev, run_id: &str, node: &str) {
    let path = format!("/runs/{run_id}/nodes/{node}/mark-success");
    let (status, body) = dev.post(&path, json!({"reason": "fixed by hand"}), &[]).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixing_half_an_incident_updates_its_alert_and_the_fix_resolves_it_once() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "300ms");
    dev.put_flow(FLOW).await;
    let run_id = dev.trigger("halves", json!({})).await;
    assert_eq!(dev.finished(&run_id).await["status"], "FAILED");
    let fired = hook.bodies_within(1, 20).await;
    assert_eq!(kinds(&fired), ["firing"]);
    let id = fired[0]["alerts"][0]["id"].clone();
    assert_eq!(fired[0]["alerts"][0]["causes"][0]["skipped"], json!(["book"]), "{}", fired[0]);

    mark_success(&dev, &run_id, "pull").await;
    let run = dev
        .wait_run(&run_id, 20, |r| r["status"] == "FAILED" && r["nodes"]["book"]["status"] == "FAILED")
        .await;
    assert_eq!(run["nodes"]["pull"]["status"], "SUCCESS", "{run}");
    hook.bodies_within(2, 20).await;
    // Past group_wait: a second alert would have fired by now.
    hold_for(Duration::from_secs(2), "no second page", async || {
        kinds(&hook.bodies()) == ["firing", "update"]
    })
    .await;
    let all = hook.bodies();
    let update = &all[1];
    assert_eq!(update["alerts"][0]["id"], id, "the same alert");
    assert_eq!(update["alerts"][0]["causes"][0]["node"], "book", "{update}");
    let text = update["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(&format!(
            "**Update:** root cause moved in run {run_id}: node `pull` no longer fails; node `book` (skipped before because of `pull`) failed\n"
        )),
        "{text}"
    );

    mark_success(&dev, &run_id, "book").await;
    assert_eq!(dev.finished(&run_id).await["status"], "SUCCESS");
    hook.bodies_within(3, 20).await;
    // Long enough for a second resolved (a second alert's) to arrive too.
    hold_for(Duration::from_secs(2), "exactly one resolved", async || {
        kinds(&hook.bodies()) == ["firing", "update", "resolved"]
    })
    .await;
    let all = hook.bodies();
    assert_eq!(all[2]["alerts"][0]["id"], id);
}
