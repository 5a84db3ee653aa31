//! XXL-JOB executors (issue 38): the real, independently written `pyxxl` executor
//! (PyPI, in a venv under `target/xxl-venv`, created when missing; under
//! `CI=true` a failed install fails the tests) registers with `madeira dev` with
//! its app's token and runs handlers as nodes: a three-node flow with its log
//! streamed, a failure retried, a kill on timeout, failover to a second executor
//! when the first is killed -9, sharding broadcast over two, a wrong token
//! refused. Every protocol call is recorded by the executor script
//! (`tests/e2e/xxl/executor.py`) in a JSON-lines wire log the tests read.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Dev, status_of, wait_until};

const PYXXL: &str = "pyxxl==0.4.8";
pub(crate) const APP: &str = "order-service";
pub(crate) const TOKEN: &str = "order-service-secret-0001";
pub(crate) const TOKEN_VAR: &str = "MADEIRA_TEST_XXL_TOKEN";

static INSTALL: Mutex<()> = Mutex::new(());

/// The venv's python with pyxxl, installed when missing; `None` (skip) when it
/// cannot be installed outside CI.
pub(crate) fn python() -> Option<PathBuf> {
    let _once = INSTALL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = match std::env::var_os("MADEIRA_XXL_VENV") {
        Some(v) => PathBuf::from(v),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/xxl-venv"),
    };
    let py = venv.join("bin/python");
    let ready = |py: &Path| Command::new(py).args(["-c", "import pyxxl"]).status().is_ok_and(|s| s.success());
    if !ready(&py) {
        let made =
            Command::new("python3").arg("-m").arg("venv").arg(&venv).status().is_ok_and(|s| s.success())
                && Command::new(venv.join("bin/pip"))
                    .args(["install", "--quiet", "--disable-pip-version-check", PYXXL])
                    .status()
                    .is_ok_and(|s| s.success());
        if !made || !ready(&py) {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true and {PYXXL} cannot be installed into {} (python3 -m venv, pip install)",
                venv.display()
            );
            eprintln!("skipping: {PYXXL} cannot be installed into {}", venv.display());
            return None;
        }
    }
    Some(py)
}

/// A pyxxl executor process.
pub(crate) struct Executor {
    child: Child,
    pub(crate) address: String,
}

impl Executor {
    pub(crate) fn start(py: &Path, dev: &Dev, dir: &Path, name: &str, token: &str) -> Executor {
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/e2e/xxl/executor.py");
        let child = Command::new(py)
            .arg(script)
            .arg(format!("{}/xxl-job-admin/api/", dev.base))
            .args([APP, token, &port.to_string(), name])
            .arg(dir.join("wire.jsonl"))
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn pyxxl executor");
        Executor { child, address: format!("http://127.0.0.1:{port}") }
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub(crate) fn start_dev(dir: &Path) -> Dev {
    let config = dir.join("server.yaml");
    std::fs::write(&config, format!("xxl_job:\n  apps:\n    - {{app: {APP}, token_env: {TOKEN_VAR}}}\n"))
        .expect("config");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    Dev::start_with_all(&data, &["--config", config.to_str().expect("path")], &[(TOKEN_VAR, TOKEN)])
}

/// Waits until `GET /sidecars` lists exactly `addresses` as live xxl executors.
pub(crate) async fn wait_registered(dev: &Dev, addresses: &[&str]) -> Value {
    let mut want = addresses.to_vec();
    want.sort_unstable();
    let what = format!("executors {want:?} registered");
    wait_until(Duration::from_secs(30), &what, async || {
        let (_, body) = dev.get("/sidecars").await;
        let mut live: Vec<&str> = body["xxl"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|x| x["live"] == true && x["kind"] == "xxl" && x["group"] == APP)
            .filter_map(|x| x["name"].as_str())
            .collect();
        live.sort_unstable();
        if live == want { Ok(body) } else { Err(format!("{body}")) }
    })
    .await
}

/// The wire log's records of `path` (e.g. `/run`, `callback`).
pub(crate) fn wire(dir: &Path, path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("wire.jsonl")).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v["path"] == path).collect()
}

