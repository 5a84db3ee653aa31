//! Shard results survive a control-plane crash: `kill -9` to `madeira dev` after 3
//! of 4 shards succeeded (the fourth still running on a real `madeira sidecar`).
//! The succeeded shards' results were kept in the store as they came and not yet
//! acknowledged (acks follow the node's commit), so the sidecar still holds them
//! too; after the restart the resumed attempt takes the three and adopts the
//! fourth — no shard runs again, and the node's outputs hold all four.
//!
//! And across a failed attempt's retry: the fourth shard fails, the attempt ends
//! RETRYING (every result acknowledged, the spool empty), `kill -9` before the
//! retry is due; after the restart the retry runs only the fourth shard.

use std::path::Path;

use serde_json::json;

use crate::fleet_shutdown::free_grpc;
use crate::sidecar::{SidecarProc, wait_for, wait_sidecars};
use crate::support::{Dev, status_of, wait_until};

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

#[tokio::test]
async fn a_control_plane_kill_9_after_3_of_4_shards_runs_no_succeeded_shard_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let grpc = free_grpc();
    let mut dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let ledger = dir.path().join("ledger");
    let script = dir.path().join("shard.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$MADEIRA_SHARD_INDEX $MADEIRA_ATTEMPT\" >> {}\n\
             if [ \"$MADEIRA_SHARD_INDEX\" = 3 ]; then sleep 4; fi\n\
             printf '{{\"shard\": %s}}' \"$MADEIRA_SHARD_INDEX\" > \"$MADEIRA_OUTPUT_FILE\"\n",
            ledger.display()
        ),
    )
    .expect("script");
    let jobs = format!("jobs:\n  part:\n    command: [\"/bin/sh\", \"{}\"]\n", script.display());
    let _sidecar = SidecarProc::start(dir.path(), "s-shards", &grpc, &jobs);
    wait_sidecars(&dev, "billing", 1).await;
    dev.put_flow("flow: parts\nnodes:\n  p: {run: {sidecar: {group: billing, job: part, shards: 4}}}\n")
        .await;
    let run_id = dev.trigger("parts", json!({})).await;
    let reports = dir.path().join("s-shards-spool").join("reports");
    let spooled = || madeira_sidecar::spool::pending_on_disk(&reports);
    wait_for("four shards started and three results delivered", 20, || {
        lines(&ledger).len() == 4 && spooled() == 3
    })
    .await;

    dev.kill9();
    let dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let run = dev.wait_run(&run_id, 60, |r| r["status"] != "RUNNING").await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(status_of(&run, "p"), "SUCCESS");
    assert_eq!(shard_outputs(&run), [0, 1, 2, 3], "every shard's outputs: {run}");
    let mut ran = lines(&ledger);
    ran.sort();
    assert_eq!(ran, ["0 1", "1 1", "2 1", "3 1"], "no shard ran again");
    wait_for("the acknowledged results to leave the spool", 10, || spooled() == 0).await;
}

/// The `shards` outputs of node `p` of `run`, by index.
fn shard_outputs(run: &serde_json::Value) -> Vec<i64> {
    run["nodes"]["p"]["outputs"]["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["shard"].as_i64())
        .collect()
}

#[tokio::test]
async fn a_retry_after_a_control_plane_kill_9_runs_only_the_shard_that_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let grpc = free_grpc();
    let mut dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let ledger = dir.path().join("ledger");
    let script = dir.path().join("shard.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$MADEIRA_SHARD_INDEX $MADEIRA_ATTEMPT\" >> {}\n\
             if [ \"$MADEIRA_SHARD_INDEX\" = 3 ] && [ \"$MADEIRA_ATTEMPT\" = 1 ]; then echo boom >&2; exit 3; fi\n\
             printf '{{\"shard\": %s}}' \"$MADEIRA_SHARD_INDEX\" > \"$MADEIRA_OUTPUT_FILE\"\n",
            ledger.display()
        ),
    )
    .expect("script");
    let jobs = format!("jobs:\n  part:\n    command: [\"/bin/sh\", \"{}\"]\n", script.display());
    let _sidecar = SidecarProc::start(dir.path(), "s-retry", &grpc, &jobs);
    wait_sidecars(&dev, "billing", 1).await;
    dev.put_flow(
        "flow: parts\nnodes:\n  p:\n    run: {sidecar: {group: billing, job: part, shards: 4}}\n    \
         retry: {attempts: 2, backoff: 6s, jitter: 0s}\n",
    )
    .await;
    let run_id = dev.trigger("parts", json!({})).await;
    let reports = dir.path().join("s-retry-spool").join("reports");
    let spooled = || madeira_sidecar::spool::pending_on_disk(&reports);
    wait_until(std::time::Duration::from_secs(20), "the first attempt to end RETRYING", async || {
        let (_, run) = dev.get(&format!("/runs/{run_id}")).await;
        if status_of(&run, "p") == "RETRYING" && spooled() == 0 { Ok(()) } else { Err(run.to_string()) }
    })
    .await;
    let mut ran = lines(&ledger);
    ran.sort();
    assert_eq!(ran, ["0 1", "1 1", "2 1", "3 1"], "the first attempt ran every shard once");

    dev.kill9();
    let dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let run = dev.wait_run(&run_id, 60, |r| r["status"] != "RUNNING").await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(shard_outputs(&run), [0, 1, 2, 3], "the kept shards' outputs and the retried one: {run}");
    let mut ran = lines(&ledger);
    ran.sort();
    assert_eq!(ran, ["0 1", "1 1", "2 1", "3 1", "3 2"], "the retry ran only shard 3");
    let (_, logs) = dev.get(&format!("/runs/{run_id}/nodes/p/logs")).await;
    assert!(
        logs.to_string().contains("shard 0/4: succeeded earlier, not run again"),
        "the retry's log names the shards it did not run: {logs}"
    );
}
