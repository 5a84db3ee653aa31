//! A planned control-plane restart costs nothing (SPEC §4.1, "Shutdown"): SIGTERM
//! to `madeira dev` while a real `madeira sidecar` runs 20 jobs of 3 s cancels none
//! of them; the sidecar spools the results, reconnects to the restarted control
//! plane and delivers them; every node ends SUCCESS, each job ran once and is
//! recorded as one attempt (the adopted attempt keeps its number), and no alert is
//! raised.

use std::path::Path;

use serde_json::json;

use crate::sidecar::{SidecarProc, wait_for, wait_sidecars};
use crate::support::{Dev, status_of};

const N: usize = 20;

/// The sidecar `jobs:` section running `work_script` (written into `dir`).
fn work_jobs(dir: &Path) -> String {
    let script = dir.join("work.sh");
    std::fs::write(&script, work_script(dir)).expect("script");
    format!("jobs:\n  work:\n    command: [\"/bin/sh\", \"{}\"]\n", script.display())
}

/// A job that notes its start, works 3 s, notes its end and outputs its node.
fn work_script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "#!/bin/sh\necho \"$MADEIRA_NODE\" >> {d}/started\nsleep 3\necho \"$MADEIRA_NODE\" >> {d}/ran\nprintf '{{\"node\": \"%s\"}}' \"$MADEIRA_NODE\" > \"$MADEIRA_OUTPUT_FILE\"\n"
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

pub fn free_grpc() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    format!("127.0.0.1:{port}")
}

#[tokio::test]
async fn sigterm_to_the_control_plane_fails_no_sidecar_job_and_raises_no_alert() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let grpc = free_grpc();
    let mut dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let jobs = work_jobs(dir.path());
    let mut sidecar = SidecarProc::start(dir.path(), "s-deploy", &grpc, &jobs);
    wait_sidecars(&dev, "billing", 1).await;
    let nodes: String =
        (0..N).map(|i| format!("  n{i}: {{run: {{sidecar: {{group: billing, job: work}}}}}}\n")).collect();
    dev.put_flow(&format!("flow: deploy\nnodes:\n{nodes}")).await;
    let run_id = dev.trigger("deploy", json!({})).await;
    let started = dir.path().join("started");
    wait_for("every job to start", 20, || lines(&started).len() == N).await;

    let status = crate::support::sigterm_and_wait(&mut dev.child, 15).await;
    assert!(status.success(), "a graceful stop exits 0: {status:?}");
    assert!(sidecar.child.try_wait().expect("sidecar").is_none(), "the sidecar keeps running");
    assert!(lines(&dir.path().join("ran")).len() < N, "the jobs were still running at the SIGTERM");

    let dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let run = dev.wait_run(&run_id, 60, |r| r["status"] != "RUNNING").await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    for i in 0..N {
        let node = format!("n{i}");
        assert_eq!(status_of(&run, &node), "SUCCESS", "{run}");
        assert_eq!(run["nodes"][&node]["outputs"]["node"], node.as_str(), "{run}");
        assert_eq!(run["nodes"][&node]["data_version"], 1, "applied once: {run}");
        let history = run["nodes"][&node]["attempt_history"].as_array().cloned().unwrap_or_default();
        let failed: Vec<_> =
            history.iter().filter(|a| a["outcome"].is_string() && a["outcome"] != "SUCCESS").collect();
        assert!(failed.is_empty(), "no attempt of {node} failed: {history:?}");
        // The adopted attempt keeps its number: one attempt, finished, no phantom.
        let recorded: Vec<_> =
            history.iter().map(|a| (a["attempt"].as_u64(), a["outcome"].as_str())).collect();
        assert_eq!(recorded, [(Some(1), Some("SUCCESS"))], "{node}: {history:?}");
        assert!(history[0]["finished_at"].is_string(), "{node}: {history:?}");
        assert_eq!(run["nodes"][&node]["attempts"], 1, "{run}");
    }
    let mut ran = lines(&dir.path().join("ran"));
    ran.sort();
    ran.dedup();
    assert_eq!((lines(&started).len(), ran.len()), (N, N), "each job started and ran exactly once");
    let (_, alerts) = dev.get("/alerts").await;
    assert_eq!(
        alerts["alerts"].as_array().map(Vec::len),
        Some(0),
        "no alert for a planned restart: {alerts}"
    );
    wait_for("the sidecar's spool to empty", 10, || {
        madeira_sidecar::spool::pending_on_disk(&dir.path().join("s-deploy-spool").join("reports")) == 0
    })
    .await;
    sidecar.signal(libc::SIGTERM);
}

#[tokio::test]
async fn an_in_process_attempt_finishes_within_shutdown_grace_and_is_not_run_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut dev = Dev::start_with(&data, &[]);
    dev.put_flow("flow: drain\nnodes:\n  s: {run: {builtin: sleep, for: 2s}}\n  after: {needs: [s], run: {builtin: noop}}\n").await;
    let run_id = dev.trigger("drain", json!({})).await;
    dev.wait_run(&run_id, 10, |r| status_of(r, "s") == "RUNNING").await;
    let status = crate::support::sigterm_and_wait(&mut dev.child, 15).await;
    assert!(status.success(), "{status:?}");
    let dev = Dev::start_with(&data, &[]);
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["s"]["attempts"], 1, "the sleep finished during the drain, not again: {run}");
    assert_eq!(run["nodes"]["s"]["attempt_history"][0]["outcome"], "SUCCESS", "{run}");
}

#[tokio::test]
async fn after_a_restart_an_attempt_is_not_run_again_on_another_sidecar_of_the_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let grpc = free_grpc();
    let mut dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let jobs = work_jobs(dir.path());
    let _a = SidecarProc::start(dir.path(), "s-one", &grpc, &jobs);
    let _b = SidecarProc::start(dir.path(), "s-two", &grpc, &jobs);
    wait_sidecars(&dev, "billing", 2).await;
    let nodes: String =
        (0..4).map(|i| format!("  n{i}: {{run: {{sidecar: {{group: billing, job: work}}}}}}\n")).collect();
    dev.put_flow(&format!("flow: pair\nnodes:\n{nodes}")).await;
    let run_id = dev.trigger("pair", json!({})).await;
    let started = dir.path().join("started");
    wait_for("every job to start", 20, || lines(&started).len() == 4).await;
    crate::support::sigterm_and_wait(&mut dev.child, 15).await;

    let dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let run = dev.wait_run(&run_id, 60, |r| r["status"] != "RUNNING").await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(lines(&started).len(), 4, "no attempt started again on the other sidecar");
    assert_eq!(lines(&dir.path().join("ran")).len(), 4, "each job ran once");
}
