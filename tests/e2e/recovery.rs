//! A run survives `kill -9` of the server: after a restart on the same data
//! directory the in-flight attempt is retried with the same idempotency key and the
//! run finishes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::json;

use crate::support::{Dev, status_of};

/// An HTTP receiver that records each request's Idempotency-Key; the first
/// request never gets an answer in time (the server is killed meanwhile).
async fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let app = Router::new().route(
        "/settle",
        post(move |headers: HeaderMap| {
            let log = log.clone();
            async move {
                let key =
                    headers.get("idempotency-key").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                let first = {
                    let mut seen = log.lock().expect("lock");
                    seen.push(key);
                    seen.len() == 1
                };
                if first {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                axum::Json(json!({"settled": true}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/settle"), seen)
}

#[tokio::test]
async fn run_survives_kill_9_and_retries_with_the_same_key() {
    let (url, seen) = receiver().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = Dev::start_in(dir.path());
    dev.put_flow(&format!(
        "flow: crashy
nodes:
  settle: {{run: {{http: {{url: '{url}', method: POST}}}}, timeout: 2m}}
  after: {{needs: [settle], run: {{builtin: noop}}}}
"
    ))
    .await;
    let run_id = dev.trigger("crashy", json!({})).await;
    dev.wait_run(&run_id, 20, |r| status_of(r, "settle") == "RUNNING").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while seen.lock().expect("lock").is_empty() {
        assert!(std::time::Instant::now() < deadline, "the first attempt never reached the receiver");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    dev.kill9();

    let dev = Dev::start_in(dir.path());
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["settle"]["attempts"], 2);
    assert_eq!(run["nodes"]["settle"]["outputs"]["settled"], true);
    let keys = seen.lock().expect("lock").clone();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1], "a recovered attempt keeps its idempotency key");
    assert!(keys[0].starts_with(&run_id));
}

/// An HTTP job whose JSON answer is larger than the 64 KiB outputs limit fails
/// with a clear error instead of being silently truncated or dropped.
#[tokio::test]
async fn oversize_outputs_are_refused_with_a_clear_error() {
    let app = Router::new()
        .route("/big", axum::routing::get(|| async { axum::Json(json!({"blob": "x".repeat(70 * 1024)})) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (_dir, dev) = Dev::start();
    dev.put_flow(&format!("flow: big\nnodes:\n  fetch: {{run: {{http: {{url: 'http://{addr}/big'}}}}}}\n"))
        .await;
    let run_id = dev.trigger("big", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "FAILED");
    let reason = run["nodes"]["fetch"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("more than the 65536 allowed"), "{reason}");
    assert_eq!(run["nodes"]["fetch"]["attempts"], 1, "not retried: the answer will not shrink");
}
