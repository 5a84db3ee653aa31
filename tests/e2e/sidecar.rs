//! Sidecar jobs as real processes: outputs flow downstream through the input file,
//! the SPEC §4 environment is there, exit codes are classified, a job ignoring
//! SIGTERM is killed after its grace with its grandchild, an attempt moves when its
//! sidecar dies, a sidecar's spool is delivered exactly once after an outage (also a
//! result its full disk refused, kept in memory), and a lost sidecar raises a warning
//! that its return resolves.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use crate::support::wait_for;
use crate::support::{Dev, status_of, wait_until};

pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].split_whitespace().next() != Some("Z")))
        .unwrap_or(false)
}

/// A `madeira sidecar --config` process.
pub struct SidecarProc {
    pub child: Child,
    pub config: PathBuf,
}

impl SidecarProc {
    pub fn start(dir: &Path, name: &str, grpc: &str, jobs_yaml: &str) -> SidecarProc {
        SidecarProc::spawn(SidecarProc::config(dir, name, grpc, jobs_yaml))
    }

    /// Writes the config of sidecar `name` (group `billing`) into `dir`.
    pub fn config(dir: &Path, name: &str, grpc: &str, jobs_yaml: &str) -> PathBuf {
        let config = dir.join(format!("{name}.yaml"));
        let text = format!(
            "name: {name}\ngroup: billing\ncontrol_plane: http://{grpc}\nspool_dir: {}\nshutdown_grace: 1s\n{jobs_yaml}",
            dir.join(format!("{name}-spool")).display()
        );
        std::fs::write(&config, text).expect("write sidecar config");
        config
    }

    pub fn spawn(config: PathBuf) -> SidecarProc {
        SidecarProc::spawn_with_env(config, &[])
    }

    pub fn spawn_with_env(config: PathBuf, env: &[(&str, &str)]) -> SidecarProc {
        let mut command = Command::new(crate::support::bin());
        command.arg("sidecar");
        SidecarProc::spawn_command(command, config, env)
    }

    /// The slim `madeira-sidecar` binary (the same daemon) on `config`.
    pub fn spawn_slim(config: PathBuf) -> SidecarProc {
        SidecarProc::spawn_command(Command::new(crate::support::slim_bin()), config, &[])
    }

    fn spawn_command(mut command: Command, config: PathBuf, env: &[(&str, &str)]) -> SidecarProc {
        let child = command
            .arg("--config")
            .arg(&config)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log_file(&config))
            .spawn()
            .expect("spawn madeira sidecar");
        SidecarProc { child, config }
    }

    pub fn signal(&mut self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The sidecar's log: `<config>.log` beside its config, appended to by each start.
fn log_file(config: &Path) -> Stdio {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(config.with_extension("log"))
        .map_or_else(|_| Stdio::null(), Stdio::from)
}

impl Drop for SidecarProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            // A failing test shows the sidecar's last log lines (its log file).
            let log = std::fs::read_to_string(self.config.with_extension("log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(200).collect();
            eprintln!("---- sidecar {}: its last {} log lines ----", self.config.display(), tail.len());
            tail.iter().rev().for_each(|line| eprintln!("{line}"));
            eprintln!("---- end of sidecar {} ----", self.config.display());
        }
    }
}

async fn sidecars(dev: &Dev) -> Value {
    dev.get("/sidecars").await.1
}

pub async fn wait_sidecars(dev: &Dev, group: &str, n: usize) {
    let what = format!("{n} sidecar(s) of {group}");
    wait_until(Duration::from_secs(20), &what, async || {
        let body = sidecars(dev).await;
        let live = body["sidecars"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["group"] == group && s["ready"] == true)
            .count();
        if live >= n { Ok(()) } else { Err(body.to_string()) }
    })
    .await
}

const PIPE_JOBS: &str = r#"jobs:
  produce:
    command: ["/bin/sh", "-c", "echo producing for $1; printf '{\"count\": 7, \"key\": \"%s\", \"tp\": \"%s\", \"date\": \"%s\"}' \"$MADEIRA_IDEMPOTENCY_KEY\" \"$TRACEPARENT\" \"$1\" > \"$MADEIRA_OUTPUT_FILE\"", "sh", "{{ params.date }}"]
  consume:
    command: ["/bin/sh", "-c", "cp \"$MADEIRA_INPUT_FILE\" \"$MADEIRA_OUTPUT_FILE\""]
  picky:
    command: ["/bin/sh", "-c", "echo attempt $MADEIRA_ATTEMPT; exit $1", "sh", "{{ params.code }}"]
