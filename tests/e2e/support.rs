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

/// How often `wait_until` asks again.
const POLL: Duration = Duration::from_millis(25);

/// What a `wait_until` condition answers: `true`, `Some(value)` or `Ok(value)`
/// once reached; `Err(state)` says what it saw instead (in the timeout's message).
pub trait Reached {
    type Value;
    fn reached(self) -> Result<Self::Value, Option<String>>;
}

impl Reached for bool {
    type Value = ();
    fn reached(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Reached for Option<T> {
    type Value = T;
    fn reached(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T> Reached for Result<T, String> {
    type Value = T;
    fn reached(self) -> Result<T, Option<String>> {
        self.map_err(Some)
    }
}

/// Asks `condition` every 25 ms until it is reached (`true`, `Some(value)` or
/// `Ok(value)`: the value is returned), and fails the test naming `what` (and the
/// last `Err` the condition gave) once `within` has passed. The one deadline loop
/// of the e2e tests: use it instead of writing another.
pub async fn wait_until<R: Reached>(
    within: Duration,
    what: &str,
    condition: impl AsyncFnMut() -> R,
) -> R::Value {
    match try_wait_until(within, condition).await {
        Ok(value) => value,
        Err(Some(last)) => panic!("timed out after {within:?} waiting for {what}; last seen: {last}"),
        Err(None) => panic!("timed out after {within:?} waiting for {what}"),
    }
}

/// The pause between two asks of a condition (`try_wait_until`, `hold_for`): the
/// one place the async helpers wait, polling under a deadline or watching a
/// window, never sleeping and hoping.
async fn poll_pause() {
    tokio::time::sleep(POLL).await;
}

/// As `wait_until`, but answering `Err(last state)` once `within` has passed
/// (for a caller to whom the timeout is an answer).
pub async fn try_wait_until<R: Reached>(
    within: Duration,
    mut condition: impl AsyncFnMut() -> R,
) -> Result<R::Value, Option<String>> {
    let deadline = Instant::now() + within;
    loop {
        let last = match condition().await.reached() {
            Ok(value) => return Ok(value),
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            return Err(last);
        }
        poll_pause().await;
    }
}

/// Asks `condition` every 25 ms for the whole of `window` and fails the test
/// naming `what` the first time it does not hold: a window in which something
/// must not happen (no second alert, no run of a deleted flow), watched rather
/// than slept through.
pub async fn hold_for(window: Duration, what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + window;
    while Instant::now() < end {
        assert!(condition().await, "{what} stopped holding within the {window:?} window");
        poll_pause().await;
    }
    assert!(condition().await, "{what} stopped holding at the end of the {window:?} window");
}

/// `wait_until` for sync code (a helper called outside the runtime, or a
/// process started in a constructor): blocks the thread between asks.
pub fn wait_blocking<T>(within: Duration, what: &str, condition: impl FnMut() -> Option<T>) -> T {
    try_wait_blocking(within, condition)
        .unwrap_or_else(|| panic!("timed out after {within:?} waiting for {what}"))
}

/// As `wait_blocking`, but `None` once `within` has passed.
pub fn try_wait_blocking<T>(within: Duration, mut condition: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = condition() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        // Polling a condition under a deadline from sync code, not sleeping and hoping.
        std::thread::sleep(POLL);
    }
}

/// `wait_until` for a condition that needs no `await` (a process's state, a
/// shared log), `secs` seconds at most.
pub async fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    wait_until(Duration::from_secs(secs), what, async || cond()).await
}

pub struct Dev {
    pub child: Child,
    pub base: String,
    pub http: reqwest::Client,
    /// `host:port` of the sidecar link.
    pub grpc: String,
    /// The server's last stderr lines, printed if it is dropped while a test panics.
    pub log: LogTail,
}

/// The last `LogTail::LINES` lines a server wrote to stderr, and the thread that
/// reads them: a failing test prints them (the cause of a rare failure is then
/// in CI's output), a passing one prints nothing.
#[derive(Default)]
pub struct LogTail {
    lines: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    /// Every line, when the test reads what the server logged (`spawn_logged`).
    pub all: Option<std::sync::Arc<std::sync::Mutex<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl LogTail {
    const LINES: usize = 300;

    /// Keeps `first` (the lines already read, not echoed again), then reads
    /// `lines` to their end on a thread, keeping the last ones (every one as well
    /// in `all` when `keep_all`) and echoing each, tagged, when
    /// `MADEIRA_TEST_ECHO` is set.
    pub fn follow(
        tag: String,
        first: Vec<String>,
        lines: impl Iterator<Item = std::io::Result<String>> + Send + 'static,
        keep_all: bool,
    ) -> LogTail {
        let all = keep_all.then(|| {
            let text: String = first.iter().map(|line| format!("{line}\n")).collect();
            std::sync::Arc::new(std::sync::Mutex::new(text))
        });
        let first: std::collections::VecDeque<String> =
            first.into_iter().rev().take(LogTail::LINES).rev().collect();
        let kept = std::sync::Arc::new(std::sync::Mutex::new(first));
        let echo = std::env::var_os("MADEIRA_TEST_ECHO").is_some();
        let (sink, whole) = (kept.clone(), all.clone());
        let reader = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if echo {
                    eprintln!("[{tag}] {line}");
                }
                if let Some(whole) = &whole {
                    whole.lock().unwrap_or_else(|e| e.into_inner()).push_str(&format!("{line}\n"));
                }
                let mut kept = sink.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() == LogTail::LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        LogTail { lines: kept, all, reader: Some(reader) }
    }

    /// Prints the kept lines to stderr under `title`, after waiting (1 s at most)
    /// for the reader to reach the end of a stream whose writer is gone.
    pub fn print(&mut self, title: &str) {
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.reader.as_ref().is_some_and(|r| !r.is_finished()) && Instant::now() < deadline {
            // Waiting on the reader's end under a deadline (a job may hold the pipe).
            std::thread::sleep(Duration::from_millis(10));
        }
        let kept = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        eprintln!("---- {title}: its last {} stderr lines ----", kept.len());
        for line in kept.iter() {
            eprintln!("{line}");
        }
        eprintln!("---- end of {title} ----");
    }
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

    /// Spawns `cmd` (logging at `info` unless told otherwise) and reads the bound
    /// address from the stderr line starting with `banner` (and the sidecar link's
    /// from `grpc_banner`); stderr's last lines are kept in `log` (see `LogTail`).
    fn spawn(mut cmd: Command, banner: &str, grpc_banner: Option<&str>, http: reqwest::Client) -> Dev {
        // Info lines by default (RUST_LOG still wins), so a failure's tail says what the server did.
        if !cmd.get_args().any(|a| a == "--log-level") {
            cmd.args(["--log-level", "info"]);
        }
        Dev::spawn_keeping(cmd, banner, grpc_banner, http, false)
    }

    fn spawn_keeping(
        mut cmd: Command,
        banner: &str,
        grpc_banner: Option<&str>,
        http: reqwest::Client,
        keep_all: bool,
    ) -> Dev {
        let mut child =
            cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn madeira server");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let (mut base, mut grpc, mut first) = (None, None, Vec::new());
        while base.is_none() || (grpc_banner.is_some() && grpc.is_none()) {
            let line = lines.next().expect("madeira exited before serving").expect("read stderr");
            if let Some(rest) = line.strip_prefix(banner) {
                let url = rest.split_whitespace().next().expect("url");
                base = Some(url.trim_end_matches("/api/v1").to_string());
            }
            if let Some(rest) = grpc_banner.and_then(|b| line.strip_prefix(b)) {
                grpc = rest.split_whitespace().next().map(str::to_string);
            }
            first.push(line);
        }
        let base = base.unwrap_or_default();
        let log = LogTail::follow(base.clone(), first, lines, keep_all);
        Dev { child, base, http, grpc: grpc.unwrap_or_default(), log }
    }

    /// Spawns `cmd` as `spawn` does, but at the log level `cmd` asks for and
    /// keeping every stderr line in the returned text (to check what the server
    /// logged).
    pub fn spawn_logged(
        cmd: Command,
        banner: &str,
        http: reqwest::Client,
    ) -> (Dev, std::sync::Arc<std::sync::Mutex<String>>) {
        let dev = Dev::spawn_keeping(cmd, banner, None, http, true);
        let logs = dev.log.all.clone().expect("every line kept");
        (dev, logs)
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
        let what = format!("run {run_id} to reach the condition");
        wait_until(Duration::from_secs(secs), &what, async || {
            let (status, run) = self.get(&format!("/runs/{run_id}")).await;
            if status == 200 && done(&run) { Ok(run) } else { Err(run.to_string()) }
        })
        .await
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
        if std::thread::panicking() {
            let title = format!("server {}", self.base);
            self.log.print(&title);
        }
    }
}

/// The `(action, actor, reason)` of each entry of a `GET /audit` answer.
pub fn audit_entries(audit: &Value) -> Vec<(&str, &str, &str)> {
    fn field<'a>(e: &'a Value, key: &str) -> &'a str {
        e[key].as_str().unwrap_or("")
    }
    let entries = audit["entries"].as_array().into_iter().flatten();
    entries.map(|e| (field(e, "action"), field(e, "actor"), field(e, "reason"))).collect()
}

/// Every cron run of `flow` (up to 1,000) as (scheduled instant, run detail), in
/// instant order; and how many runs the flow has in all.
pub async fn cron_runs(dev: &Dev, flow: &str) -> (Vec<(chrono::DateTime<chrono::Utc>, Value)>, usize) {
    let (code, list) = dev.get(&format!("/runs?flow={flow}&limit=1000")).await;
    assert_eq!(code, 200, "{list}");
    let runs = list["runs"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for run in &runs {
        let (_, detail) = dev.get(&format!("/runs/{}", run["run_id"].as_str().unwrap_or(""))).await;
        let key = detail["idempotency_key"].as_str().map(madeira_core::keys::RunKey::parse);
        if let Some(tick) = key.and_then(|k| k.cron_tick()) {
            out.push((tick, detail));
        }
    }
    out.sort_by_key(|(tick, _)| *tick);
    (out, runs.len())
}

/// The most of `spans` (start, end) open at one instant; at equal instants an
/// end comes before a start (a permit handed over is not two at once).
pub fn max_overlap(spans: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = spans.iter().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    edges.sort();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        open += d;
        most = most.max(open);
    }
    most as usize
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
    let pid = child.id();
    let what = format!("pid {pid} to exit");
    wait_until(Duration::from_secs(secs), &what, async || child.try_wait().expect("wait for the child")).await
}

/// `madeira dev --config FILE --log-level debug` with `env`, keeping every stderr
/// line (to check what the server logged).
pub fn start_logged(
    dir: &Path,
    config: &Path,
    env: &[(&str, &str)],
) -> (Dev, std::sync::Arc<std::sync::Mutex<String>>) {
    let mut cmd = Command::new(BIN);
    cmd.args(["dev", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log-level", "debug", "--data"])
        .arg(dir.join("data"))
        .arg("--config")
        .arg(config)
        .envs(env.iter().copied())
        .env_remove("RUST_LOG");
    Dev::spawn_logged(cmd, "madeira dev: API on ", client(None))
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
                // The job's own duration (`job_time`), not a wait.
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

/// Two `madeira serve` replicas, `r1` and `r2` (lease 2 s, one admin token their
/// clients carry), on a fresh PostgreSQL database; `extra` is appended to their
/// config and `env` to their environment. `None` (the test skips) without
/// PostgreSQL outside CI. Fields drop in order: the replicas stop before the
/// database is dropped, so keep the whole value and borrow `r1`/`r2`.
pub struct PgReplicas {
    pub r1: Dev,
    pub r2: Dev,
    pub _db: madeira_store::testing::PgTestDb,
    pub dir: tempfile::TempDir,
}

/// The admin token of `PgReplicas`.
pub const REPLICA_TOKEN: &str = "pg-replicas-admin-token-0123456789";

pub async fn pg_replicas(extra: &str, env: &[(&str, &str)]) -> Option<PgReplicas> {
    let db = madeira_store::testing::PgTestDb::create().await.expect("PostgreSQL test database")?;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("madeira.yaml");
    let text = format!(
        "http: 127.0.0.1:0\nstore: {}\nlease: 2s\nauth:\n  tokens:\n    - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n{extra}",
        db.url
    );
    std::fs::write(&config, text).expect("write config");
    let serve = |id: &str| {
        let mut all = vec![("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", REPLICA_TOKEN)];
        all.extend_from_slice(env);
        Dev::serve(&config, &all, Some(REPLICA_TOKEN))
    };
    let (r1, r2) = (serve("r1"), serve("r2"));
    Some(PgReplicas { r1, r2, _db: db, dir })
}

/// Sorts `latencies` (milliseconds), prints `what`'s p50, p99 and max over them
/// (for the note: `--nocapture`), and returns the p99.
pub fn latency_report(what: &str, latencies: &mut [i64]) -> i64 {
    assert!(!latencies.is_empty(), "no latencies measured for {what}");
    latencies.sort_unstable();
    let p = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    eprintln!(
        "{what} over {} samples: p50 {} ms, p99 {} ms, max {} ms",
        latencies.len(),
        p(0.5),
        p(0.99),
        latencies[latencies.len() - 1]
    );
    p(0.99)
}
