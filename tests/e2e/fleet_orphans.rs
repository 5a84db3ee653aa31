//! A sidecar killed with `kill -9` leaves no job behind (SPEC §4.1, leftovers):
//! a real `madeira sidecar` runs 10 jobs (each with a grandchild in its process
//! group) when it is killed; the jobs outlive it, unsupervised. Restarted on the
//! same spool, it stops every group it left before taking work and reports those
//! attempts lost (retryable); the retries run, every node ends SUCCESS, no job
//! process is left, and no attempt ran twice — nor ever at the same time as
//! another attempt of its node (each job checks the pids of earlier ones).

use std::path::Path;

use serde_json::json;

use crate::fleet_shutdown::free_grpc;
use crate::sidecar::{SidecarProc, running, wait_for, wait_sidecars};
use crate::support::{Dev, status_of};

const N: usize = 10;

/// A job that notes an overlap with any earlier process of its node still
/// running (a zombie waiting for its reaper does not run), records its pid and its grandchild's, then works (60 s on the first
/// attempt, a moment on later ones).
fn script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "#!/bin/sh\n\
         for p in $(cat {d}/$MADEIRA_NODE.pids 2>/dev/null); do\n\
           s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1)\n\
           case \"$s\" in ''|Z|X) ;; *) echo \"$MADEIRA_NODE $MADEIRA_ATTEMPT overlaps $p ($s)\" >> {d}/overlaps;; esac\n\
         done\n\
         if [ \"$MADEIRA_ATTEMPT\" = 1 ]; then work=60; else work=0.2; fi\n\
         sleep $work &\n\
         echo \"$$ $!\" | tr ' ' '\\n' >> {d}/$MADEIRA_NODE.pids\n\
         echo \"$MADEIRA_NODE $MADEIRA_ATTEMPT $$ $!\" >> {d}/started\n\
         wait\n\
         printf '{{\"attempt\": %s}}' \"$MADEIRA_ATTEMPT\" > \"$MADEIRA_OUTPUT_FILE\"\n"
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

/// Every pid the jobs recorded (themselves and their grandchildren).
fn job_pids(started: &[String]) -> Vec<u32> {
    started.iter().flat_map(|l| l.split_whitespace().skip(2).filter_map(|p| p.parse().ok())).collect()
}

#[tokio::test]
async fn a_sidecar_killed_with_9_and_restarted_leaves_no_job_behind_and_runs_no_attempt_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let grpc = free_grpc();
    let dev = Dev::start_with(&dir.path().join("data"), &["--grpc", &grpc]);
    let work = dir.path().join("work.sh");
    std::fs::write(&work, script(dir.path())).expect("script");
    let jobs = format!("jobs:\n  work:\n    command: [\"/bin/sh\", \"{}\"]\n    grace: 1s\n", work.display());
    let mut sidecar = SidecarProc::start(dir.path(), "s-orphan", &grpc, &jobs);
    wait_sidecars(&dev, "billing", 1).await;
    let nodes: String =
        (0..N).map(|i| format!("  n{i}: {{run: {{sidecar: {{group: billing, job: work}}}}}}\n")).collect();
    dev.put_flow(&format!(
        "flow: orphans\ndefaults:\n  retry: {{attempts: 2, backoff: 100ms, jitter: 0s}}\nnodes:\n{nodes}"
    ))
    .await;
    let run_id = dev.trigger("orphans", json!({})).await;
    let started = dir.path().join("started");
    wait_for("every job to start", 20, || lines(&started).len() == N).await;

    sidecar.kill9();
    let first = job_pids(&lines(&started));
    assert_eq!(first.len(), 2 * N);
    assert!(first.iter().all(|&p| running(p)), "the jobs outlive a sidecar killed with -9");

    let _restarted = SidecarProc::spawn(sidecar.config.clone());
    let run = dev.wait_run(&run_id, 60, |r| r["status"] != "RUNNING").await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    let gone: Vec<u32> = first.iter().copied().filter(|&p| running(p)).collect();
    assert!(gone.is_empty(), "the first attempts' processes were all stopped: {gone:?} still run");
    let all = lines(&started);
    for i in 0..N {
        let node = format!("n{i}");
        assert_eq!(status_of(&run, &node), "SUCCESS", "{run}");
        assert_eq!(run["nodes"][&node]["outputs"]["attempt"], 2, "the retry's result: {run}");
        let mut attempts: Vec<&str> = all
            .iter()
            .filter(|l| l.split_whitespace().next() == Some(node.as_str()))
            .map(|l| l.split_whitespace().nth(1).unwrap_or(""))
            .collect();
        attempts.sort_unstable();
        assert_eq!(attempts, ["1", "2"], "{node}: each attempt ran once: {all:?}");
        let history = &run["nodes"][&node]["attempt_history"];
        assert!(
            history[0]["error"].as_str().is_some_and(|e| e.contains("sidecar restarted")),
            "the first attempt is reported lost: {history}"
        );
    }
    let overlaps = lines(&dir.path().join("overlaps"));
    assert!(overlaps.is_empty(), "no attempt ran alongside an earlier one: {overlaps:?}");
    let left: Vec<u32> = job_pids(&all).into_iter().filter(|&p| running(p)).collect();
    assert!(left.is_empty(), "no job process is left: {left:?}");
    // A record is a slot file whose magic is set (a free slot's is zero), or a
    // record file of an earlier version.
    let held = |path: &std::path::Path| {
        std::fs::read(path)
            .is_ok_and(|bytes| path.extension().is_some_and(|e| e == "job") || bytes.starts_with(b"MDS1"))
    };
    let records: Vec<_> = std::fs::read_dir(dir.path().join("s-orphan-spool").join("jobs"))
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| held(p)).collect())
        .unwrap_or_default();
    assert!(records.is_empty(), "no job record is left in the spool: {records:?}");
}
