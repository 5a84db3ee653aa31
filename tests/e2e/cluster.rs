//! Cluster-wide duties of `madeira serve` replicas on one PostgreSQL database (a
//! fresh one per test): every replica schedules cron triggers, yet each tick makes
//! one run, also while one replica is killed; failures on several replicas make one
//! alert, sent once, and alerts keep flowing after a replica is killed with kill -9;
//! trigger rate limits and the event cache are shared through Redis, and without
//! Redis each replica limits on its own while the store still deduplicates; a run
//! held by one replica reaches a sidecar connected to another; a delivery pending on
//! a killed alert leader is sent by the next one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use chrono::{DateTime, Utc};
use madeira_store::testing::PgTestDb;
use serde_json::{Value, json};

use crate::forwarding::{Redis, free_port};
use crate::support::Dev;

const ADMIN: &str = "cluster-admin-token-0123456789";

fn config(dir: &Path, store: &str, extra: &str) -> PathBuf {
    let path = dir.join("madeira.yaml");
    let text = format!(
        "http: 127.0.0.1:0\nstore: {store}\nlease: 3s\nauth:\n  tokens:\n    \
         - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n{extra}"
    );
    std::fs::write(&path, text).expect("write config");
    path
}

fn replica(config: &Path, id: &str) -> Dev {
    Dev::serve(config, &[("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", ADMIN)], Some(ADMIN))
}