"#;

#[tokio::test]
async fn outputs_reach_the_downstream_input_file_with_the_spec_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = dir.path().join("jobs.yaml");
    std::fs::write(&jobs, PIPE_JOBS).expect("jobs");
    let dev = Dev::start_with(&dir.path().join("data"), &["--jobs", jobs.to_str().expect("path")]);
    dev.put_flow(
        "flow: pipe\nnodes:\n  produce: {run: {sidecar: {group: local, job: produce}}}\n  consume: {needs: [produce], run: {sidecar: {group: local, job: consume}}}\n",
    )
    .await;
    let run_id = dev.trigger("pipe", json!({"date": "2026-11-30; rm -rf /"})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    let produced = &run["nodes"]["produce"]["outputs"];
    assert_eq!(produced["date"], "2026-11-30; rm -rf /", "a templated value stays one argument");
    assert_eq!(produced["key"], format!("{run_id}:produce:v1"), "idempotency key");
    let tp = produced["tp"].as_str().unwrap_or("");
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "TRACEPARENT is given without an OTLP exporter too: {tp:?}");
    assert_eq!((parts[0], parts[1].len(), parts[2].len()), ("00", 32, 16), "W3C traceparent: {tp}");
    let input = &run["nodes"]["consume"]["outputs"];
    assert_eq!(input["nodes"]["produce"]["outputs"]["count"], 7, "{input}");
    assert_eq!(input["nodes"]["produce"]["status"], "SUCCESS");
    assert_eq!(input["params"]["date"], "2026-11-30; rm -rf /");
    let (_, logs) = dev.get(&format!("/runs/{run_id}/nodes/produce/logs")).await;
    assert!(logs.to_string().contains("producing for 2026-11-30"), "{logs}");
    let fleet = sidecars(&dev).await;
    assert_eq!(fleet["sidecars"][0]["group"], "local", "{fleet}");
    assert!(fleet["sidecars"][0]["jobs"].as_array().is_some_and(|j| j.len() == 3), "{fleet}");
}

#[tokio::test]
async fn no_retry_exit_codes_fail_at_once_and_others_retry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = dir.path().join("jobs.yaml");
    std::fs::write(&jobs, PIPE_JOBS).expect("jobs");
    let dev = Dev::start_with(&dir.path().join("data"), &["--jobs", jobs.to_str().expect("path")]);
    dev.put_flow(
        "flow: picky\ndefaults:\n  retry: {attempts: 3, backoff: 50ms, jitter: 0s, no_retry_exit_codes: [3]}\nnodes:\n  p: {run: {sidecar: {group: local, job: picky}}}\n",
    )
    .await;
    let stop = dev.trigger("picky", json!({"code": 3})).await;
    let run = dev.finished(&stop).await;
    assert_eq!((status_of(&run, "p"), run["nodes"]["p"]["attempts"].as_u64()), ("FAILED", Some(1)), "{run}");
    assert!(run["nodes"]["p"]["reason"].as_str().is_some_and(|r| r.contains("exit code 3")), "{run}");
    let retry = dev.trigger("picky", json!({"code": 4})).await;
    let run = dev.finished(&retry).await;
    assert_eq!((status_of(&run, "p"), run["nodes"]["p"]["attempts"].as_u64()), ("FAILED", Some(3)), "{run}");
}

#[tokio::test]
async fn a_node_waits_in_init_until_a_sidecar_declares_its_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_with(&dir.path().join("data"), &[]);
    dev.put_flow("flow: later\nnodes:\n  a: {run: {sidecar: {group: billing, job: pull}}}\n").await;
    let run_id = dev.trigger("later", json!({})).await;
    let run = dev.wait_run(&run_id, 10, |r| r["nodes"]["a"]["waiting"] == true).await;
    assert_eq!(status_of(&run, "a"), "INIT");
    assert!(
        run["nodes"]["a"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no live sidecar of group `billing`"))
    );
    let jobs = "jobs:\n  pull:\n    command: [\"/bin/true\"]\n";
    let _s = SidecarProc::start(dir.path(), "b1", &dev.grpc, jobs);
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
}

