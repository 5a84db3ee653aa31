//! Exactly once when replicas disagree (issue 34): two `madeira serve` replicas
//! on one PostgreSQL database (a fresh one per test), a load of runs whose job
//! is an HTTP request to a witness that counts executions per idempotency key.
//!
//! - A replica cut off from PostgreSQL by a TCP proxy that stops passing bytes
//!   (no reset) for several leases, then resumes: only attempts in flight on it at
//!   the cut may run again (on the replica that took them over); no run created
//!   after the heal runs twice (a fencing refusal for the lost runs used to throw
//!   the whole group commit away and place every run's attempt anew).
//! - The lease holder frozen (SIGSTOP) past its lease, then thawed: the other
//!   replica finishes its runs; the thawed one neither runs them again nor takes
//!   the finished runs back (their owner stays).
//! - A replica whose clock is an hour ahead (libfaketime; skipped without it)
//!   never takes a live holder's runs.
//! - A replica cut off while its sidecar runs attempts: the replica that takes
//!   the runs over (with a sidecar of the same group of its own) does not place
//!   them again; the cut-off replica relays their results through the store
//!   after the heal, and every job ran exactly once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use madeira_store::testing::PgTestDb;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::support::{Arrivals, Dev, hold_for, wait_for, wait_until, witness_receiver};

const ADMIN: &str = "split-brain-admin-token-0123456789";

type Witness = Arrivals;

/// How long the job of `key` lasts: `job`, or with `spread`, 200 ms to 6 s by key
/// (so that attempts in flight at a fault end while the replica has new work).
fn job_time(key: &str, job: Duration, spread: bool) -> Duration {
    if !spread {
        return job;
    }
    let h = key.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    Duration::from_millis(200 + h % 5_800)
}

/// The job: records the execution, then answers after `job_time`.
async fn witness(job: Duration) -> (String, Witness) {
    witness_with(job, false).await
}

async fn witness_with(job: Duration, spread: bool) -> (String, Witness) {
    witness_receiver(move |key| job_time(key, job, spread)).await
}

/// A TCP proxy to `upstream` that can stop passing bytes (both ways, and new
/// connections are not connected onward) without closing anything: what a
/// network that drops packets looks like to both ends.
struct Proxy {
    port: u16,
    pass: watch::Sender<bool>,
}

impl Proxy {
    async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let (pass, _) = watch::channel(true);
        let gate = pass.clone();
        tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let (upstream, mut open) = (upstream.clone(), gate.subscribe());
                tokio::spawn(async move {
                    let _ = open.wait_for(|p| *p).await;
                    let Ok(up) = TcpStream::connect(&upstream).await else { return };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::spawn(pump(dr, uw, open.clone()));
                    pump(ur, dw, open).await;
                });
            }
        });
        Proxy { port, pass }
    }

    fn cut(&self) {
        self.pass.send_replace(false);
    }

    fn heal(&self) {
        self.pass.send_replace(true);
    }
}

/// Copies `from` to `to`, holding every chunk while the proxy is cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut open: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if open.wait_for(|p| *p).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn config(dir: &Path, name: &str, store: &str) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    let text = format!(
        "http: 127.0.0.1:0\nhttp_executor: {{allow_hosts: [127.0.0.1]}}\nstore: {store}\nlease: 1s\nauth:\n  tokens:\n    \
         - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n"
    );
    std::fs::write(&path, text).expect("write config");
    path
}

fn replica(config: &Path, id: &str, env: &[(&str, &str)]) -> Dev {
    let mut all = vec![("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", ADMIN)];
    all.extend_from_slice(env);
    Dev::serve(config, &all, Some(ADMIN))
}

fn flow(url: &str) -> String {
    format!("flow: settle\nnodes:\n  pay: {{run: {{http: {{url: '{url}', method: POST}}}}}}\n")
}

