//! The slim `madeira-sidecar` binary is the same daemon as `madeira sidecar`: it
//! registers with its name and version, runs a declared job as a real process
//! whose output and log reach the run, drains on SIGTERM (exit 0), and refuses a
//! bad config with exit code 64 and a message naming the file.

use std::process::Command;

use serde_json::json;

use crate::fleet_shutdown::free_grpc;
use crate::sidecar::{SidecarProc, wait_sidecars};
use crate::support::{Dev, sigterm_and_wait};

const HELLO: &str = "jobs:\n  hello:\n    command: [\"/bin/sh\", \"-c\", \"echo slim says hello; printf '{\\\"n\\\": 7}' > \\\"$MADEIRA_OUTPUT_FILE\\\"\"]\n";

#[tokio::test]
async fn the_slim_sidecar_runs_declared_jobs_and_drains_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let grpc = free_grpc();
    let dev = Dev::start_with(&dir.path().join("data"), &["--grpc", &grpc]);
    let mut sidecar = SidecarProc::spawn_slim(SidecarProc::config(dir.path(), "s-slim", &grpc, HELLO));
    wait_sidecars(&dev, "billing", 1).await;
    let (_, fleet) = dev.get("/sidecars").await;
    assert_eq!(fleet["sidecars"][0]["name"], "s-slim", "{fleet}");
    assert_eq!(fleet["sidecars"][0]["version"], env!("CARGO_PKG_VERSION"), "{fleet}");

    dev.put_flow("flow: slim\nnodes:\n  a: {run: {sidecar: {group: billing, job: hello}}}\n").await;
    let run_id = dev.trigger("slim", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["a"]["outputs"]["n"], 7, "{run}");
    let (_, logs) = dev.get(&format!("/runs/{run_id}/nodes/a/logs")).await;
    assert!(logs.to_string().contains("slim says hello"), "{logs}");

    let status = sigterm_and_wait(&mut sidecar.child, 15).await;
    assert!(status.success(), "a drained slim sidecar exits 0: {status:?}");
}

#[test]
fn the_slim_sidecar_names_the_file_of_a_bad_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("bad.yaml");
    std::fs::write(&config, "name: x\ncontrol_plane: http://127.0.0.1:1\njobs: {}\n").expect("write");
    let out = Command::new(crate::support::slim_bin()).arg("--config").arg(&config).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains(&*config.to_string_lossy()) && stderr.contains("`group` is not set"), "{stderr}");
    let missing = Command::new(crate::support::slim_bin())
        .args(["--config", "/nonexistent/sidecar.yaml"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("/nonexistent/sidecar.yaml"), "{stderr}");
}