#[tokio::test]
async fn a_job_ignoring_sigterm_is_killed_after_grace_and_its_grandchild_is_gone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    let jobs = dir.path().join("jobs.yaml");
    let script = format!(
        "trap '' TERM; (trap '' TERM; sleep 600) & echo $! > {p}.tmp; mv {p}.tmp {p}; sleep 600",
        p = pids.display()
    );
    std::fs::write(
        &jobs,
        format!("jobs:\n  stubborn:\n    command: [\"/bin/sh\", \"-c\", {script:?}]\n    grace: 500ms\n"),
    )
    .expect("jobs");
    let dev = Dev::start_with(&dir.path().join("data"), &["--jobs", jobs.to_str().expect("path")]);
    dev.put_flow(
        "flow: stubborn\nnodes:\n  s: {timeout: 1s, run: {sidecar: {group: local, job: stubborn}}}\n",
    )
    .await;
    let started = Instant::now();
    let run_id = dev.trigger("stubborn", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(status_of(&run, "s"), "FAILED", "{run}");
    assert!(started.elapsed() >= Duration::from_millis(1500), "timeout plus grace");
    let (_, logs) = dev.get(&format!("/runs/{run_id}/nodes/s/logs")).await;
    assert!(logs.to_string().contains("SIGKILL"), "{logs}");
    let grandchild: u32 = std::fs::read_to_string(&pids).expect("pid file").trim().parse().expect("pid");
    assert!(!running(grandchild), "grandchild {grandchild} survived");
}

const SLOW_JOB: &str = "jobs:\n  slow:\n    command: [\"/bin/sh\", \"-c\", \"echo $WHO >> {dir}/started; sleep 2; echo $WHO >> {dir}/ran; printf '{{\\\"who\\\": \\\"%s\\\"}}' $WHO > $MADEIRA_OUTPUT_FILE\"]\n    env: {{WHO: {who}}}\n";

fn slow_job(dir: &Path, who: &str) -> String {
    SLOW_JOB
        .replace("{dir}", &dir.display().to_string())
        .replace("{who}", who)
        .replace("{{", "{")
        .replace("}}", "}")
}

#[tokio::test]
async fn killing_one_of_two_sidecars_mid_job_moves_the_attempt_to_the_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("server.yaml");
    std::fs::write(&config, "sidecar_lost_after: 1s\n").expect("config");
    let dev = Dev::start_with(&dir.path().join("data"), &["--config", config.to_str().expect("path")]);
    let mut a = SidecarProc::start(dir.path(), "s-a", &dev.grpc, &slow_job(dir.path(), "a"));
    let mut b = SidecarProc::start(dir.path(), "s-b", &dev.grpc, &slow_job(dir.path(), "b"));
    wait_sidecars(&dev, "billing", 2).await;
    dev.put_flow("flow: moving\nnodes:\n  m: {run: {sidecar: {group: billing, job: slow}}}\n").await;
    let run_id = dev.trigger("moving", json!({})).await;
    let started = dir.path().join("started");
    wait_for("the job to start", 10, || std::fs::read_to_string(&started).is_ok_and(|s| !s.is_empty())).await;
    let first = std::fs::read_to_string(&started).expect("started").trim().to_string();
    let (victim, survivor) = if first == "a" { (&mut a, "b") } else { (&mut b, "a") };
    victim.kill9();
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["m"]["outputs"]["who"], survivor, "{run}");
}

#[tokio::test]
async fn a_sidecar_restarted_while_the_control_plane_is_down_delivers_its_spool_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let grpc = format!("127.0.0.1:{port}");
    let mut dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let mut sidecar = SidecarProc::start(dir.path(), "s1", &grpc, &slow_job(dir.path(), "s"));
    wait_sidecars(&dev, "billing", 1).await;
    dev.put_flow("flow: spooled\nnodes:\n  j: {run: {sidecar: {group: billing, job: slow}}}\n").await;
    let run_id = dev.trigger("spooled", json!({})).await;
    let started = dir.path().join("started");
    wait_for("the job to start", 10, || std::fs::read_to_string(&started).is_ok_and(|s| !s.is_empty())).await;
    dev.kill9();
    let spool = dir.path().join("s1-spool").join("reports");
    let spooled = || madeira_sidecar::spool::pending_on_disk(&spool);
    wait_for("the result to be spooled", 10, || spooled() == 1).await;
    sidecar.signal(libc::SIGTERM);
    let _ = sidecar.child.wait();
    let config = sidecar.config.clone();
    drop(sidecar);
    let _restarted = SidecarProc::spawn(config);
    assert_eq!(spooled(), 1, "the spool survives the restart");
    let dev = Dev::start_with(&data, &["--grpc", &grpc]);
    slow_job_ran_once(&dev, &run_id, dir.path(), "s").await;
    wait_for("the spool to empty", 10, || spooled() == 0).await;
}

