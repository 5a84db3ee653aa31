//! Alerts across `madeira serve` replicas on one PostgreSQL database: failures on
//! several replicas make one alert, sent once; alerts keep flowing after a replica
//! is killed with kill -9; a delivery pending on a killed alert leader is sent by
//! the next one.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use madeira_store::testing::PgTestDb;
use serde_json::{Value, json};

use crate::cluster::{config, replica};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_overdue_confirmation_alerts_once_and_its_answer_on_another_replica_resolves_it() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let (hook, hits) = receiver().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let alerts = format!(
        "alerts:\n  group_wait: 1s\n  channels:\n    - {{name: hook, type: webhook, url: '{hook}'}}\n"
    );
    let config = config(dir.path(), &db.url, &alerts);
    let (r1, r2) = (replica(&config, "r1"), replica(&config, "r2"));
    r1.put_flow(
        "flow: approve\nnodes:\n  sign_off:\n    manual:\n      prompt: 'sign the ledger'\n      alert_after: 1s\n",
    )
    .await;
    let run_id = r1.trigger("approve", json!({})).await;
    let overdue = |kind: &str| {
        let hits = hits.lock().expect("hits");
        hits.iter()
            .filter(|body| body["kind"] == kind)
            .flat_map(|body| body["alerts"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["alertname"] == "MadeiraConfirmOverdue" && a["node"] == "sign_off")
            .collect::<Vec<_>>()
    };
    crate::sidecar::wait_for("the overdue confirmation's alert", 30, || !overdue("firing").is_empty()).await;
    assert_eq!(overdue("firing")[0]["runs"], json!([run_id]));

    let (code, body) =
        r2.post(&format!("/runs/{run_id}/nodes/sign_off/confirm"), json!({"reason": "ok"}), &[]).await;
    assert_eq!(code, 200, "{body}");
    crate::sidecar::wait_for("the alert resolved by the answer", 30, || !overdue("resolved").is_empty())
        .await;
    assert_eq!(distinct(&overdue("firing")), 1, "one alert for one overdue confirmation");
    assert_eq!(r1.finished(&run_id).await["status"], "SUCCESS");
    drop((r1, r2));
    drop(db);
}