async fn wait_file(path: &Path, secs: u64) {
    wait_until(Duration::from_secs(secs), &format!("{} written", path.display()), async || path.exists())
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pyxxl_runs_a_node_streams_its_log_is_retried_and_killed_on_timeout() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = start_dev(dir.path());
    let _intruder = Executor::start(&py, &dev, dir.path(), "intruder", "not-the-token-of-the-app");
    let ex = Executor::start(&py, &dev, dir.path(), "ex1", TOKEN);
    wait_registered(&dev, &[&ex.address]).await;

    // Three nodes, the middle one on the executor; the log streams into `logs -f`.
    dev.put_flow(
        "flow: xxl-chain\nnodes:\n  prepare:\n    run: {builtin: noop}\n  settle:\n    needs: [prepare]\n    \
         run: {xxl: {app: order-service, handler: hello, params: \"day=${params.day} run=${run_id}\"}}\n  \
         report:\n    needs: [settle]\n    run: {builtin: noop}\n",
    )
    .await;
    let run = dev.trigger("xxl-chain", json!({"day": "2026-12-05"})).await;
    let follow = Command::new(crate::support::BIN)
        .args(["logs", "-f", &run, "settle"])
        .env("MADEIRA_SERVER", &dev.base)
        .output()
        .expect("logs -f");
    let streamed = String::from_utf8_lossy(&follow.stdout);
    assert!(streamed.contains("hello step 2"), "logs -f: {streamed}");
    let done = dev.finished(&run).await;
    assert_eq!(done["status"], "SUCCESS", "{done}");
    assert_eq!(status_of(&done, "report"), "SUCCESS");
    let outputs = &done["nodes"]["settle"]["outputs"];
    assert_eq!(outputs["handle_msg"], "hello done on ex1", "{outputs}");
    assert_eq!(outputs["executor"], ex.address.as_str());
    let runs = wire(dir.path(), "/run");
    let trigger = &runs.last().expect("a /run call")["request"];
    assert_eq!(trigger["executorParams"], format!("day=2026-12-05 run={run}"));
    assert_eq!(trigger["glueType"], "BEAN");
    assert_eq!(trigger["logId"], outputs["log_id"], "the callback mapped to the attempt by logId");

    // A failure is retried per the node's retry policy, on the executor again.
    let marker = dir.path().join("flaky.marker");
    dev.put_flow(&format!(
        "flow: xxl-flaky\nnodes:\n  settle:\n    retry: {{attempts: 2, backoff: 100ms}}\n    \
         run: {{xxl: {{app: order-service, handler: flaky, params: \"{}\"}}}}\n",
        marker.display()
    ))
    .await;
    let run = dev.trigger("xxl-flaky", json!({})).await;
    let done = dev.finished(&run).await;
    assert_eq!(done["status"], "SUCCESS", "{done}");
    assert_eq!(done["nodes"]["settle"]["attempts"].as_u64(), Some(2), "{done}");

    // A timeout sends /kill; the executor's callback (CancelledError) ends the attempt.
    dev.put_flow(
        "flow: xxl-forever\nnodes:\n  settle:\n    timeout: 2s\n    \
         run: {xxl: {app: order-service, handler: forever, grace: 10s}}\n",
    )
    .await;
    let run = dev.trigger("xxl-forever", json!({})).await;
    let done = dev.finished(&run).await;
    assert_eq!(done["status"], "FAILED", "{done}");
    let history = done["nodes"]["settle"]["attempt_history"].as_array().cloned().unwrap_or_default();
    let error = history.last().and_then(|a| a["error"].as_str()).unwrap_or_default().to_string();
    assert!(error.contains("timed out") && error.contains("killed"), "{done}");
    assert!(error.contains("CancelledError"), "the executor's own callback ended it: {error}");
    assert!(!wire(dir.path(), "/kill").is_empty(), "a /kill call was made");

    // The executor with a wrong token was refused every time and never listed.
    let refused = wire(dir.path(), "registry");
    let intruder: Vec<&Value> = refused.iter().filter(|r| r["executor"] == "intruder").collect();
    assert!(!intruder.is_empty() && intruder.iter().all(|r| r["response"]["code"] != 200), "{intruder:?}");
    let metrics =
        reqwest::get(format!("{}/metrics", dev.base)).await.expect("metrics").text().await.expect("text");
    assert!(
        metrics.lines().any(|l| l.starts_with("madeira_xxl_requests_refused_total{reason=\"wrong_token\"}")),
        "{metrics}"
    );
    let sidecars = dev.cli(&["sidecars"]);
    let listed = String::from_utf8_lossy(&sidecars.stdout);
    assert!(listed.contains(&ex.address) && listed.contains("xxl"), "{listed}");
    let page =
        reqwest::get(format!("{}/sidecars", dev.base)).await.expect("console").text().await.expect("html");
    assert!(
        page.contains("XXL-JOB executors") && page.contains(&ex.address),
        "the console's fleet page lists it"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pyxxl_sharding_broadcast_and_failover_after_kill_9() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = start_dev(dir.path());
    let a = Executor::start(&py, &dev, dir.path(), "ex-a", TOKEN);
    let b = Executor::start(&py, &dev, dir.path(), "ex-b", TOKEN);
    wait_registered(&dev, &[&a.address, &b.address]).await;
    // Executors are ordered by address (ports are random): `low` sorts first.
    let ((mut low, low_name), (high, high_name)) =
        if a.address < b.address { ((a, "ex-a"), (b, "ex-b")) } else { ((b, "ex-b"), (a, "ex-a")) };

    dev.put_flow(
        "flow: xxl-shards\nnodes:\n  fan:\n    run: {xxl: {app: order-service, handler: shard, route: sharding_broadcast}}\n",
    )
    .await;
    let run = dev.trigger("xxl-shards", json!({})).await;
    let done = dev.finished(&run).await;
    assert_eq!(done["status"], "SUCCESS", "{done}");
    let shards = done["nodes"]["fan"]["outputs"]["shards"].as_array().cloned().unwrap_or_default();
    let msgs: Vec<&str> = shards.iter().filter_map(|s| s["handle_msg"].as_str()).collect();
    assert_eq!(msgs.len(), 2, "{done}");
    let (zero, one) = (format!("shard 0/2 on {low_name}"), format!("shard 1/2 on {high_name}"));
    assert!(msgs.contains(&zero.as_str()) && msgs.contains(&one.as_str()), "{msgs:?}");

    // Failover: the executor running the job is killed -9; the attempt moves to the other.
    dev.put_flow(
        "flow: xxl-failover\nnodes:\n  settle:\n    timeout: 60s\n    \
         run: {xxl: {app: order-service, handler: slow, params: \"2\", route: failover}}\n",
    )
    .await;
    let run = dev.trigger("xxl-failover", json!({})).await;
    let first = dir.path().join(format!("{low_name}.started"));
    let second = dir.path().join(format!("{high_name}.started"));
    wait_file(&first, 30).await;
    assert!(!second.exists(), "failover picks the first live executor");
    low.kill9();
    let done = dev.wait_run(&run, 60, |r| r["status"] == "SUCCESS" || r["status"] == "FAILED").await;
    assert_eq!(done["status"], "SUCCESS", "{done}");
    let outputs = &done["nodes"]["settle"]["outputs"];
    assert_eq!(outputs["handle_msg"], format!("slow done on {high_name}"), "{outputs}");
    assert_eq!(outputs["executor"], high.address.as_str());
    assert_eq!(done["nodes"]["settle"]["attempts"].as_u64(), Some(1), "moved within the attempt: {done}");
    let beats = wire(dir.path(), "/beat");
    assert!(beats.iter().any(|r| r["executor"] == high_name), "failover probed {high_name} with /beat");
    drop(high);
}