/// The run of node `j` (the slow job) ended SUCCESS with the outputs of sidecar
/// `who`, its result applied once and the job run once.
async fn slow_job_ran_once(dev: &Dev, run_id: &str, dir: &Path, who: &str) {
    let run = dev.finished(run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["j"]["outputs"]["who"], who);
    assert_eq!(run["nodes"]["j"]["data_version"], 1, "the result was applied once");
    let ran = std::fs::read_to_string(dir.join("ran")).expect("ran");
    assert_eq!(ran.lines().count(), 1, "the job ran once: {ran}");
}

#[tokio::test]
async fn a_report_its_full_disk_refused_reaches_the_restarted_control_plane_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reports = dir.path().join("s-full-spool").join("reports");
    std::fs::create_dir_all(&reports).expect("spool dir");
    let Some(disk) = crate::support::Tmpfs::mount(&reports, 1) else { return };
    let data = dir.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let grpc = format!("127.0.0.1:{port}");
    let mut dev = Dev::start_with(&data, &["--grpc", &grpc]);
    let sidecar = SidecarProc::start(dir.path(), "s-full", &grpc, &slow_job(dir.path(), "f"));
    wait_sidecars(&dev, "billing", 1).await;
    dev.put_flow("flow: unspooled\nnodes:\n  j: {run: {sidecar: {group: billing, job: slow}}}\n").await;
    let run_id = dev.trigger("unspooled", json!({})).await;
    wait_for("the job to start", 10, || std::fs::read_to_string(dir.path().join("started")).is_ok()).await;
    disk.fill();
    dev.kill9();
    // The job ends with no control plane to tell and no room to spool its result.
    let log = sidecar.config.with_extension("log");
    let refused = || std::fs::read_to_string(&log).is_ok_and(|l| l.contains("cannot spool a report on disk"));
    wait_for("the spool to refuse the result", 15, refused).await;
    assert_eq!(madeira_sidecar::spool::pending_on_disk(&reports), 0, "nothing reached the disk");
    let dev = Dev::start_with(&data, &["--grpc", &grpc]);
    slow_job_ran_once(&dev, &run_id, dir.path(), "f").await;
}

#[tokio::test]
async fn dev_and_sidecar_stop_on_sigterm_while_connected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = Dev::start_with(&dir.path().join("data"), &[]);
    let mut sidecar = SidecarProc::start(dir.path(), "s-stop", &dev.grpc, "jobs: {}\n");
    wait_sidecars(&dev, "billing", 1).await;
    let status = crate::support::sigterm_and_wait(&mut dev.child, 15).await;
    assert!(status.success(), "{status:?}");
    sidecar.signal(libc::SIGTERM);
    let mut stopped = None;
    wait_for("the sidecar to exit", 15, || {
        stopped = sidecar.child.try_wait().ok().flatten();
        stopped.is_some()
    })
    .await;
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");
}

#[tokio::test]
async fn a_lost_sidecar_raises_a_warning_that_its_return_resolves() {
    let hook = crate::webhook::Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev_with(dir.path(), "1s", "sidecar_lost_after: 1s\n");
    let jobs = "jobs:\n  noop:\n    command: [\"/bin/true\"]\n";
    let mut sidecar = SidecarProc::start(dir.path(), "s-lost", &dev.grpc, jobs);
    wait_sidecars(&dev, "billing", 1).await;
    let lost = |kind: &str| hook.alerts(kind, |a| a["alertname"] == "MadeiraSidecarLost");
    assert!(lost("firing").is_empty(), "a live sidecar is not lost");

    sidecar.kill9();
    wait_for("the lost-sidecar warning", 20, || !lost("firing").is_empty()).await;
    let warning = &lost("firing")[0];
    assert_eq!((&warning["severity"], &warning["labels"]["sidecar"]), (&json!("warning"), &json!("s-lost")));
    assert_eq!(warning["labels"]["group"], "billing");

    let _back = SidecarProc::spawn(sidecar.config.clone());
    wait_for("the warning resolved by the sidecar's return", 20, || !lost("resolved").is_empty()).await;
}
