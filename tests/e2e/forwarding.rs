//! Operator actions received by one replica for a run another replica holds (with
//! attempts in flight there) are forwarded to the holder: woken through Redis
//! pub/sub while Redis is up, through polling of PostgreSQL while it is down. The
//! results are the same either way; only latency differs. Redis here is a private
//! `redis-server` on its own port, killed and restarted by the test.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use futures::future::join_all;
use madeira_store::testing::{PgTestDb, services_required};
use serde_json::json;

use crate::support::{Dev, wait_blocking};

const ADMIN: &str = "forward-admin-token-0123456789";

/// A private Redis on `port`, gone when dropped.
pub struct Redis(Child);

impl Redis {
    pub fn start(port: u16) -> Option<Redis> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match child {
            Ok(child) => {
                let what = format!("redis-server to listen on {port}");
                wait_blocking(Duration::from_secs(10), &what, || {
                    std::net::TcpStream::connect(("127.0.0.1", port)).ok()
                });
                Some(Redis(child))
            }
            Err(e) if !services_required() => {
                eprintln!("skipping: cannot start redis-server ({e})");
                None
            }
            Err(e) => panic!("CI=true and redis-server cannot start: {e}"),
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// `/hold` answers after 4 s (keeps an attempt in flight on the holder); `/work` at once.
async fn receiver() -> String {
    let app = Router::new()
        .route(
            "/hold",
            post(|| async {
                // The job's own duration: it keeps an attempt in flight on the holder.
                tokio::time::sleep(Duration::from_secs(4)).await;
                axum::Json(json!({}))
            }),
        )
        .route("/work", post(|| async { axum::Json(json!({"done": true})) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn replica(dir: &Path, store: &str, redis_port: u16, id: &str) -> Dev {
    let path = dir.join(format!("{id}.yaml"));
    let text = format!(
        "http: 127.0.0.1:0\nhttp_executor: {{allow_hosts: [127.0.0.1]}}\nstore: {store}\nredis: redis://127.0.0.1:{redis_port}\nlease: 30s\nauth:\n  tokens:\n    \
         - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n"
    );
    std::fs::write(&path, text).expect("write config");
    Dev::serve(&path, &[("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", ADMIN)], Some(ADMIN))
}

/// Starts `n` runs on `holder`, waits until each holds an attempt and waits for
/// confirmation there, then confirms all through `other`; returns the latencies.
async fn confirm_through_other(holder: &Dev, other: &Dev, n: usize) -> (Vec<String>, Vec<Duration>) {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(holder.trigger("fwd", json!({})).await);
    }
    for id in &ids {
        holder
            .wait_run(id, 20, |r| {
                r["nodes"]["gate"]["status"] == "MANUAL_CONFIRM" && r["nodes"]["hold"]["status"] == "RUNNING"
            })
            .await;
    }
    let confirms = ids.iter().map(|id| async move {
        let started = Instant::now();
        let (status, body) =
            other.post(&format!("/runs/{id}/nodes/gate/confirm"), json!({"reason": "forwarded"}), &[]).await;
        assert_eq!(status, 200, "confirm of {id} through the other replica: {body}");
        started.elapsed()
    });
    let latencies = join_all(confirms).await;
    (ids, latencies)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn actions_are_forwarded_to_the_holder_with_and_without_redis() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let port = free_port();
    let Some(redis) = Redis::start(port) else { return };
    let base = receiver().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let r1 = replica(dir.path(), &db.url, port, &format!("h1-{suffix}"));
    let r2 = replica(dir.path(), &db.url, port, &format!("h2-{suffix}"));
    r1.put_flow(&format!(
        "flow: fwd
nodes:
  hold: {{run: {{http: {{url: '{base}/hold', method: POST}}}}}}
  gate: {{manual: {{prompt: go?}}}}
  after: {{needs: [gate], run: {{http: {{url: '{base}/work', method: POST}}}}}}
"
    ))
    .await;

    let (mut all, with_redis) = confirm_through_other(&r1, &r2, 8).await;
    drop(redis);
    let (ids, without_redis) = confirm_through_other(&r1, &r2, 8).await;
    all.extend(ids);
    let redis = Redis::start(port).expect("redis restarts");
    let (ids, after_restart) = confirm_through_other(&r1, &r2, 8).await;
    all.extend(ids);

    for id in &all {
        let run = r2.finished(id).await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
        assert_eq!(run["nodes"]["gate"]["status"], "SUCCESS");
        assert_eq!(run["nodes"]["after"]["attempts"], 1, "downstream ran once: {run}");
    }
    let (_, audit) = r2.get(&format!("/audit?run_id={}", all[0])).await;
    assert_eq!(audit["entries"][0]["actor"], "ci", "the holder audits the caller's token name: {audit}");
    eprintln!(
        "forwarded confirm, median: redis up {:?}, redis down {:?}, after restart {:?}",
        median(with_redis),
        median(without_redis),
        median(after_restart)
    );
    drop(redis);
}
