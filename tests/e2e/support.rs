//! Starting `madeira dev` on a fresh directory, and waiting on conditions with a
//! deadline (never sleeping and hoping).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use madeira_store::testing::services_required;
use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_madeira");

/// The `madeira` binary the servers and sidecars of `Dev` and `SidecarProc` run:
/// `MADEIRA_E2E_BIN` (or `MADEIRA_TEST_BIN`) when set (to measure a release
/// build), else this build's.
pub fn bin() -> std::ffi::OsString {
    std::env::var_os("MADEIRA_E2E_BIN")
        .or_else(|| std::env::var_os("MADEIRA_TEST_BIN"))
        .unwrap_or_else(|| BIN.into())
}

/// The slim `madeira-sidecar` binary: the one beside `bin()` when that is set by
/// `MADEIRA_E2E_BIN`/`MADEIRA_TEST_BIN`, else this build's.
pub fn slim_bin() -> std::path::PathBuf {
    match std::env::var_os("MADEIRA_E2E_BIN").or_else(|| std::env::var_os("MADEIRA_TEST_BIN")) {
        Some(bin) => std::path::PathBuf::from(bin).with_file_name("madeira-sidecar"),
        None => env!("CARGO_BIN_EXE_madeira-sidecar").into(),
    }
}

pub struct Dev {
    pub child: Child,
    pub base: String,
    pub http: reqwest::Client,
    /// `host:port` of the sidecar link.
    pub grpc: String,
}

impl Dev {
    /// Starts `madeira dev` on a new temporary data directory.
    pub fn start() -> (tempfile::TempDir, Dev) {
        let dir = tempfile::tempdir().expect("tempdir");
        let dev = Dev::start_in(dir.path());
        (dir, dev)
    }

    /// Starts `madeira dev` with its data in `dir` and ephemeral ports, reading the
    /// bound addresses from its stderr.
    pub fn start_in(dir: &Path) -> Dev {
        Dev::start_with(dir, &[])
    }

    /// As `start_in`, with extra environment variables for the server.
    pub fn start_with_env(dir: &Path, env: &[(&str, &str)]) -> Dev {
        Dev::start_with_all(dir, &[], env)
    }

    /// As `start_in`, with more arguments (`--jobs FILE`, `--config FILE`, `--grpc ADDR`).
    pub fn start_with(dir: &Path, extra: &[&str]) -> Dev {
        Dev::start_with_all(dir, extra, &[])
    }

