//! The sidecar's local surface is locked down (SPEC §11): the exec socket is 0660
//! and `nobody` cannot report through it; reports name only flows the `observe:`
//! list allows, up to `observe_max_flows`, never a governed flow; the spool and the
//! work directory are 0700 and spooled reports 0600.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::fleet_shutdown::free_grpc;
use crate::sidecar::{SidecarProc, wait_for, wait_sidecars};
use crate::support::{BIN, Dev, wait_until};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

/// `madeira exec` as `as_user` (`None`: root, the test's own user).
fn exec(socket: &Path, as_user: Option<&str>, job: &str, flow: Option<&str>) -> Output {
    let mut cmd = match as_user {
        Some(user) => {
            let mut c = Command::new("setpriv");
            c.args([&format!("--reuid={user}"), "--regid=nogroup", "--clear-groups", BIN]);
            c
        }
        None => Command::new(BIN),
    };
    cmd.args(["exec", "--job", job, "--sidecar"]).arg(socket);
    if let Some(flow) = flow {
        cmd.args(["--flow", flow]);
    }
    cmd.args(["--", "/bin/true"]).output().expect("run madeira exec")
}

async fn runs_of(dev: &Dev, flow: &str) -> Vec<Value> {
    dev.get(&format!("/runs?flow={flow}")).await.1["runs"].as_array().cloned().unwrap_or_default()
}

async fn wait_runs(dev: &Dev, flow: &str, n: usize) {
    let what = format!("{n} run(s) of {flow} recorded");
    wait_until(Duration::from_secs(15), &what, async || runs_of(dev, flow).await.len() >= n).await
}

#[tokio::test]
async fn nobody_cannot_report_through_the_exec_socket_and_root_can() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Only the socket's own mode may stand in nobody's way.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dev = Dev::start_with(&dir.path().join("data"), &[]);
    let jobs = "jobs:\n  nightly:\n    command: [\"/bin/true\"]\n";
    let _sidecar = SidecarProc::start(dir.path(), "s-local", &dev.grpc, jobs);
    wait_sidecars(&dev, "billing", 1).await;
    let spool = dir.path().join("s-local-spool");
    let socket = spool.join("sidecar.sock");
    wait_for("the exec socket", 10, || socket.exists()).await;
    assert_eq!(mode(&socket), 0o660, "owner and exec_group only");
    assert_eq!(mode(&spool), 0o711, "others may reach the socket, not list the spool");
    assert_eq!(mode(&spool.join("reports")), 0o700);
    assert_eq!(mode(&spool.join("work")), 0o700);
    let data = dir.path().join("data");
    assert_eq!(mode(&data), 0o711, "others may not list the data directory");
    for file in ["madeira.db", "madeira.db-wal", "madeira.db-shm"] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file} is the store's");
    }

    let refused = exec(&socket, Some("nobody"), "nightly", None);
    assert_eq!(refused.status.code(), Some(0), "the command still runs unreported");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("no sidecar answers") && stderr.contains("ermission denied"), "{stderr}");

    let ok = exec(&socket, None, "nightly", None);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(ok.stderr.is_empty(), "root reports: {}", String::from_utf8_lossy(&ok.stderr));
    wait_runs(&dev, "nightly", 1).await;
    assert_eq!(runs_of(&dev, "nightly").await.len(), 1, "only root's run is recorded");
}

#[tokio::test]
async fn reports_name_only_observed_flows_up_to_the_cap_and_never_a_governed_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_with(&dir.path().join("data"), &[]);
    dev.put_flow("flow: daily-settlement\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let config = "observe: [\"daily-settlement\", \"cron-*\"]\nobserve_max_flows: 2\njobs: {}\n";
    let _sidecar = SidecarProc::start(dir.path(), "s-obs", &dev.grpc, config);
    wait_sidecars(&dev, "billing", 1).await;
    let socket = dir.path().join("s-obs-spool").join("sidecar.sock");
    wait_for("the exec socket", 10, || socket.exists()).await;

    let outside = exec(&socket, None, "payroll", None);
    let stderr = String::from_utf8_lossy(&outside.stderr);
    assert!(stderr.contains("`payroll` is not in this sidecar's `observe:` list"), "{stderr}");
    // The governed flow is allowed here, but the control plane never records into it.
    // `exec` says so when the control plane's refusal reaches it before it exits
    // (it does not wait for it: the job's own exit is what the crontab sees).
    let governed = exec(&socket, None, "settle", Some("daily-settlement"));
    let said = String::from_utf8_lossy(&governed.stderr);
    assert!(said.is_empty() || said.contains("is not `observe: true`"), "{said}");
    let first = exec(&socket, None, "a", Some("cron-a"));
    assert!(first.stderr.is_empty(), "{}", String::from_utf8_lossy(&first.stderr));
    let capped = exec(&socket, None, "b", Some("cron-b"));
    let stderr = String::from_utf8_lossy(&capped.stderr);
    assert!(stderr.contains("observe_max_flows"), "the third flow is over the cap of 2: {stderr}");

    // Reports travel in order: once cron-a's run is there, the earlier ones were handled.
    wait_runs(&dev, "cron-a", 1).await;
    assert!(runs_of(&dev, "daily-settlement").await.is_empty(), "no run recorded in a governed flow");
    let (_, flow) = dev.get("/flows/daily-settlement").await;
    assert_eq!(flow["version"], 1, "the governed flow is untouched: {flow}");
    for name in ["payroll", "cron-b"] {
        let (status, _) = dev.get(&format!("/flows/{name}")).await;
        assert_eq!(status, 404, "flow {name} was never created");
    }
}

#[tokio::test]
async fn spooled_reports_are_0600() {
    let dir = tempfile::tempdir().expect("tempdir");
    // No control plane listens: the report stays spooled.
    let config = "observe: [\"*\"]\njobs: {}\n";
    let _sidecar = SidecarProc::start(dir.path(), "s-off", &free_grpc(), config);
    let spool = dir.path().join("s-off-spool");
    let socket = spool.join("sidecar.sock");
    wait_for("the exec socket", 10, || socket.exists()).await;
    let out = exec(&socket, None, "offline", None);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let reports = spool.join("reports");
    let files: Vec<_> = std::fs::read_dir(&reports).expect("spool").flatten().map(|e| e.path()).collect();
    assert_eq!(
        madeira_sidecar::spool::pending_on_disk(&reports),
        2,
        "start and finish reports wait in the spool: {files:?}"
    );
    for file in &files {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
    assert_eq!(mode(&reports), 0o700);
}
