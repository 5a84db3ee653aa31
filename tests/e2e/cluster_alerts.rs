//! Alerts across `madeira serve` replicas on one PostgreSQL (or MariaDB) database: failures on
//! several replicas make one alert, sent once; alerts keep flowing after a replica
//! is killed with kill -9; a delivery pending on a killed alert leader is sent by
//! the next one.

use crate::support::wait_until;
use std::collections::BTreeSet;
use std::time::Duration;

use madeira_store::testing::{MySqlTestDb, PgTestDb};
use serde_json::{Value, json};

use crate::cluster::{config, replica};
use crate::webhook::{Webhook, distinct};

/// The firing alerts `hook` got for `flow`.
fn firing_for(hook: &Webhook, flow: &str) -> Vec<Value> {
    hook.alerts("firing", |a| a["flow"] == flow)
}

async fn wait_firing(hook: &Webhook, flow: &str) -> Vec<Value> {
    hook.wait_alerts("firing", |a| a["flow"] == flow).await
}

fn failing(flow: &str) -> String {
    format!("flow: {flow}\nnodes:\n  pay: {{run: {{builtin: fail, message: bank refused}}}}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_on_two_replicas_make_one_alert_and_alerts_survive_kill_9() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    one_alert_across_replicas_and_kill_9(&db.url).await;
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_on_two_replicas_on_mariadb_make_one_alert_and_alerts_survive_kill_9() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    one_alert_across_replicas_and_kill_9(&db.url).await;
    drop(db);
}

/// Failures on two replicas sharing `store_url` make one alert (one leader
/// aggregates the inbox); the survivor of a kill -9 sends the next one.
async fn one_alert_across_replicas_and_kill_9(store_url: &str) {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), store_url, &hook.config("2s"));
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
    let first = wait_firing(&hook, "settle").await;
    assert_eq!(first[0]["count"], 4, "one alert counts the failures of both replicas: {first:?}");
    let counted: BTreeSet<_> =
        first[0]["runs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert_eq!(counted.len(), 4, "{first:?}");

    // A later failure's alert comes a group_wait after it; a second alert for
    // `settle` from the other replica would have come before.
    let later = r2.trigger("later", json!({})).await;
    assert_eq!(r2.finished(&later).await["status"], "FAILED");
    wait_firing(&hook, "later").await;
    assert_eq!(distinct(&firing_for(&hook, "settle")), 1, "`settle` made more than one alert");

    // Whichever replica was aggregating, the survivor sends the next alert.
    r1.kill9();
    let orphan = r2.trigger("after-kill", json!({})).await;
    assert_eq!(r2.finished(&orphan).await["status"], "FAILED");
    let after = wait_firing(&hook, "after-kill").await;
    assert_eq!(distinct(&after), 1);
    assert_eq!(after[0]["runs"], json!([orphan]));
    assert_eq!(distinct(&firing_for(&hook, "settle")), 1, "the survivor made a second `settle` alert");
    drop(r2);
}

/// The replica holding the cluster's `alerts` lease, read from the store.
pub(crate) fn alert_leader(db_url: &str) -> Option<String> {
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
    // The receiver answers 503 until told otherwise.
    let hook = Webhook::start().await;
    hook.set_down(true);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &db.url, &hook.config("1s"));
    let mut replicas = vec![("r1", replica(&config, "r1")), ("r2", replica(&config, "r2"))];
    replicas[0].1.put_flow(&failing("ledger")).await;

    let leader = wait_until(Duration::from_secs(20), "a replica to take the alerts lease", async || {
        alert_leader(&db.url)
    })
    .await;
    let run = replicas[1].1.trigger("ledger", json!({})).await;
    assert_eq!(replicas[1].1.finished(&run).await["status"], "FAILED");
    crate::sidecar::wait_for("the leader's first refused delivery", 20, || hook.refused() >= 1).await;

    // Kill the leader while its delivery waits for a retry; the receiver recovers.
    let index = replicas.iter().position(|(id, _)| *id == leader).expect("leader is a replica");
    let (_, mut dead) = replicas.remove(index);
    dead.kill9();
    hook.set_down(false);
    let (survivor, _) = replicas[0];
    let delivered = wait_firing(&hook, "ledger").await;
    assert_eq!(delivered[0]["runs"], json!([run]));
    assert_eq!(alert_leader(&db.url).as_deref(), Some(survivor), "the survivor leads now");
    drop(replicas);
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_overdue_confirmation_alerts_once_and_its_answer_on_another_replica_resolves_it() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &db.url, &hook.config("1s"));
    let (r1, r2) = (replica(&config, "r1"), replica(&config, "r2"));
    r1.put_flow(
        "flow: approve\nnodes:\n  sign_off:\n    manual:\n      prompt: 'sign the ledger'\n      alert_after: 1s\n",
    )
    .await;
    let run_id = r1.trigger("approve", json!({})).await;
    let overdue = |kind: &str| {
        hook.alerts(kind, |a| a["alertname"] == "MadeiraConfirmOverdue" && a["node"] == "sign_off")
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
