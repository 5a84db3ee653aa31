//! Nothing dropped silently (issue 19 item 4): a routing rule that cannot be
//! evaluated sends the run to `default` with a warning on the run, for a cron
//! tick as for a manual trigger; a cron tick that cannot create its run raises
//! an alert and is audited.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Dev, wait_until};

/// Polls `GET path` until `found` picks something out of the answer, or panics after `secs`.
async fn poll<T>(dev: &Dev, path: &str, secs: u64, found: impl Fn(&Value) -> Option<T>) -> T {
    let what = format!("the condition on {path}");
    wait_until(Duration::from_secs(secs), &what, async || {
        let (_, body) = dev.get(path).await;
        found(&body).ok_or_else(|| body.to_string())
    })
    .await
}

#[tokio::test]
async fn a_cron_tick_on_a_canary_flow_missing_the_param_runs_on_the_default_version() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: canary-cron\nnodes:\n  a: {run: {builtin: noop, outputs: {v: 1}}}\n").await;
    dev.put_flow(
        "flow: canary-cron
triggers:
  - cron: \"* * * * * *\"
routing: {default: 1, rules: [{when: \"params.region == 'eu'\", version: 2}]}
nodes:
  a: {run: {builtin: noop, outputs: {v: 2}}}
",
    )
    .await;
    let run_id = poll(&dev, "/runs?flow=canary-cron", 10, |b| {
        b["runs"].as_array()?.iter().find(|r| r["trigger"] == "cron")?["run_id"].as_str().map(str::to_string)
    })
    .await;
    let run = dev.finished(&run_id).await;
    assert_eq!((run["status"].as_str(), run["version"].as_u64()), (Some("SUCCESS"), Some(1)), "{run}");
    assert_eq!(run["nodes"]["a"]["outputs"]["v"], 1);
    let warning = run["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.starts_with("routing rule 1 (to version 2) could not be evaluated:")
            && warning.ends_with("the run went to the default version 1"),
        "{run}"
    );

    let (status, body) = dev.post("/flows/canary-cron/runs", json!({"params": {}}), &[]).await;
    assert_eq!((status, body["version"].as_u64()), (201, Some(1)), "no more 422: {body}");
    let (status, body) = dev.post("/flows/canary-cron/runs", json!({"params": {"region": "eu"}}), &[]).await;
    assert_eq!((status, body["version"].as_u64()), (201, Some(2)), "{body}");
    let (_, run) = dev.get(&format!("/runs/{}", body["run_id"].as_str().expect("id"))).await;
    assert_eq!(run["warnings"], json!([]), "a rule that evaluates leaves no warning");
}

#[tokio::test]
async fn a_cron_tick_that_cannot_create_its_run_raises_an_alert() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: crowded
triggers:
  - cron: \"* * * * * *\"
nodes:
  hold: {run: {builtin: sleep, for: 30s}, throttle: {max_permits: 1, queue_size: 0}}
",
    )
    .await;
    let alert = poll(&dev, "/alerts", 15, |b| {
        b["alerts"].as_array()?.iter().find(|a| a["alertname"] == "MadeiraCronRunNotCreated").cloned()
    })
    .await;
    assert_eq!(alert["severity"], "critical", "{alert}");
    assert_eq!(alert["flow"], "crowded", "{alert}");
    let summary = alert["summary"].as_str().unwrap_or_default();
    assert!(
        summary.starts_with("flow crowded: the cron tick at ") && summary.contains("made no run"),
        "{alert}"
    );
    let (_, audit) = dev.get("/audit?limit=100").await;
    let entry =
        audit["entries"].as_array().expect("entries").iter().find(|e| e["action"] == "cron_run_not_created");
    assert!(entry.is_some_and(|e| e["details"]["flow"] == "crowded"), "{audit}");
}
