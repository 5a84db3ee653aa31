//! Alerts that grow are announced again (issue 19 item 1), end to end against a
//! real local webhook receiver: one failed run fires; three more failures of the
//! same root cause give one `update` `group_interval` after the first message
//! with the new count and the newest run (exact payload); with nothing new, a
//! `reminder` follows `repeat_interval` after it. A manual node's `fallback:
//! {…, then: skip}` ends the node SKIPPED (item 2).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::Dev;
use crate::webhook::{Webhook, kinds};

const FLOW: &str = "flow: grow
defaults:
  retry: {attempts: 1}
nodes:
  pull: {run: {builtin: fail, message: 'ledger down'}}
  book: {needs: [pull], run: {builtin: noop}}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_alert_sends_one_update_with_the_new_count_then_a_reminder() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("madeira.yaml");
    let text = format!(
        "alerts:\n  group_wait: 300ms\n  group_interval: 4s\n  repeat_interval: 6s\n  external_url: http://madeira.test\n  channels:\n    - {{name: hook, type: webhook, url: '{}'}}\n",
        hook.url
    );
    std::fs::write(&config, text).expect("write config");
    let config = config.to_string_lossy().to_string();
    let dev = Dev::start_with(&dir.path().join("data"), &["--config", &config]);
    dev.put_flow(FLOW).await;
    let first = dev.trigger("grow", json!({})).await;
    dev.finished(&first).await;
    let fired = hook.bodies_within(1, 20).await;
    let fired_at = Instant::now();
    assert_eq!(kinds(&fired), ["firing"]);
    let mut runs = vec![first];
    for _ in 0..3 {
        let run = dev.trigger("grow", json!({})).await;
        dev.finished(&run).await;
        runs.push(run);
    }
    let all = hook.bodies_within(2, 20).await;
    assert!(fired_at.elapsed() >= Duration::from_secs(3), "not before group_interval: {all:?}");
    assert_eq!(kinds(&all), ["firing", "update"], "one update for three failures");
    let update = &all[1];
    let alert = &update["alerts"][0];
    let newest = runs.last().expect("run");
    let created = alert["created_at"].as_str().expect("created_at");
    let text = format!(
        "## [critical · update] MadeiraRunFailed · flow grow
**Update:** 4 failed runs now, 3 new since the last message (firing since {created})
**Root cause:** node `pull` failed after 1 attempt
**Error:** ledger down
**Skipped because of it:** book (1)
**Grouped:** 4 runs failed the same way
[Run {newest}](http://madeira.test/runs/{newest})
`madeira rerun {newest} pull --reason \"…\"`
`madeira mark-success {newest} pull --reason \"…\"`
`madeira runs --flow grow --status FAILED`
"
    );
    assert_eq!(update["title"], "[critical · update] MadeiraRunFailed · flow grow");
    assert_eq!(update["text"], text.as_str(), "{update}");
    assert_eq!(update["version"], "1");
    assert_eq!(alert["id"], fired[0]["alerts"][0]["id"], "the same alert");
    assert_eq!(alert["alertname"], "MadeiraRunFailed");
    assert_eq!(alert["status"], "firing");
    assert_eq!((alert["count"].clone(), alert["added"].clone()), (json!(4), json!(3)));
    assert_eq!(alert["runs"], json!(runs));
    assert_eq!(alert["run_url"], format!("http://madeira.test/runs/{newest}"));
    assert_eq!(
        alert["causes"],
        json!([{"node": "pull", "error": "ledger down", "attempts": 1, "skipped": ["book"]}])
    );

    // Nothing new: the next message is the reminder, repeat_interval after the update.
    let updated_at = Instant::now();
    let all = hook.bodies_within(3, 20).await;
    assert!(updated_at.elapsed() >= Duration::from_secs(4), "not before repeat_interval");
    assert_eq!(kinds(&all), ["firing", "update", "reminder"]);
    assert_eq!(all[2]["title"], "[critical · reminder] MadeiraRunFailed · flow grow");
    let reminder = all[2]["text"].as_str().unwrap_or_default();
    assert!(reminder.contains("**Reminder:** still unresolved: 4 failed runs, firing since"), "{reminder}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_declared_then_skip_ends_the_node_skipped() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: sign-off-skip
nodes:
  approve:
    manual:
      prompt: 'approve?'
      fallback_after: 1s
      fallback: {builtin: noop, outputs: {drafted: true}, then: skip}
  book: {needs: [approve], run: {builtin: noop}}
  notify: {needs: [{node: approve, kind: weak}], run: {builtin: noop}}
",
    )
    .await;
    let run_id = dev.trigger("sign-off-skip", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["approve"]["status"], "SKIPPED", "{run}");
    assert_eq!(run["nodes"]["approve"]["reason"], "fallback_skip", "{run}");
    assert_eq!(run["nodes"]["book"]["reason"], "upstream_skipped", "{run}");
    assert_eq!(run["nodes"]["notify"]["status"], "SUCCESS", "{run}");
    let (_, transitions) = dev.get(&format!("/runs/{run_id}/transitions")).await;
    let causes: Vec<&str> = transitions["transitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["node"] == "approve")
        .filter_map(|t| t["cause"].as_str())
        .collect();
    assert_eq!(causes, ["await_confirm", "fallback", "fallback_skip"], "{transitions}");
}
