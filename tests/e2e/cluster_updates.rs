//! Alert updates across `madeira serve` replicas on one PostgreSQL database: the
//! alert leader sends `firing` and is killed with kill -9; two more failures of
//! the same root cause reach the survivor, which takes the `alerts` lease, reloads
//! the alert with its last-announcement time and count from the store, and sends
//! exactly one `update` (count 3, 2 new) `group_interval` after the first message
//! — no second `firing` (once it was recorded as sent), no repeated update.

use crate::support::{hold_for, wait_until};
use std::time::{Duration, Instant};

use madeira_store::testing::PgTestDb;
use serde_json::{Value, json};

use crate::cluster::{config, replica};
use crate::cluster_alerts::alert_leader;
use crate::webhook::Webhook;

fn kinds(hook: &Webhook) -> Vec<String> {
    hook.bodies().iter().map(|b| b["kind"].as_str().unwrap_or_default().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_next_alert_leader_sends_the_update_once_and_never_the_first_message_again() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let alerts = format!(
        "alerts:\n  group_wait: 500ms\n  group_interval: 8s\n  repeat_interval: 0s\n  channels:\n    - {{name: hook, type: webhook, url: '{}'}}\n",
        hook.url
    );
    let config = config(dir.path(), &db.url, &alerts);
    let mut replicas = vec![("r1", replica(&config, "r1")), ("r2", replica(&config, "r2"))];
    replicas[0]
        .1
        .put_flow("flow: ledger\nnodes:\n  pay: {run: {builtin: fail, message: bank refused}}\n")
        .await;
    let leader = wait_until(Duration::from_secs(20), "a replica to take the alerts lease", async || {
        alert_leader(&db.url)
    })
    .await;
    let first = replicas[0].1.trigger("ledger", json!({})).await;
    assert_eq!(replicas[0].1.finished(&first).await["status"], "FAILED");
    let fired = hook.wait_alerts("firing", |a| a["flow"] == "ledger").await;
    let fired_at = Instant::now();
    let id = fired[0]["id"].clone();
    // Kill the leader only once the store records the message as sent: a delivery
    // in flight at the kill may be sent again by the next leader (at-least-once).
    wait_until(Duration::from_secs(20), "the firing delivery recorded as sent", async || {
        let (_, list) = replicas[0].1.get("/alerts?flow=ledger").await;
        let sent = list["alerts"][0]["deliveries"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["kind"] == "firing" && d["status"] == "sent"));
        if sent { Ok(()) } else { Err(list.to_string()) }
    })
    .await;

    let index = replicas.iter().position(|(name, _)| *name == leader).expect("leader is a replica");
    let (_, mut dead) = replicas.remove(index);
    dead.kill9();
    let (survivor_name, survivor) = &replicas[0];
    let mut runs = vec![Value::from(first)];
    for _ in 0..2 {
        let run = survivor.trigger("ledger", json!({})).await;
        assert_eq!(survivor.finished(&run).await["status"], "FAILED");
        runs.push(Value::from(run));
    }
    let update = hook.wait_alerts("update", |a| a["flow"] == "ledger").await;
    assert!(fired_at.elapsed() >= Duration::from_secs(6), "not before group_interval");
    assert_eq!(update[0]["id"], id, "the same alert");
    assert_eq!((update[0]["count"].clone(), update[0]["added"].clone()), (json!(3), json!(2)));
    assert_eq!(update[0]["runs"], Value::Array(runs));
    assert_eq!(alert_leader(&db.url).as_deref(), Some(*survivor_name));
    // Watch for more than another group_interval: nothing new, nothing repeated.
    hold_for(Duration::from_secs(10), "only the firing message and one update", async || {
        kinds(&hook) == ["firing", "update"]
    })
    .await;
    drop(replicas);
    drop(db);
}
