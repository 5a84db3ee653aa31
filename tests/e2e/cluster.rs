//! Cluster-wide duties of `madeira serve` replicas on one PostgreSQL (or MariaDB) database (a
//! fresh one per test): every replica schedules cron triggers, yet each tick makes
//! one run, also while one replica is killed; trigger rate limits and the event
//! cache are shared through Redis, and without Redis each replica limits on its own
//! while the store still deduplicates. Alerts: `cluster_alerts`; sidecars:
//! `cluster_sidecars`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use madeira_store::testing::{MySqlTestDb, PgTestDb};
use serde_json::json;

use crate::forwarding::{Redis, free_port};
use crate::support::{Dev, cron_runs, wait_until};

pub(crate) const ADMIN: &str = "cluster-admin-token-0123456789";

pub(crate) fn config(dir: &Path, store: &str, extra: &str) -> PathBuf {
    let path = dir.join("madeira.yaml");
    let text = format!(
        "http: 127.0.0.1:0\nstore: {store}\nlease: 3s\nauth:\n  tokens:\n    \
         - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n{extra}"
    );
    std::fs::write(&path, text).expect("write config");
    path
}

pub(crate) fn replica(config: &Path, id: &str) -> Dev {
    Dev::serve(config, &[("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", ADMIN)], Some(ADMIN))
}

/// The scheduled instant of every cron run of `flow`, sorted; and how many runs
/// the flow has in all.
async fn ticks(dev: &Dev, flow: &str) -> (Vec<DateTime<Utc>>, usize) {
    let (runs, all) = cron_runs(dev, flow).await;
    (runs.into_iter().map(|(tick, _)| tick).collect(), all)
}

async fn wait_ticks(dev: &Dev, flow: &str, n: usize) -> (Vec<DateTime<Utc>>, usize) {
    let what = format!("{n} cron runs of {flow}");
    wait_until(Duration::from_secs(30), &what, async || {
        let seen = ticks(dev, flow).await;
        if seen.0.len() >= n { Ok(seen) } else { Err(format!("{} cron runs", seen.0.len())) }
    })
    .await
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
    cron_ticks_once_on_three_replicas(&db.url).await;
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_on_mariadb_fire_each_cron_tick_once_even_when_one_dies() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    cron_ticks_once_on_three_replicas(&db.url).await;
    drop(db);
}

/// A cron flow firing every second on three replicas sharing `store_url`, one of
/// them killed midway: one run per tick, every run finishes.
async fn cron_ticks_once_on_three_replicas(store_url: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), store_url, "");
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
    wait_until(Duration::from_secs(30), "every run up to the last tick finished", async || {
        let (_, list) = r2.get("/runs?flow=heartbeat&limit=1000").await;
        let mut open = Vec::new();
        for run in list["runs"].as_array().into_iter().flatten() {
            let (_, detail) = r2.get(&format!("/runs/{}", run["run_id"].as_str().unwrap_or(""))).await;
            let tick = detail["idempotency_key"]
                .as_str()
                .map(madeira_core::keys::RunKey::parse)
                .and_then(|k| k.cron_tick());
            if tick <= last && detail["status"] != "SUCCESS" {
                open.push(detail);
            }
        }
        if open.is_empty() { Ok(()) } else { Err(format!("{open:?}")) }
    })
    .await;
    drop((r2, r3));
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
