//! Live job output through the real link: a sidecar job printing a line every
//! 200 ms is readable on the engine handle (`attempt_log`, woken by `follow_log`)
//! while it still runs, each line within a second of being printed, and the
//! attempt's buffer is marked finished once it ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use madeira_engine::TriggerRequest;
use madeira_fleet::FleetOptions;
use madeira_sidecar::{
    ExecPolicy, Identity, LinkOptions, Sidecar, SidecarConfig, SidecarMetrics, SidecarOptions,
};
use madeira_store::sqlite::SqliteStore;

mod common;

const JOBS: &str = "jobs:\n  ticker:\n    command: [\"/bin/sh\", \"-c\", \"for i in 1 2 3 4 5; do echo line $i; sleep 0.2; done\"]\n";

#[tokio::test]
async fn a_running_jobs_output_is_readable_from_an_offset_while_it_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"));
    let common::Plane { handle, endpoint, cancel, .. } =
        common::plane(store, FleetOptions::with_lost_after(Duration::from_secs(5))).await;

    let jobs = SidecarConfig::parse("jobs.yaml", JOBS).expect("parse").jobs("jobs.yaml").expect("jobs");
    let sidecar = Sidecar::new(SidecarOptions {
        identity: Identity { name: "live-01".into(), group: "billing".into(), version: "test".into() },
        link: LinkOptions { endpoint, ..Default::default() },
        jobs,
        spool_dir: dir.path().join("spool"),
        socket: None,
        exec: ExecPolicy::owner_only(Vec::new()),
        shutdown_grace: Duration::from_secs(1),
        hide_env: Vec::new(),
        metrics: SidecarMetrics::unregistered(),
    })
    .expect("sidecar");
    let mut connected = sidecar.handle();
    tokio::spawn(sidecar.run(cancel.clone()));
    assert!(connected.wait_connected(Duration::from_secs(10)).await, "sidecar connects");

    handle
        .apply_flow("f.yaml", "flow: live\nnodes:\n  t: {run: {sidecar: {group: billing, job: ticker}}}\n")
        .await
        .expect("apply");
    let request = TriggerRequest::manual("live", "test");
    let run_id = handle.trigger(request).await.expect("trigger").run_id;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut follow = loop {
        if let Some(rx) = handle.follow_log(&run_id, "t", None) {
            break rx;
        }
        assert!(Instant::now() < deadline, "no live output seen");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut offset = 0;
    let mut text = String::new();
    let mut seen_at = Vec::new();
    loop {
        let slice = handle.attempt_log(&run_id, "t", None, offset).expect("seen");
        offset = slice.next_offset;
        text.push_str(&String::from_utf8_lossy(&slice.data));
        seen_at.push((text.matches("line").count(), Instant::now()));
        if slice.finished {
            break;
        }
        tokio::time::timeout(Duration::from_secs(5), follow.changed()).await.expect("woken").expect("open");
    }
    assert_eq!(text, "line 1\nline 2\nline 3\nline 4\nline 5\n");
    let first = seen_at.iter().find(|(n, _)| *n >= 1).expect("line 1").1;
    let last = seen_at.iter().find(|(n, _)| *n >= 5).expect("line 5").1;
    assert!(
        last.duration_since(first) >= Duration::from_millis(600),
        "lines arrived as printed (over ~0.8 s), not all at the end"
    );
    let from_middle = handle.attempt_log(&run_id, "t", None, 7).expect("seen");
    assert!(from_middle.data.starts_with(b"line 2\n"), "resumable by byte offset");
    cancel.cancel();
}
