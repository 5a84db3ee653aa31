//! Faults injected into the real binary, not reasoned about (issue 13): the disk
//! filling up mid-load and freed again, the store file deleted under a running
//! server, NUL bytes among concurrent good requests, PostgreSQL backends
//! terminated and MariaDB connections `KILL`ed mid-load. The rule checked each
//! time: nothing is answered 201 that is not stored, nothing good is refused
//! because of a bad neighbour, and the server tells (`503 store_unavailable`,
//! `/readyz`) and recovers by itself.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::join_all;
use madeira_store::testing::{MySqlTestDb, PgTestDb};
use serde_json::{Value, json};

use crate::support::{Dev, Tmpfs, wait_until};

/// POSTs a trigger; `(status, body, Retry-After)`.
async fn trigger(dev: &Dev, flow: &str, params: Value) -> (u16, Value, Option<String>) {
    let resp = dev
        .http
        .post(dev.url(&format!("/flows/{flow}/runs")))
        .json(&json!({"params": params}))
        .send()
        .await
        .expect("POST run");
    let status = resp.status().as_u16();
    let retry = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    (status, resp.json().await.unwrap_or(Value::Null), retry)
}

async fn readyz(dev: &Dev) -> u16 {
    dev.http.get(format!("{}/readyz", dev.base)).send().await.map_or(0, |r| r.status().as_u16())
}

async fn wait_readyz(dev: &Dev, want: u16, secs: u64) {
    let what = format!("/readyz to answer {want}");
    wait_until(Duration::from_secs(secs), &what, async || readyz(dev).await == want).await
}

const FLOW: &str =
    "flow: big\nnodes:\n  a: {run: {builtin: noop}}\n  b: {run: {builtin: noop}, needs: [a]}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_never_acknowledges_a_run_it_did_not_store_and_recovers_by_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(fs) = Tmpfs::mount(dir.path(), 24) else { return };
    let data = dir.path().join("data");
    let mut dev = Dev::start_in(&data);
    dev.put_flow(FLOW).await;
    let blob = "x".repeat(200_000);
    let mut answered: Vec<String> = Vec::new();
    let mut refused = 0;
    // Before, during (the disk full) and after (freed): every 201 is kept.
    for i in 0..4 {
        let (code, body, _) = trigger(&dev, "big", json!({"i": i})).await;
        assert_eq!(code, 201, "{body}");
        answered.push(body["run_id"].as_str().expect("run_id").to_string());
    }
    let filler = fs.fill();
    let load = (0..30).map(|i| trigger(&dev, "big", json!({"i": 100 + i, "blob": blob})));
    for (code, body, retry) in join_all(load).await {
        match code {
            201 => answered.push(body["run_id"].as_str().expect("run_id").to_string()),
            503 => {
                assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
                assert!(retry.is_some(), "503 without Retry-After: {body}");
                refused += 1;
            }
            other => panic!("a trigger on a full disk answered {other}: {body}"),
        }
    }
    assert!(refused > 0, "the disk was full, yet no trigger was refused");
    eprintln!("disk full: {} runs answered 201 so far, {refused} refused with 503", answered.len());
    wait_readyz(&dev, 503, 10).await;
    std::fs::remove_file(&filler).expect("free the disk");
    wait_readyz(&dev, 200, 15).await;
    for i in 0..4 {
        let (code, body, _) = trigger(&dev, "big", json!({"i": 200 + i, "blob": blob})).await;
        assert_eq!(code, 201, "after the disk was freed: {body}");
        answered.push(body["run_id"].as_str().expect("run_id").to_string());
    }
    for id in &answered {
        let run = dev.wait_run(id, 30, |r| r["status"] == "SUCCESS").await;
        assert_eq!(run["status"], "SUCCESS");
    }
    crate::support::sigterm_and_wait(&mut dev.child, 20).await;
    let dev = Dev::start_in(&data);
    for id in &answered {
        let (code, run) = dev.get(&format!("/runs/{id}")).await;
        assert_eq!(
            (code, &run["status"]),
            (200, &json!("SUCCESS")),
            "run {id} answered 201, after restart: {run}"
        );
    }
    let (_, listed) = dev.get("/runs?flow=big&limit=1000").await;
    let stored = listed["runs"].as_array().map_or(0, Vec::len);
    assert_eq!(stored, answered.len(), "runs stored vs answered 201 ({refused} refused with 503)");
}

#[tokio::test]
async fn a_deleted_store_file_stops_writes_with_503_and_not_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_in(dir.path());
    dev.put_flow(FLOW).await;
    let (code, body, _) = trigger(&dev, "big", json!({})).await;
    assert_eq!(code, 201, "{body}");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("madeira.db{suffix}")));
    }
    for _ in 0..3 {
        let (code, body, retry) = trigger(&dev, "big", json!({})).await;
        assert_eq!((code, &body["error"]["code"]), (503, &json!("store_unavailable")), "{body}");
        assert!(retry.is_some());
    }
    wait_readyz(&dev, 503, 10).await;
    let text = dev
        .http
        .get(format!("{}/readyz", dev.base))
        .send()
        .await
        .expect("readyz")
        .text()
        .await
        .expect("body");
    assert!(text.contains("was deleted"), "{text}");
}

