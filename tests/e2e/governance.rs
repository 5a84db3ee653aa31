//! Governance on the real binary: throttling with a bounded queue (also across a
//! kill -9), confirmation escalation and fallback, stale data after a rerun,
//! canary routing and version history.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{BIN, Dev, max_overlap, status_of, wait_until};

const GATE: &str = "flow: gate
nodes:
  work:
    throttle: {max_permits: 2, queue_size: 3}
    run: {builtin: sleep, for: 400ms}
";

/// Waits until all `runs` finished, checking the live throttle view on the way,
/// then returns the most attempts of `node` that overlapped in time (from the
/// attempts' recorded start and finish instants).
async fn watch_permits(dev: &Dev, runs: &[String], node: &str, max: u64) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut intervals = Vec::new();
    for id in runs {
        let what = format!("run {id} to finish");
        let run = wait_until(deadline.saturating_duration_since(Instant::now()), &what, async || {
            let (_, run) = dev.get(&format!("/runs/{id}")).await;
            if let Some(t) = run["nodes"][node].get("throttle") {
                assert!(t["permits_in_use"].as_u64().unwrap_or(0) <= max, "{t}");
            }
            if run["status"] == "SUCCESS" { Ok(run) } else { Err(run.to_string()) }
        })
        .await;
        for a in run["nodes"][node]["attempt_history"].as_array().into_iter().flatten() {
            let ms = |v: &serde_json::Value| {
                chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or("")).map(|t| t.timestamp_millis())
            };
            if let (Ok(start), Ok(end)) = (ms(&a["started_at"]), ms(&a["finished_at"])) {
                intervals.push((start, end));
            }
        }
    }
    max_overlap(&intervals)
}

#[tokio::test]
async fn throttle_caps_permits_queues_in_order_and_refuses_overflow() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(GATE).await;
    let mut runs = Vec::new();
    for _ in 0..5 {
        runs.push(dev.trigger("gate", json!({})).await);
    }
    let (status, body) = dev.post("/flows/gate/runs", json!({}), &[]).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "queue_full");
    assert_eq!(body["error"]["details"]["node"], "work");
    let (_, last) = dev.get(&format!("/runs/{}", runs[4])).await;
    let throttle = &last["nodes"]["work"]["throttle"];
    assert_eq!((throttle["max_permits"].as_u64(), throttle["queue_size"].as_u64()), (Some(2), Some(3)));
    assert_eq!(watch_permits(&dev, &runs, "work", 2).await, 2, "two permits, both used");
    let (_, first) = dev.get(&format!("/runs/{}", runs[0])).await;
    let (_, fifth) = dev.get(&format!("/runs/{}", runs[4])).await;
    assert!(first["nodes"]["work"]["started_at"].as_str() < fifth["nodes"]["work"]["started_at"].as_str());
}

#[tokio::test]
async fn permits_held_at_kill_9_are_given_back_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = Dev::start_in(dir.path());
    dev.put_flow(GATE).await;
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(dev.trigger("gate", json!({})).await);
    }
    dev.wait_run(&runs[0], 10, |r| status_of(r, "work") == "RUNNING").await;
    dev.kill9();
    let dev = Dev::start_in(dir.path());
    assert!(watch_permits(&dev, &runs, "work", 2).await <= 2);
}

#[tokio::test]
async fn unanswered_confirmation_escalates_then_falls_back() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: approve
nodes:
  report: {run: {builtin: noop, outputs: {diff: 7}}}
  sign_off:
    needs: [report]
    manual:
      prompt: 'diff is {{ nodes.report.outputs.diff }}'
      alert_after: 1s
      fallback_after: 2s
      fallback: {builtin: noop, outputs: {drafted: true}}
",
    )
    .await;
    let run_id = dev.trigger("approve", json!({})).await;
    let waiting = dev.wait_run(&run_id, 10, |r| status_of(r, "sign_off") == "MANUAL_CONFIRM").await;
    assert_eq!(waiting["nodes"]["sign_off"]["prompt"], "diff is 7");
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS");
    assert_eq!(run["nodes"]["sign_off"]["outputs"]["drafted"], true);
    let (_, audit) = dev.get(&format!("/audit?run_id={run_id}")).await;
    let actions: Vec<&str> =
        audit["entries"].as_array().expect("entries").iter().filter_map(|e| e["action"].as_str()).collect();
    assert_eq!(actions, ["fallback", "confirm_overdue"], "newest first");
}

#[tokio::test]
async fn rerun_marks_readers_stale_and_downstream_rerun_refreshes_them() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: ctx
nodes:
  src: {run: {builtin: noop, outputs: {rows: 10}}}
  use_it: {needs: [src], run: {builtin: noop}}
",
    )
    .await;
    let run_id = dev.trigger("ctx", json!({})).await;
    dev.finished(&run_id).await;
    let (status, _) =
        dev.post(&format!("/runs/{run_id}/nodes/src/rerun"), json!({"reason": "late data"}), &[]).await;
    assert_eq!(status, 200);
    let run = dev
        .wait_run(&run_id, 10, |r| r["nodes"]["src"]["data_version"] == 2 && r["status"] == "SUCCESS")
        .await;
    assert_eq!(run["nodes"]["use_it"]["stale"], true, "use_it read version 1");
    let (status, _) = dev
        .post(
            &format!("/runs/{run_id}/nodes/src/rerun"),
            json!({"downstream": true, "reason": "refresh"}),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let run = dev
        .wait_run(&run_id, 10, |r| r["nodes"]["use_it"]["data_version"] == 2 && r["status"] == "SUCCESS")
        .await;
    assert_eq!(run["nodes"]["use_it"]["stale"], false);
    assert_eq!(run["nodes"]["src"]["data_version"], 3);
}

#[tokio::test]
async fn canary_routing_and_version_history() {
    let (dir, dev) = Dev::start();
    let v1 = "flow: canary\nnodes:\n  a: {run: {builtin: noop, outputs: {v: 1}}}\n";
    let v2 = "flow: canary
routing: {default: 1, rules: [{when: \"params.tenant in ['t1', 't2']\", version: 2}]}
nodes:
  a: {run: {builtin: noop, outputs: {v: 2}}}
";
    assert_eq!(dev.put_flow(v1).await["version"], 1);
    assert_eq!(dev.put_flow(v1).await["created"], false, "same content, same version");
    assert_eq!(dev.put_flow(v2).await["version"], 2);
    for (tenant, version) in [("t1", 2), ("t2", 2), ("t3", 1)] {
        let (status, body) = dev.post("/flows/canary/runs", json!({"params": {"tenant": tenant}}), &[]).await;
        assert_eq!((status, body["version"].as_u64()), (201, Some(version)), "{tenant}: {body}");
        let run = dev.finished(body["run_id"].as_str().expect("id")).await;
        assert_eq!(run["nodes"]["a"]["outputs"]["v"], version);
    }
    let out = Command::new(BIN)
        .args(["flows", "history", "canary", "--diff", "1", "2"])
        .env("MADEIRA_SERVER", &dev.base)
        .output()
        .expect("run");
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(
        diff.contains("+routing:") && diff.contains("-  a: {run: {builtin: noop, outputs: {v: 1}}}"),
        "{diff}"
    );
    drop(dir);
}