/// The scheduled instant of every cron run of `flow`, sorted; and how many runs
/// the flow has in all.
async fn ticks(dev: &Dev, flow: &str) -> (Vec<DateTime<Utc>>, usize) {
    let (code, list) = dev.get(&format!("/runs?flow={flow}&limit=1000")).await;
    assert_eq!(code, 200, "{list}");
    let runs = list["runs"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for run in &runs {
        let (_, detail) = dev.get(&format!("/runs/{}", run["run_id"].as_str().unwrap_or(""))).await;
        if let Some(t) = detail["idempotency_key"].as_str().and_then(madeira_core::schedule::tick_of_key) {
            out.push(t);
        }
    }
    out.sort();
    (out, runs.len())
}

async fn wait_ticks(dev: &Dev, flow: &str, n: usize) -> (Vec<DateTime<Utc>>, usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = ticks(dev, flow).await;
        if seen.0.len() >= n {
            return seen;
        }
        assert!(Instant::now() < deadline, "{flow}: only {} cron runs after 30 s", seen.0.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn assert_once_each_second(ticks: &[DateTime<Utc>], runs: usize) {
    let unique: BTreeSet<_> = ticks.iter().collect();
    assert_eq!(unique.len(), ticks.len(), "a tick made two runs: {ticks:?}");
    assert_eq!(runs, ticks.len(), "every run of the flow is a cron run");
    for pair in ticks.windows(2) {
        assert_eq!((pair[1] - pair[0]).num_milliseconds(), 1000, "a tick was missed: {ticks:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_fire_each_cron_tick_once_even_when_one_dies() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &db.url, "");
    let mut r1 = replica(&config, "r1");
    let r2 = replica(&config, "r2");
    let r3 = replica(&config, "r3");
    r1.put_flow(
        "flow: heartbeat\ntriggers:\n  - cron: \"* * * * * *\"\n    misfire: skip\n\
         nodes:\n  a: {run: {builtin: noop}}\n",
    )
    .await;

    let (before, runs) = wait_ticks(&r2, "heartbeat", 5).await;
    assert_once_each_second(&before, runs);

    r1.kill9();
    let (after, runs) = wait_ticks(&r3, "heartbeat", before.len() + 5).await;
    assert_once_each_second(&after, runs);

    // Every run of those ticks finishes, including any r1 created just before it
    // died (taken over once its lease ran out).
    let last = after.last().copied();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, list) = r2.get("/runs?flow=heartbeat&limit=1000").await;
        let mut open = Vec::new();
        for run in list["runs"].as_array().into_iter().flatten() {
            let (_, detail) = r2.get(&format!("/runs/{}", run["run_id"].as_str().unwrap_or(""))).await;
            let tick = detail["idempotency_key"].as_str().and_then(madeira_core::schedule::tick_of_key);
            if tick <= last && detail["status"] != "SUCCESS" {
                open.push(detail);
            }
        }
        if open.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "runs left unfinished: {open:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop((r2, r3));
    drop(db);
}

/// A webhook receiver keeping each posted body.
async fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let hits: Arc<Mutex<Vec<Value>>> = Arc::default();
    let app = Router::new()
        .fallback(|State(hits): State<Arc<Mutex<Vec<Value>>>>, body: Bytes| async move {
            hits.lock().expect("hits").push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            axum::Json(json!({"ok": true}))
        })
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("{base}/hook"), hits)
}

/// Distinct alert ids among `alerts` (a delivery may be sent again; an alert is one).
fn distinct(alerts: &[Value]) -> usize {
    alerts.iter().filter_map(|a| a["id"].as_str()).collect::<BTreeSet<_>>().len()
}

/// The firing alerts the receiver got for `flow`.
fn firing_for(hits: &Mutex<Vec<Value>>, flow: &str) -> Vec<Value> {
    let hits = hits.lock().expect("hits");
    hits.iter()
        .filter(|body| body["kind"] == "firing")
        .flat_map(|body| body["alerts"].as_array().cloned().unwrap_or_default())
        .filter(|alert| alert["flow"] == flow)
        .collect()
}

async fn wait_firing(hits: &Mutex<Vec<Value>>, flow: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let firing = firing_for(hits, flow);
        if !firing.is_empty() {
            return firing;
        }
        assert!(Instant::now() < deadline, "no alert for {flow} within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn failing(flow: &str) -> String {
    format!("flow: {flow}\nnodes:\n  pay: {{run: {{builtin: fail, message: bank refused}}}}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_on_two_replicas_make_one_alert_and_alerts_survive_kill_9() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let (hook, hits) = receiver().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let alerts = format!(
        "alerts:\n  group_wait: 2s\n  channels:\n    - {{name: hook, type: webhook, url: '{hook}'}}\n"
    );
    let config = config(dir.path(), &db.url, &alerts);
    let mut r1 = replica(&config, "r1");
    let r2 = replica(&config, "r2");
    for flow in ["settle", "later", "after-kill"] {
        r1.put_flow(&failing(flow)).await;
    }

    let mut runs = Vec::new();
    for target in [&r1, &r2, &r1, &r2] {
        runs.push(target.trigger("settle", json!({})).await);
    }
    for id in &runs {
        assert_eq!(r2.finished(id).await["status"], "FAILED");
    }
    let first = wait_firing(&hits, "settle").await;
    assert_eq!(first[0]["count"], 4, "one alert counts the failures of both replicas: {first:?}");
    let counted: BTreeSet<_> =
        first[0]["runs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert_eq!(counted.len(), 4, "{first:?}");

    // A later failure's alert comes a group_wait after it; a second alert for
    // `settle` from the other replica would have come before.
    let later = r2.trigger("later", json!({})).await;
    assert_eq!(r2.finished(&later).await["status"], "FAILED");
    wait_firing(&hits, "later").await;
    assert_eq!(distinct(&firing_for(&hits, "settle")), 1, "`settle` made more than one alert");

    // Whichever replica was aggregating, the survivor sends the next alert.
    r1.kill9();
    let orphan = r2.trigger("after-kill", json!({})).await;
    assert_eq!(r2.finished(&orphan).await["status"], "FAILED");
    let after = wait_firing(&hits, "after-kill").await;
    assert_eq!(distinct(&after), 1);
    assert_eq!(after[0]["runs"], json!([orphan]));
    assert_eq!(distinct(&firing_for(&hits, "settle")), 1, "the survivor made a second `settle` alert");
    drop(r2);
    drop(db);
}

/// Status codes of manual triggers of `flow` through `dev`.
async fn trigger_codes(dev: &Dev, flow: &str, n: usize) -> Vec<u16> {
    let mut codes = Vec::new();
    for _ in 0..n {
        codes.push(dev.post(&format!("/flows/{flow}/runs"), json!({"params": {}}), &[]).await.0);
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limits_and_event_dedup_are_shared_through_redis_and_degrade_without_it() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let port = free_port();
    let Some(redis) = Redis::start(port) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &db.url, &format!("redis: redis://127.0.0.1:{port}\n"));
    let r1 = replica(&config, "r1");
    let r2 = replica(&config, "r2");
    r1.put_flow("flow: manual\nrate_limit: 4/m\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    r1.put_flow(
        "flow: ingest\nrate_limit: 2/m\ntriggers:\n  - event: order.paid\nnodes:\n  a: {run: {builtin: noop}}\n",
    )
    .await;

    // One budget for the cluster: 4 a minute in all, not 4 per replica.
    assert_eq!(trigger_codes(&r1, "manual", 2).await, [201, 201]);
    assert_eq!(trigger_codes(&r2, "manual", 2).await, [201, 201]);
    assert_eq!(trigger_codes(&r1, "manual", 1).await, [429]);
    assert_eq!(trigger_codes(&r2, "manual", 1).await, [429]);

    // A redelivered event is answered from the cache on either replica: the same
    // run, and no slot of the 2-a-minute budget taken.
    let event = |id: &str| json!({"type": "order.paid", "id": id, "payload": {"order": id}});
    let (code, first) = r1.post("/events", event("A"), &[]).await;
    assert_eq!(code, 200, "{first}");
    for target in [&r2, &r1, &r2, &r1, &r2] {
        let (code, again) = target.post("/events", event("A"), &[]).await;
        assert_eq!((code, &again["runs"]), (200, &first["runs"]), "a redelivery is the same run");
    }
    assert_eq!(r2.post("/events", event("B"), &[]).await.0, 200, "the second slot is still free");
    assert_eq!(r1.post("/events", event("C"), &[]).await.0, 429, "two new events a minute");

    // Without Redis each replica limits on its own (it never lets more through
    // than its own budget) and the store still deduplicates events.
    drop(redis);
    assert_eq!(trigger_codes(&r1, "manual", 5).await, [201, 201, 201, 201, 429]);
    let (code, again) = r2.post("/events", event("A"), &[]).await;
    assert_eq!((code, &again["runs"]), (200, &first["runs"]), "the runs table still knows event A");
    drop((r1, r2));
    drop(db);
}

const BILLING: &str = "cluster-billing-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_reach_a_sidecar_connected_to_another_replica() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let port = free_port();
    let Some(redis) = Redis::start(port) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = format!("redis: redis://127.0.0.1:{port}\ngrpc: 127.0.0.1:0\n");
    let path = dir.path().join("madeira.yaml");
    std::fs::write(
        &path,
        format!(
            "http: 127.0.0.1:0\nstore: {}\nlease: 3s\n{extra}auth:\n  tokens:\n    \
             - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n  sidecar_tokens:\n    \
             - {{group: billing, token_env: MADEIRA_T_BILLING}}\n",
            db.url
        ),
    )
    .expect("write config");
    let env = [("MADEIRA_T_ADMIN", ADMIN), ("MADEIRA_T_BILLING", BILLING)];
    let serve = |id: &'static str| {
        let mut env = env.to_vec();
        env.push(("MADEIRA_REPLICA_ID", id));
        Dev::serve_with(&path, &env, true, crate::support::client(Some(ADMIN)))
    };
    let (r1, r2) = (serve("r1"), serve("r2"));

    // One sidecar, connected to r2 only; each attempt appends its key to a file.
    let ledger = dir.path().join("ledger.txt");
    let sidecar_config = dir.path().join("sidecar.yaml");
    std::fs::write(
        &sidecar_config,
        format!(
            "name: s1\ngroup: billing\ncontrol_plane: http://{}\ntoken_env: MADEIRA_T_BILLING\nspool_dir: {}\n\
             jobs:\n  stamp:\n    command: [\"/bin/sh\", \"-c\", \"echo $MADEIRA_IDEMPOTENCY_KEY >> {}\"]\n",
            r2.grpc,
            dir.path().join("spool").display(),
            ledger.display()
        ),
    )
    .expect("write sidecar config");
    let _sidecar =
        crate::sidecar::SidecarProc::spawn_with_env(sidecar_config, &[("MADEIRA_T_BILLING", BILLING)]);

    // r1 has no sidecar of its own, but its fleet view shows r2's.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, view) = r1.get("/sidecars").await;
        assert_eq!(code, 200, "{view}");
        let here = view["sidecars"].as_array().map_or(0, Vec::len);
        assert_eq!((view["replica"].as_str(), here), (Some("r1"), 0), "{view}");
        let seen_at = view["replicas"][0]["seen_at"].clone();
        if view["replicas"]
            == json!([{"replica": "r2", "group": "billing", "jobs": ["stamp"], "seen_at": seen_at}])
        {
            break;
        }
        assert!(Instant::now() < deadline, "r2's sidecar never showed in r1's view: {view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    r1.put_flow(
        "flow: stamped\nnodes:\n  prepare: {run: {builtin: noop}}\n  \
         stamp: {needs: [prepare], run: {sidecar: {group: billing, job: stamp}}}\n",
    )
    .await;
    let mut runs = Vec::new();
    for _ in 0..6 {
        runs.push(r1.trigger("stamped", json!({})).await);
    }
    for id in &runs {
        let run = r1.wait_run(id, 60, |r| r["status"] == "SUCCESS" || r["status"] == "FAILED").await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
    }
    let lines = std::fs::read_to_string(&ledger).expect("ledger");
    let mut keys: Vec<&str> = lines.lines().collect();
    assert_eq!(keys.len(), 6, "each run's sidecar node ran once: {lines}");
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 6, "no attempt ran twice: {lines}");
    drop((r1, r2, redis));
    drop(db);
}

/// The replica holding the cluster's `alerts` lease, read from the store.
fn alert_leader(db_url: &str) -> Option<String> {
    let out = std::process::Command::new("psql")
        .args([db_url, "-Atc", "SELECT holder FROM leaders WHERE role = 'alerts'"])
        .output()
        .expect("run psql");
    let holder = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!holder.is_empty()).then_some(holder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delivery_pending_on_a_killed_alert_leader_is_sent_by_the_next() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    // A receiver that answers 503 until told otherwise, counting what it refused.
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let hits: Arc<Mutex<Vec<Value>>> = Arc::default();
    let app = Router::new().fallback({
        let (refused, down, hits) = (refused.clone(), down.clone(), hits.clone());
        move |body: Bytes| async move {
            if down.load(std::sync::atomic::Ordering::SeqCst) {
                refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!("down")));
            }
            hits.lock().expect("hits").push(serde_json::from_slice(&body).unwrap_or(Value::Null));
            (axum::http::StatusCode::OK, axum::Json(json!({"ok": true})))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let hook = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let dir = tempfile::tempdir().expect("tempdir");
    let alerts = format!(
        "alerts:\n  group_wait: 1s\n  channels:\n    - {{name: hook, type: webhook, url: '{hook}'}}\n"
    );
    let config = config(dir.path(), &db.url, &alerts);
    let mut replicas = vec![("r1", replica(&config, "r1")), ("r2", replica(&config, "r2"))];
    replicas[0].1.put_flow(&failing("ledger")).await;

    let deadline = Instant::now() + Duration::from_secs(20);
    let leader = loop {
        if let Some(leader) = alert_leader(&db.url) {
            break leader;
        }
        assert!(Instant::now() < deadline, "no replica took the alerts lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let run = replicas[1].1.trigger("ledger", json!({})).await;
    assert_eq!(replicas[1].1.finished(&run).await["status"], "FAILED");
    crate::sidecar::wait_for("the leader's first refused delivery", 20, || {
        refused.load(std::sync::atomic::Ordering::SeqCst) >= 1
    })
    .await;

    // Kill the leader while its delivery waits for a retry; the receiver recovers.
    let index = replicas.iter().position(|(id, _)| *id == leader).expect("leader is a replica");
    let (_, mut dead) = replicas.remove(index);
    dead.kill9();
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    let (survivor, _) = replicas[0];
    let delivered = wait_firing(&hits, "ledger").await;
    assert_eq!(delivered[0]["runs"], json!([run]));
    assert_eq!(alert_leader(&db.url).as_deref(), Some(survivor), "the survivor leads now");
    drop(replicas);
    drop(db);
}