/// 40 concurrent triggers, 4 of them with NUL in a param, and an event with NUL
/// in its id: the bad ones get 400 naming the field, every good one 201.
async fn nul_among_good_requests(dev: &Dev) {
    dev.put_flow(FLOW).await;
    let requests = (0..40).map(|i| {
        let params = match i % 10 {
            3 => json!({"note": format!("bad\u{0}{i}")}),
            _ => json!({"note": format!("good {i}")}),
        };
        async move { (i, trigger(dev, "big", params).await) }
    });
    let mut good = HashSet::new();
    for (i, (code, body, _)) in join_all(requests).await {
        if i % 10 == 3 {
            assert_eq!((code, &body["error"]["code"]), (400, &json!("bad_text")), "{body}");
            let message = body["error"]["message"].as_str().unwrap_or("");
            assert!(message.starts_with("params.note: contains the NUL"), "{message}");
        } else {
            assert_eq!(code, 201, "a good trigger next to a bad one: {body}");
            good.insert(body["run_id"].as_str().expect("run_id").to_string());
        }
    }
    assert_eq!(good.len(), 36);
    let (code, body) = dev.post("/events", json!({"type": "t", "id": "e\u{0}1", "payload": {}}), &[]).await;
    assert_eq!((code, &body["error"]["code"]), (400, &json!("bad_text")), "{body}");
    for id in &good {
        assert_eq!(dev.finished(id).await["status"], "SUCCESS");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nul_bytes_are_refused_by_name_and_never_fail_their_neighbours_on_sqlite() {
    let (_dir, dev) = Dev::start();
    nul_among_good_requests(&dev).await;
}

const ADMIN: &str = "faults-admin-token-0123456789";

/// A `madeira serve` config on `store` (PostgreSQL or MariaDB) with one admin token.
fn server_config(dir: &Path, store: &str) -> PathBuf {
    let path = dir.join("madeira.yaml");
    let text = format!(
        "http: 127.0.0.1:0\nstore: {store}\nauth:\n  tokens:\n    - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n"
    );
    std::fs::write(&path, text).expect("write config");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nul_bytes_are_refused_by_name_and_never_fail_their_neighbours_on_postgres() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::serve(&server_config(dir.path(), &db.url), &[("MADEIRA_T_ADMIN", ADMIN)], Some(ADMIN));
    nul_among_good_requests(&dev).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminated_postgres_backends_lose_nothing_duplicate_nothing_and_answer_no_500() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    terminated_backends(&db.url, kill_pg_backends).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mariadb_connections_lose_nothing_duplicate_nothing_and_answer_no_500() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    terminated_backends(&db.url, kill_mysql_connections).await;
}

/// Terminates every backend of the server's pool on database `db`; how many.
async fn kill_pg_backends(db: String) -> u64 {
    use sqlx::Connection;
    let mut conn =
        sqlx::PgConnection::connect(&madeira_store::testing::pg_admin_url()).await.expect("connect killer");
    let n: Vec<(bool,)> = sqlx::query_as(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = $1 AND application_name = 'madeira' AND pid <> pg_backend_pid()",
    )
    .bind(&db)
    .fetch_all(&mut conn)
    .await
    .expect("terminate backends");
    n.len() as u64
}

/// `KILL`s every connection to database `db` (the killer's own has none); how many.
async fn kill_mysql_connections(db: String) -> u64 {
    use sqlx::Connection;
    let mut conn = sqlx::MySqlConnection::connect(&madeira_store::testing::mysql_admin_url())
        .await
        .expect("connect killer");
    let ids: Vec<(u64,)> = sqlx::query_as(
        "SELECT CAST(id AS UNSIGNED) FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
    )
    .bind(&db)
    .fetch_all(&mut conn)
    .await
    .expect("list connections");
    let mut killed = 0;
    for (id,) in ids {
        // A connection may have closed since it was listed.
        if sqlx::query(&format!("KILL {id}")).execute(&mut conn).await.is_ok() {
            killed += 1;
        }
    }
    killed
}

/// Five waves of 20 triggers on a server over `store_url` while `kill` ends its
/// database connections every 400 ms: every trigger answers 201 or 503, every run
/// answered 201 finishes, and nothing else is stored.
async fn terminated_backends<F, Fut>(store_url: &str, kill: F)
where
    F: Fn(String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = u64> + Send,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::serve(&server_config(dir.path(), store_url), &[("MADEIRA_T_ADMIN", ADMIN)], Some(ADMIN));
    dev.put_flow(FLOW).await;
    let db_name = store_url.rsplit('/').next().expect("db name").split('?').next().expect("db").to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let killer = tokio::spawn(async move {
        let mut killed = 0u64;
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            killed += kill(db_name.clone()).await;
            // The fault's own rhythm: connections are killed every 400 ms under load.
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        killed
    });
    let mut answered = HashSet::new();
    let mut unavailable = 0;
    for wave in 0..5 {
        let load = (0..20).map(|i| trigger(&dev, "big", json!({"wave": wave, "i": i})));
        for (code, body, _) in join_all(load).await {
            match code {
                201 => assert!(answered.insert(body["run_id"].as_str().expect("run_id").to_string())),
                503 => unavailable += 1,
                other => panic!("a trigger while backends were terminated answered {other}: {body}"),
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let killed = killer.await.expect("killer");
    assert!(killed > 0, "no backend was terminated: the test tested nothing");
    eprintln!(
        "{} runs answered 201, {unavailable} answered 503, {killed} backends terminated",
        answered.len()
    );
    for id in &answered {
        let run = dev.wait_run(id, 60, |r| r["status"] == "SUCCESS").await;
        assert_eq!(run["status"], "SUCCESS");
    }
    let (_, listed) = dev.get("/runs?flow=big&limit=1000").await;
    let stored: HashSet<String> = listed["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["id"].as_str().or(r["run_id"].as_str()).map(str::to_string))
        .collect();
    assert_eq!(
        stored, answered,
        "stored runs vs runs answered 201 ({unavailable} answered 503; {killed} backends killed)"
    );
}