/// Triggers a run, trying again while the replica answers that its store is out
/// of reach (right after the heal its connections may still be recovering).
async fn trigger_soon(dev: &Dev, params: serde_json::Value) -> String {
    wait_until(Duration::from_secs(30), "a trigger answered 201", async || {
        let (status, body) = dev.post("/flows/settle/runs", json!({"params": params}), &[]).await;
        if status == 201 {
            Ok(body["run_id"].as_str().expect("run_id").to_string())
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await
}

/// Waits until every run in `runs` finished SUCCESS (seen through `dev`).
async fn all_succeed(dev: &Dev, runs: &[String]) {
    for run_id in runs {
        let run = dev.wait_run(run_id, 60, |r| r["status"] != "RUNNING" && r["status"] != "QUEUED").await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
    }
}

/// The run id of an idempotency key (`<run>:<node>:v<n>`).
fn run_of(key: &str) -> &str {
    key.split(':').next().unwrap_or(key)
}

/// Keys executed more than once.
fn repeated(w: &Witness) -> HashMap<String, Vec<Instant>> {
    w.lock().expect("lock").iter().filter(|(_, v)| v.len() > 1).map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Keys whose execution had begun and not ended at `at`.
fn in_flight_at(w: &Witness, at: Instant, job: Duration, spread: bool) -> Vec<String> {
    let seen = w.lock().expect("lock");
    seen.iter()
        .filter(|(k, v)| v[0] <= at && v[0] + job_time(k, job, spread) > at)
        .map(|(k, _)| k.clone())
        .collect()
}

async fn owner(db: &PgTestDb, run_id: &str) -> Option<String> {
    let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
    let owner: Option<String> = sqlx::query_scalar("SELECT owner FROM runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(&pool)
        .await
        .expect("owner");
    pool.close().await;
    owner
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_cut_off_from_postgres_runs_nothing_twice_after_the_heal() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let job = Duration::from_millis(300);
    let (url, witness) = witness_with(job, true).await;
    let upstream = db.url.split('@').nth(1).and_then(|r| r.split('/').next()).expect("host:port").to_string();
    let proxy = Proxy::start(upstream.clone()).await;
    let cut_url = db.url.replacen(&upstream, &format!("127.0.0.1:{}", proxy.port), 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let a = replica(&config(dir.path(), "a", &cut_url), "cp-a", &[]);
    let b = replica(&config(dir.path(), "b", &db.url), "cp-b", &[]);
    b.put_flow(&flow(&url)).await;

    // 30 runs alternating replicas (10/s), the cut for 3 leases (B alone takes
    // runs meanwhile: 20), then 30 more alternating after the heal. Jobs last
    // 0.2-6 s: attempts in flight on A at the cut end after the heal, among A's
    // new runs' ends (their refused commit used to cost those too).
    let mut before = Vec::new();
    let mut pace = tokio::time::interval(Duration::from_millis(100));
    for i in 0..30 {
        pace.tick().await;
        before.push(if i % 2 == 0 { &a } else { &b }.trigger("settle", json!({"i": i})).await);
    }
    let cut_at = Instant::now();
    proxy.cut();
    let mut during = Vec::new();
    for i in 0..20 {
        pace.tick().await;
        during.push(b.trigger("settle", json!({"d": i})).await);
    }
    // The cut lasts 3 leases (1 s each): a real outage's length is the point.
    tokio::time::sleep_until((cut_at + Duration::from_secs(3)).into()).await;
    proxy.heal();
    let mut after = Vec::new();
    for i in 0..30 {
        pace.tick().await;
        after.push(trigger_soon(if i % 2 == 0 { &a } else { &b }, json!({"h": i})).await);
    }
    all_succeed(&b, &before).await;
    all_succeed(&b, &during).await;
    all_succeed(&a, &after).await;

    let in_flight = in_flight_at(&witness, cut_at, job, true);
    let twice = repeated(&witness);
    eprintln!(
        "partition: {} runs, {} in flight at the cut, {} ran twice: {:?}",
        before.len() + during.len() + after.len(),
        in_flight.len(),
        twice.len(),
        twice.keys().collect::<Vec<_>>()
    );
    let executed = witness.lock().expect("lock").len();
    assert_eq!(executed, before.len() + during.len() + after.len(), "every run's job ran");
    for (key, times) in &twice {
        assert!(times.len() == 2, "{key} ran {} times", times.len());
        assert!(in_flight.contains(key), "{key} ran twice but was not in flight at the cut");
        assert!(!after.iter().any(|r| r == run_of(key)), "{key}, created after the heal, ran twice");
    }
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thawed_lease_holder_neither_reruns_nor_retakes_what_it_lost() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let job = Duration::from_millis(1500);
    let (url, witness) = witness(job).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut a = replica(&config(dir.path(), "a", &db.url), "cp-a", &[]);
    let b = replica(&config(dir.path(), "b", &db.url), "cp-b", &[]);
    a.put_flow(&flow(&url)).await;

    // 12 runs on A; frozen once their jobs are in flight.
    let mut held = Vec::new();
    for i in 0..12 {
        held.push(a.trigger("settle", json!({"i": i})).await);
    }
    wait_for("the jobs to start", 20, || witness.lock().expect("lock").len() >= held.len()).await;
    let frozen_at = Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(a.child.id() as i32, libc::SIGSTOP) };
    all_succeed(&b, &held).await;
    let owners: Vec<Option<String>> = futures::future::join_all(held.iter().map(|r| owner(&db, r))).await;
    assert!(owners.iter().all(|o| o.as_deref() == Some("cp-b")), "B took the runs over: {owners:?}");
    // Frozen well past its lease (1 s), as a stuck process would be.
    tokio::time::sleep_until((frozen_at + Duration::from_secs(6)).into()).await;
    // SAFETY: as above.
    unsafe { libc::kill(a.child.id() as i32, libc::SIGCONT) };

    // A works again (a run on it finishes), and has had time to act on what it lost.
    let fresh = a.trigger("settle", json!({"after": true})).await;
    all_succeed(&a, std::slice::from_ref(&fresh)).await;
    hold_for(Duration::from_secs(4), "no job running a third time", async || {
        repeated(&witness).values().all(|t| t.len() <= 2)
    })
    .await;
    let twice = repeated(&witness);
    eprintln!(
        "freeze: {} runs, {} in flight at the freeze, {} ran twice",
        held.len() + 1,
        held.len(),
        twice.len()
    );
    for (key, times) in &twice {
        // A frozen mid-request cannot report: B runs those again, once.
        assert!(times.len() == 2 && times[0] < frozen_at, "{key}: {times:?}");
        assert_ne!(run_of(key), fresh, "a run after the thaw ran twice");
    }
    let owners: Vec<Option<String>> = futures::future::join_all(held.iter().map(|r| owner(&db, r))).await;
    assert!(owners.iter().all(|o| o.as_deref() == Some("cp-b")), "a finished run changed owner: {owners:?}");
    a.kill9();
    drop(b);
}

/// libfaketime's preload library, when installed (`apt-get install faketime`).
fn faketime() -> Option<&'static str> {
    ["/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_an_hour_ahead_takes_no_live_run() {
    let Some(lib) = faketime() else {
        eprintln!("libfaketime not installed; skipped");
        return;
    };
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let job = Duration::from_millis(2500);
    let (url, witness) = witness(job).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let b = replica(&config(dir.path(), "b", &db.url), "cp-b", &[]);
    b.put_flow(&flow(&url)).await;
    // Its wall clock an hour ahead; its monotonic clock left alone.
    let skewed = [("LD_PRELOAD", lib), ("FAKETIME", "+1h"), ("DONT_FAKE_MONOTONIC", "1")];
    let a = replica(&config(dir.path(), "a", &db.url), "cp-a", &skewed);
    let (_, health) = a.get("/runs?limit=1").await;
    assert!(health.is_object(), "the skewed replica serves: {health}");

    // 16 runs on the holder, each in flight 2.5 s (several lease ticks of the
    // skewed replica, which took them over every tick before the fix).
    let mut runs = Vec::new();
    for i in 0..16 {
        runs.push(b.trigger("settle", json!({"i": i})).await);
    }
    // And one held by the skewed replica (its clock shows in the run's creation
    // time): its lease is the database's too, so B does not take it either.
    let ahead = a.trigger("settle", json!({"ahead": true})).await;
    let (_, run) = a.get(&format!("/runs/{ahead}")).await;
    let created = run["created_at"].as_str().and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    let skew = created.map(|c| c.timestamp_millis() - chrono::Utc::now().timestamp_millis());
    assert!(skew.is_some_and(|s| s > 50 * 60 * 1000), "the replica's clock is not ahead: {run}");
    all_succeed(&b, &runs).await;
    all_succeed(&b, std::slice::from_ref(&ahead)).await;
    let twice = repeated(&witness);
    eprintln!("skew: {} runs, {} in flight, {} ran twice", runs.len() + 1, runs.len() + 1, twice.len());
    assert!(twice.is_empty(), "a live holder's runs were taken over: {twice:?}");
    let owners: Vec<Option<String>> = futures::future::join_all(runs.iter().map(|r| owner(&db, r))).await;
    assert!(owners.iter().all(|o| o.as_deref() == Some("cp-b")), "owners: {owners:?}");
    assert_eq!(owner(&db, &ahead).await.as_deref(), Some("cp-a"), "the skewed replica's run was taken");
    drop((a, b));
}

const BILLING: &str = "split-brain-billing-token-0123456789";

/// A config with a sidecar link (`grpc`) for group `billing`.
fn config_with_link(dir: &Path, name: &str, store: &str) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    let text = format!(
        "http: 127.0.0.1:0\ngrpc: 127.0.0.1:0\nstore: {store}\nlease: 1s\nauth:\n  tokens:\n    \
         - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n  sidecar_tokens:\n    \
         - {{group: billing, token_env: MADEIRA_T_BILLING}}\n"
    );
    std::fs::write(&path, text).expect("write config");
    path
}

/// A sidecar `name` of group `billing` on `grpc` whose job `stamp` appends its
/// idempotency key to `ledger`, then lasts 8 s (in flight through the cut).
fn stamping_sidecar(dir: &Path, name: &str, grpc: &str, ledger: &Path) -> crate::sidecar::SidecarProc {
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &config,
        format!(
            "name: {name}\ngroup: billing\ncontrol_plane: http://{grpc}\ntoken_env: MADEIRA_T_BILLING\n\
             spool_dir: {}\njobs:\n  stamp:\n    command: [\"/bin/sh\", \"-c\", \"echo $MADEIRA_IDEMPOTENCY_KEY >> {}; sleep 8\"]\n",
            dir.join(format!("spool-{name}")).display(),
            ledger.display()
        ),
    )
    .expect("write sidecar config");
    crate::sidecar::SidecarProc::spawn_with_env(config, &[("MADEIRA_T_BILLING", BILLING)])
}

fn ledger_lines(ledger: &Path) -> Vec<String> {
    std::fs::read_to_string(ledger).unwrap_or_default().lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sidecar_attempt_on_a_cut_off_replica_is_relayed_not_placed_again() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let upstream = db.url.split('@').nth(1).and_then(|r| r.split('/').next()).expect("host:port").to_string();
    let proxy = Proxy::start(upstream.clone()).await;
    let cut_url = db.url.replacen(&upstream, &format!("127.0.0.1:{}", proxy.port), 1);
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [("MADEIRA_T_BILLING", BILLING)];
    let serve = |config: PathBuf, id: &str| {
        let all = [("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", ADMIN), env[0]];
        Dev::serve_with(&config, &all, true, crate::support::client(Some(ADMIN)))
    };
    let a = serve(config_with_link(dir.path(), "a", &cut_url), "cp-a");
    let b = serve(config_with_link(dir.path(), "b", &db.url), "cp-b");
    let ledger = dir.path().join("ledger.txt");
    // One sidecar per replica, same group: B could place A's attempts on its own.
    let _sa = stamping_sidecar(dir.path(), "sa", &a.grpc, &ledger);
    let _sb = stamping_sidecar(dir.path(), "sb", &b.grpc, &ledger);
    a.put_flow("flow: settle\nnodes:\n  pay: {run: {sidecar: {group: billing, job: stamp}}}\n").await;
    for dev in [&a, &b] {
        wait_until(Duration::from_secs(20), "each replica's sidecar", async || {
            dev.get("/sidecars").await.1["sidecars"].as_array().is_some_and(|s| !s.is_empty())
        })
        .await;
    }

    // Six runs on A, their jobs in flight on A's sidecar, then A cut off for 4
    // leases: B takes the runs over while their jobs finish and report to A.
    let mut runs = Vec::new();
    for i in 0..6 {
        runs.push(a.trigger("settle", json!({"i": i})).await);
    }
    wait_until(Duration::from_secs(20), "the jobs to start", async || {
        ledger_lines(&ledger).len() >= runs.len()
    })
    .await;
    let cut_at = Instant::now();
    proxy.cut();
    wait_until(Duration::from_secs(20), "B to take the runs over", async || {
        let owners: Vec<Option<String>> = futures::future::join_all(runs.iter().map(|r| owner(&db, r))).await;
        if owners.iter().all(|o| o.as_deref() == Some("cp-b")) { Ok(()) } else { Err(format!("{owners:?}")) }
    })
    .await;
    // Cut on past the jobs' end (8 s from their start): their results reach A,
    // which cannot commit. A real outage's length is the point of the sleep.
    tokio::time::sleep_until((cut_at + Duration::from_secs(9)).into()).await;
    proxy.heal();

    for run_id in &runs {
        let run = b.wait_run(run_id, 90, |r| r["status"] != "RUNNING" && r["status"] != "QUEUED").await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
    }
    let lines = ledger_lines(&ledger);
    let mut unique = lines.clone();
    unique.sort();
    unique.dedup();
    eprintln!("relay: {} runs, {} executions", runs.len(), lines.len());
    assert_eq!(lines.len(), runs.len(), "a job ran twice: {lines:?}");
    assert_eq!(unique.len(), runs.len(), "every run's job ran once: {lines:?}");
    drop((a, b));
}
