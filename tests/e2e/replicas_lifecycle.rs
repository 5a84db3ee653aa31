//! A flow's lifecycle across `madeira serve` replicas on one PostgreSQL (or
//! MariaDB) database:
//! a flow deleted through one replica stops firing on every replica, with no
//! "cron run not created" noise from a replica that had it scheduled; an event
//! kept for a paused flow through one replica starts when another resumes it.

use std::time::Duration;

use madeira_store::testing::{MySqlTestDb, PgTestDb};
use serde_json::{Value, json};

use crate::cluster::{config, replica};
use crate::support::{Dev, hold_for, wait_until};

async fn runs(dev: &Dev, flow: &str) -> usize {
    dev.get(&format!("/runs?flow={flow}&limit=1000")).await.1["runs"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn a_flow_deleted_on_one_replica_stops_everywhere_and_kept_events_start_from_another() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    deleted_and_kept_across_replicas(&db.url).await;
    drop(db);
}

#[tokio::test]
async fn on_mariadb_a_flow_deleted_on_one_replica_stops_everywhere_and_kept_events_start_from_another() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    deleted_and_kept_across_replicas(&db.url).await;
    drop(db);
}

/// The scenario of the module doc on the store at `store_url`.
async fn deleted_and_kept_across_replicas(store_url: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), store_url, "");
    let r1 = replica(&config, "r1");
    let r2 = replica(&config, "r2");
    r1.put_flow("flow: beat\ntriggers:\n  - cron: \"* * * * * *\"\n    misfire: skip\nnodes:\n  a: {run: {builtin: noop}}\n")
        .await;
    wait_until(Duration::from_secs(20), "the cron flow to fire 3 times", async || {
        runs(&r2, "beat").await >= 3
    })
    .await;
    let resp = r1.http.delete(r1.url("/flows/beat?cancel=true")).send().await.expect("delete");
    assert_eq!(resp.status().as_u16(), 200);
    let settled = runs(&r2, "beat").await;
    // Two sync periods in which nothing may fire.
    hold_for(Duration::from_millis(4500), "no replica firing the deleted flow", async || {
        runs(&r2, "beat").await == settled
    })
    .await;
    let (_, audit) = r2.get("/audit?limit=200").await;
    let noise: Vec<&Value> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "cron_run_not_created")
        .collect();
    assert!(noise.is_empty(), "ticks of the deleted flow were reported as lost: {noise:?}");

    r1.put_flow("flow: kept\ntriggers:\n  - event: closed\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let (status, _) = r1.post("/flows/kept/pause", json!({}), &[]).await;
    assert_eq!(status, 200);
    let (status, body) = r1.post("/events", json!({"type": "closed", "id": "x1"}), &[]).await;
    assert_eq!(status, 202, "{body}");
    let (status, resumed) = r2.post("/flows/kept/resume", json!({}), &[]).await;
    assert_eq!((status, resumed["started"].as_array().map(Vec::len)), (200, Some(1)), "{resumed}");
    let run = resumed["started"][0].as_str().expect("run id").to_string();
    let done = r1.finished(&run).await;
    assert_eq!((&done["status"], &done["idempotency_key"]), (&json!("SUCCESS"), &json!("event:closed:x1")));
}
