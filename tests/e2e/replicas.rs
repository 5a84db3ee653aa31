//! Several `madeira serve` replicas on one PostgreSQL or MariaDB/MySQL database (a
//! fresh one per test) and one Redis: 200 runs triggered across two replicas, Redis stopped for a
//! few seconds and one replica killed with `kill -9` midway; every run finishes,
//! and only attempts that were in flight on the killed replica run a second time
//! (with the same idempotency key).

use std::path::Path;
use std::time::{Duration, Instant};

use madeira_store::testing::{MySqlTestDb, PgTestDb};
use serde_json::{Value, json};

use crate::forwarding::{Redis, free_port};
use crate::support::{Arrivals, Dev, client, wait_until, witness_receiver};

const ADMIN: &str = "replica-admin-token-0123456789";
/// How long the receiver takes to answer each node's request.
const NODE_TIME: Duration = Duration::from_millis(150);

async fn receiver() -> (String, Arrivals) {
    witness_receiver(|_| NODE_TIME).await
}

fn config(dir: &Path, store: &str, redis_port: u16) -> std::path::PathBuf {
    let path = dir.join("madeira.yaml");
    let text = format!(
        "http: 127.0.0.1:0\nhttp_executor: {{allow_hosts: [127.0.0.1]}}\nstore: {store}\nredis: redis://127.0.0.1:{redis_port}\nlease: 1s\nauth:\n  tokens:\n    \
         - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n"
    );
    std::fs::write(&path, text).expect("write config");
    path
}

fn replica(config: &Path, id: &str) -> Dev {
    Dev::serve(config, &[("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", ADMIN)], Some(ADMIN))
}

/// Runs of `flow` in `status`, seen through `dev`.
async fn count(dev: &Dev, flow: &str, status: &str) -> usize {
    let (code, body) = dev.get(&format!("/runs?flow={flow}&status={status}&limit=1000")).await;
    assert_eq!(code, 200, "{body}");
    body["runs"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_run_200_runs_and_survive_kill_9() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    two_replicas_200_runs_kill_9(&db.url).await;
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_mariadb_run_200_runs_and_survive_kill_9() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    two_replicas_200_runs_kill_9(&db.url).await;
    drop(db);
}

/// The scenario of the module doc on the store at `store_url`.
async fn two_replicas_200_runs_kill_9(store_url: &str) {
    let port = free_port();
    let Some(redis) = Redis::start(port) else { return };
    let mut redis = Some(redis);
    let (url, arrivals) = receiver().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), store_url, port);
    let mut r1 = replica(&config, "r1");
    let r2 = replica(&config, "r2");
    r1.put_flow(&format!(
        "flow: shared
nodes:
  a: {{run: {{http: {{url: '{url}', method: POST}}}}}}
  b: {{needs: [a], run: {{http: {{url: '{url}', method: POST}}}}}}
  c: {{needs: [b], run: {{http: {{url: '{url}', method: POST}}}}}}
"
    ))
    .await;

    let mut run_ids = Vec::new();
    let mut killed_at = None;
    let (mut redis_down, mut redis_down_for) = (None, None);
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    for i in 0..200 {
        pace.tick().await;
        match i {
            20 => {
                redis = None;
                redis_down = Some(Instant::now());
            }
            180 => {
                redis = Some(Redis::start(port).expect("redis restarts"));
                redis_down_for = redis_down.map(|at| at.elapsed());
            }
            _ => {}
        }
        if i == 100 {
            r1.kill9();
            killed_at = Some(Instant::now());
        }
        let target = if i % 2 == 0 && killed_at.is_none() { &r1 } else { &r2 };
        run_ids.push(target.trigger("shared", json!({"i": i})).await);
    }
    let killed_at = killed_at.expect("killed");

    wait_until(Duration::from_secs(90), "200 runs to succeed", async || {
        let done = count(&r2, "shared", "SUCCESS").await;
        if done == 200 { Ok(()) } else { Err(format!("{done} succeeded")) }
    })
    .await;

    let arrivals = arrivals.lock().expect("lock").clone();
    assert_eq!(arrivals.len(), 600, "every node of every run ran");
    let window = NODE_TIME + Duration::from_secs(3);
    for (key, times) in &arrivals {
        if times.len() > 1 {
            let first = times[0];
            assert!(
                first < killed_at && killed_at.duration_since(first) < window,
                "{key} ran {} times but was not in flight at the kill",
                times.len()
            );
        }
    }
    let repeated = arrivals.values().filter(|t| t.len() > 1).count();
    let r2_client = client(Some(ADMIN));
    let (_, run) = {
        let resp = r2_client.get(r2.url(&format!("/runs/{}", run_ids[0]))).send().await.expect("get");
        (resp.status(), resp.json::<Value>().await.expect("json"))
    };
    assert_eq!(run["status"], "SUCCESS");
    eprintln!(
        "200 runs on 2 replicas, Redis down from trigger 20 to 180 ({redis_down_for:?}), r1 killed after 100 triggers: \
         {repeated} in-flight attempt(s) re-run"
    );
    drop(r2);
    drop(redis);
}
