//! Stalls and slow nodes raise warnings (issue 19 item 3), end to end: a node
//! waiting in INIT for a sidecar group with no live sidecar past its
//! `stall_after` raises `MadeiraNodeStalled` and sets `madeira_nodes_stalled`;
//! once a sidecar of the group attaches and the node runs, the warning resolves
//! and the gauge drops. A node RUNNING past its `warn_after` raises
//! `MadeiraNodeSlow` (and `madeira_nodes_slow`), is not stopped, and the warning
//! resolves when it ends.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::sidecar::SidecarProc;
use crate::support::{Dev, wait_until};
use crate::webhook::Webhook;

/// The value of the sample `series` (name with labels) on `/metrics`, if any.
async fn sample(dev: &Dev, series: &str) -> Option<f64> {
    let text = dev.http.get(format!("{}/metrics", dev.base)).send().await.ok()?.text().await.ok()?;
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
}

async fn wait_sample(dev: &Dev, series: &str, want: f64) {
    let what = format!("{series} to become {want}");
    wait_until(Duration::from_secs(20), &what, async || {
        let seen = sample(dev, series).await;
        if seen == Some(want) { Ok(()) } else { Err(format!("{seen:?}")) }
    })
    .await
}

fn only(alerts: &[Value]) -> &Value {
    assert_eq!(crate::webhook::distinct(alerts), 1, "one alert: {alerts:?}");
    &alerts[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_waiting_for_a_missing_sidecar_raises_a_stall_warning_that_resolves_when_it_runs() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "200ms");
    dev.put_flow(
        "flow: stall
labels: {team: billing}
nodes:
  export: {run: {sidecar: {group: billing, job: export}}, stall_after: 1s}
",
    )
    .await;
    let started = Instant::now();
    let run_id = dev.trigger("stall", json!({})).await;
    let series = "madeira_nodes_stalled{flow=\"stall\",node=\"export\"}";
    let firing = hook.wait_alerts("firing", |a| a["alertname"] == "MadeiraNodeStalled").await;
    assert!(started.elapsed() >= Duration::from_secs(1), "not before stall_after");
    let alert = only(&firing);
    assert_eq!(alert["severity"], "warning");
    assert_eq!((alert["flow"].clone(), alert["node"].clone()), (json!("stall"), json!("export")));
    assert_eq!(alert["runs"], json!([run_id]));
    assert_eq!(alert["labels"], json!({"team": "billing"}));
    let summary = alert["summary"].as_str().unwrap_or_default();
    assert!(
        summary.starts_with("flow stall: node export has waited in INIT for its executor for more than 1s: "),
        "{summary}"
    );
    assert!(summary.contains("billing"), "the reason names the group: {summary}");
    wait_sample(&dev, series, 1.0).await;
    let (_, run) = dev.get(&format!("/runs/{run_id}")).await;
    assert_eq!(run["nodes"]["export"]["status"], "INIT", "a stall stops nothing: {run}");

    // A sidecar of the group attaches: the node runs, the warning resolves.
    let _sidecar = SidecarProc::start(
        dir.path(),
        "billing-01",
        &dev.grpc,
        "jobs:\n  export:\n    command: [\"/bin/sh\", \"-c\", \"true\"]\n",
    );
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    let resolved = hook.wait_alerts("resolved", |a| a["alertname"] == "MadeiraNodeStalled").await;
    assert_eq!(only(&resolved)["id"], alert["id"]);
    assert_eq!(only(&resolved)["status"], "resolved");
    wait_sample(&dev, series, 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_running_past_warn_after_raises_a_slow_warning_and_is_not_stopped() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "200ms");
    dev.put_flow(
        "flow: slow
nodes:
  crunch: {run: {builtin: sleep, for: 4s}, warn_after: 1s}
  quick: {run: {builtin: noop}, warn_after: 1s}
",
    )
    .await;
    let run_id = dev.trigger("slow", json!({})).await;
    let series = "madeira_nodes_slow{flow=\"slow\",node=\"crunch\"}";
    let firing = hook.wait_alerts("firing", |a| a["alertname"] == "MadeiraNodeSlow").await;
    let alert = only(&firing);
    assert_eq!((alert["severity"].clone(), alert["node"].clone()), (json!("warning"), json!("crunch")));
    assert_eq!(
        alert["summary"],
        "flow slow: node crunch has been RUNNING for more than 1s (its warn_after); it is not stopped"
    );
    wait_sample(&dev, series, 1.0).await;
    let (_, run) = dev.get(&format!("/runs/{run_id}")).await;
    assert_eq!(run["nodes"]["crunch"]["status"], "RUNNING", "{run}");
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "not stopped: {run}");
    let resolved = hook.wait_alerts("resolved", |a| a["alertname"] == "MadeiraNodeSlow").await;
    assert_eq!(only(&resolved)["id"], alert["id"]);
    wait_sample(&dev, series, 0.0).await;
    assert_eq!(
        crate::webhook::distinct(&hook.alerts("firing", |a| a["alertname"] == "MadeiraNodeSlow")),
        1,
        "the quick node raised nothing"
    );
}
