//! `throttle.max_permits` holds across replicas: runs triggered on two replicas
//! of one PostgreSQL (or MariaDB) store never run more attempts of the throttled node at once
//! than the permits allow — also while Redis (the wake-up path) is down for a
//! while, which only slows hand-overs down.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use madeira_store::testing::{MySqlTestDb, PgTestDb};
use serde_json::json;

use crate::forwarding::{Redis, free_port};
use crate::support::Dev;

const ADMIN: &str = "permits-admin-token-0123456789";

/// Answers after 150 ms; records how many requests were in flight at most.
async fn receiver() -> (String, Arc<AtomicUsize>) {
    let (now, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let seen = max.clone();
    let app = Router::new().route(
        "/slow",
        post(move || {
            let (now, max) = (now.clone(), max.clone());
            async move {
                let current = now.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(current, Ordering::SeqCst);
                // The job's own duration: attempts must overlap for the permit count to mean anything.
                tokio::time::sleep(Duration::from_millis(150)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                axum::Json(json!({}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/slow"), seen)
}

fn replica(dir: &std::path::Path, store: &str, port: u16, id: &str) -> Dev {
    let path = dir.join(format!("{id}.yaml"));
    let text = format!(
        "http: 127.0.0.1:0\nhttp_executor: {{allow_hosts: [127.0.0.1]}}\nstore: {store}\nredis: redis://127.0.0.1:{port}\nlease: 30s\nauth:\n  tokens:\n    \
         - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n"
    );
    std::fs::write(&path, text).expect("write config");
    Dev::serve(&path, &[("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", ADMIN)], Some(ADMIN))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_permits_is_global_across_replicas_even_without_redis() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    permits_are_global(&db.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn max_permits_is_global_across_replicas_on_mariadb_even_without_redis() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    permits_are_global(&db.url).await;
}

/// 24 runs of a node with `max_permits: 2` on two replicas sharing `store_url`,
/// Redis stopped for the second half.
async fn permits_are_global(store_url: &str) {
    let port = free_port();
    let Some(redis) = Redis::start(port) else { return };
    let (url, max_seen) = receiver().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let r1 = replica(dir.path(), store_url, port, &format!("p1-{suffix}"));
    let r2 = replica(dir.path(), store_url, port, &format!("p2-{suffix}"));
    r1.put_flow(&format!(
        "flow: thr
nodes:
  t: {{throttle: {{max_permits: 2, queue_size: 100}}, run: {{http: {{url: '{url}', method: POST}}}}}}
  after: {{needs: [t], run: {{builtin: noop}}}}
"
    ))
    .await;
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(if i % 2 == 0 { &r1 } else { &r2 }.trigger("thr", json!({})).await);
    }
    drop(redis);
    for i in 12..24 {
        ids.push(if i % 2 == 0 { &r1 } else { &r2 }.trigger("thr", json!({})).await);
    }
    let redis = Redis::start(port).expect("redis restarts");
    for id in &ids {
        let run = r1.wait_run(id, 60, |r| r["status"] == "SUCCESS" || r["status"] == "FAILED").await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
    }
    let max = max_seen.load(Ordering::SeqCst);
    assert!(max <= 2, "{max} attempts of the throttled node ran at once across replicas (max_permits 2)");
    assert!(max >= 1);
    eprintln!("24 throttled runs on 2 replicas in {:?}; at most {max} at once", started.elapsed());
    drop(redis);
}