    /// As `start_in`, with more arguments and environment variables.
    pub fn start_with_all(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Dev {
        let grpc = if extra.contains(&"--grpc") { &[][..] } else { &["--grpc", "127.0.0.1:0"][..] };
        let mut cmd = Command::new(bin());
        cmd.args(["dev", "--http", "127.0.0.1:0", "--data"])
            .arg(dir)
            .args(grpc)
            .args(extra)
            .envs(env.iter().copied());
        Dev::spawn(cmd, "madeira dev: API on ", Some("madeira dev: sidecar link on "), client(None))
    }

    /// Starts `madeira serve --config FILE` with extra environment; requests carry
    /// `token` as a bearer token.
    pub fn serve(config: &Path, env: &[(&str, &str)], token: Option<&str>) -> Dev {
        Dev::serve_with(config, env, false, client(token))
    }

    /// As `serve`, requests going through `http` (e.g. one trusting a test CA); with
    /// `link`, also waits for the sidecar link's address (`grpc`).
    pub fn serve_with(config: &Path, env: &[(&str, &str)], link: bool, http: reqwest::Client) -> Dev {
        let mut cmd = Command::new(bin());
        cmd.arg("serve").arg("--config").arg(config).envs(env.iter().copied());
        let grpc_banner = link.then_some("madeira serve: sidecar link on ");
        Dev::spawn(cmd, "madeira serve: API on ", grpc_banner, http)
    }

    /// Spawns `cmd` and reads the bound address from the stderr line starting with
    /// `banner` (and the sidecar link's from `grpc_banner`); the rest of stderr is
    /// drained (and echoed when `MADEIRA_TEST_ECHO`).
    fn spawn(mut cmd: Command, banner: &str, grpc_banner: Option<&str>, http: reqwest::Client) -> Dev {
        let mut child =
            cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn madeira server");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let (mut base, mut grpc) = (None, None);
        while base.is_none() || (grpc_banner.is_some() && grpc.is_none()) {
            let line = lines.next().expect("madeira exited before serving").expect("read stderr");
            if let Some(rest) = line.strip_prefix(banner) {
                let url = rest.split_whitespace().next().expect("url");
                base = Some(url.trim_end_matches("/api/v1").to_string());
            }
            if let Some(rest) = grpc_banner.and_then(|b| line.strip_prefix(b)) {
                grpc = rest.split_whitespace().next().map(str::to_string);
            }
        }
        let base = base.unwrap_or_default();
        let echo = std::env::var_os("MADEIRA_TEST_ECHO").is_some();
        let tag = base.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if echo {
                    eprintln!("[{tag}] {line}");
                }
            }
        });
        Dev { child, base, http, grpc: grpc.unwrap_or_default() }
    }

    /// Runs the CLI with `args` against this control plane.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(BIN)
            .args(args)
            .env("MADEIRA_SERVER", &self.base)
            .output()
            .expect("run madeira")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    pub async fn put_flow(&self, yaml: &str) -> Value {
        let name = yaml.lines().find_map(|l| l.strip_prefix("flow: ")).expect("flow name").trim().to_string();
        let resp = self
            .http
            .put(self.url(&format!("/flows/{name}")))
            .body(yaml.to_string())
            .send()
            .await
            .expect("put");
        let status = resp.status();
        let body: Value = resp.json().await.expect("json");
        assert!(status.is_success(), "apply {name}: {status} {body}");
        body
    }

    /// POST JSON; returns status and body.
    pub async fn post(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut req = self.http.post(self.url(path)).json(&body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("post");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self.http.get(self.url(path)).send().await.expect("get");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn trigger(&self, flow: &str, params: Value) -> String {
        let (status, body) = self.post(&format!("/flows/{flow}/runs"), json!({"params": params}), &[]).await;
        assert_eq!(status, 201, "{body}");
        body["run_id"].as_str().expect("run_id").to_string()
    }

    /// Polls the run until `done` holds for it, or panics after `secs`.
    pub async fn wait_run(&self, run_id: &str, secs: u64, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let (status, run) = self.get(&format!("/runs/{run_id}")).await;
            if status == 200 && done(&run) {
                return run;
            }
            assert!(Instant::now() < deadline, "run {run_id} did not reach the condition in {secs}s: {run}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub async fn finished(&self, run_id: &str) -> Value {
        self.wait_run(run_id, 30, |r| {
            matches!(r["status"].as_str(), Some("SUCCESS" | "FAILED" | "CANCELLED"))
        })
        .await
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// An HTTP client that sends `token` as a bearer token on every request.
pub fn client(token: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().expect("header value");
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder().default_headers(headers).build().expect("client")
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn status_of<'a>(run: &'a Value, node: &str) -> &'a str {
    run["nodes"][node]["status"].as_str().unwrap_or("?")
}

/// Sends SIGTERM to `child` and waits (at most `secs`) for it to exit.
pub async fn sigterm_and_wait(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_exit(child, secs).await
}

/// Waits (at most `secs`) for `child` to exit.
pub async fn wait_exit(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return status;
        }
        assert!(Instant::now() < deadline, "pid {} did not exit within {secs}s", child.id());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `madeira dev --config FILE --log-level debug` with `env`, keeping every stderr
/// line (to check what the server logged).
pub fn start_logged(
    dir: &Path,
    config: &Path,
    env: &[(&str, &str)],
) -> (Dev, std::sync::Arc<std::sync::Mutex<String>>) {
    use std::sync::{Arc, Mutex};
    let mut child = Command::new(BIN)
        .args(["dev", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log-level", "debug", "--data"])
        .arg(dir.join("data"))
        .arg("--config")
        .arg(config)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn madeira dev");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let logs = Arc::new(Mutex::new(String::new()));
    let base = loop {
        let line = lines.next().expect("madeira dev exited before serving").expect("read stderr");
        logs.lock().expect("logs").push_str(&format!("{line}\n"));
        if let Some(rest) = line.strip_prefix("madeira dev: API on ") {
            let url = rest.split_whitespace().next().expect("url");
            break url.trim_end_matches("/api/v1").to_string();
        }
    };
    let sink = logs.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().expect("logs").push_str(&format!("{line}\n"));
        }
    });
    (Dev { child, base, http: client(None), grpc: String::new() }, logs)
}

/// A tmpfs mounted for one test (root only), unmounted when dropped.
pub struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// `None` (skip) when not root, unless `CI=true`: then the test fails.
    pub fn mount(dir: &Path, size_mb: u32) -> Option<Tmpfs> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(!services_required(), "CI=true: the disk-full test needs root to mount a tmpfs");
            eprintln!("skipping: mounting a tmpfs needs root");
            return None;
        }
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mb}m,mode=0700"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount tmpfs on {}", dir.display());
        Some(Tmpfs(dir.to_path_buf()))
    }

    /// Writes a file until the filesystem is full.
    pub fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).expect("create filler");
        let chunk = vec![0u8; 64 * 1024];
        while file.write_all(&chunk).is_ok() {}
        for _ in 0..64 {
            let _ = file.write_all(&chunk[..512]);
        }
        let _ = file.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// When each execution of each idempotency key began, as an HTTP job saw it.
pub type Arrivals = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<Instant>>>>;

/// An HTTP job at the answered URL that records each request's `Idempotency-Key`
/// as it arrives (the witness of how often a job ran), then answers after
/// `job_time(key)`.
pub async fn witness_receiver(
    job_time: impl Fn(&str) -> Duration + Clone + Send + Sync + 'static,
) -> (String, Arrivals) {
    let seen: Arrivals = Default::default();
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/work",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let (log, job_time) = (log.clone(), job_time.clone());
            async move {
                let key =
                    headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                let took = job_time(&key);
                log.lock().expect("lock").entry(key).or_default().push(Instant::now());
                tokio::time::sleep(took).await;
                axum::Json(serde_json::json!({"done": true}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/work"), seen)
}
