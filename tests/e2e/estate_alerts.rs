//! Alerts follow the estate, on the real binary with a real webhook receiver
//! (issue #36 item 4): A fails → B and C, which wait for it, are held → exactly
//! one firing alert, naming A's failed node and listing B and C; B and C raise
//! nothing of their own, not even when their deadlines pass while held (the
//! misses join A's alert, and the audit names A's node as the root cause); a
//! rerun of A resolves the alert and B, then C, run to SUCCESS. B is held before
//! A fails (told when A fails), C after (told when it is created, through B).
//! The same across two `serve` replicas on PostgreSQL, the holds going through
//! the store's alert inbox (B and C created on one replica, A failing on the other).
//! A sub-flow's failure is one alert too: the child run's, naming the child's
//! failed node, with the parent run that failed with it listed (no alert of its own).

use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};

use crate::support::{Dev, hold_for, wait_until};
use crate::webhook::{Webhook, distinct};

async fn start(dev: &Dev, flow: &str, date: &str) -> String {
    let (status, body) = dev.post(&format!("/flows/{flow}/runs"), json!({"biz_date": date}), &[]).await;
    assert_eq!(status, 201, "{body}");
    body["run_id"].as_str().expect("run_id").to_string()
}

fn flows_of(alert: &Value) -> Vec<String> {
    alert["holds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["flow"].as_str().map(String::from))
        .collect()
}

#[tokio::test]
async fn a_failed_upstream_is_one_alert_listing_the_flows_it_holds_and_they_raise_none() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "1s");
    // B's and C's deadline: a few seconds from now, on today's (UTC) business date.
    let due = Utc::now() + chrono::Duration::seconds(8);
    let (day, by) = (due.format("%Y-%m-%d").to_string(), due.format("%H:%M:%S").to_string());
    let deadline = format!("timezone: UTC\ndeadline: {{by: \"{by}\", days: 0}}\n");
    dev.put_flow(
        "flow: ea-pull\nnodes:\n  pull:\n    retry: {attempts: 1}\n    run: {builtin: fail, message: payments API down, times: 1}\n",
    )
    .await;
    dev.put_flow(&format!(
        "flow: ea-clean\n{deadline}after:\n  - {{flow: ea-pull}}\nnodes:\n  clean: {{run: {{builtin: noop}}}}\n"
    ))
    .await;
    dev.put_flow(&format!(
        "flow: ea-settle\n{deadline}after:\n  - {{flow: ea-clean}}\nnodes:\n  settle: {{run: {{builtin: noop}}}}\n"
    ))
    .await;

    let b = start(&dev, "ea-clean", &day).await;
    dev.wait_run(&b, 10, |r| r["waiting_reason"].is_string()).await;
    let a = start(&dev, "ea-pull", &day).await;
    assert_eq!(dev.finished(&a).await["status"], "FAILED");
    let c = start(&dev, "ea-settle", &day).await;
    let held = dev.wait_run(&c, 10, |r| r["waiting_reason"].is_string()).await;
    assert_eq!(held["waiting_reason"], format!("waiting for ea-clean {day}"), "{held}");

    // One alert, naming A's node; its latest message lists B and C.
    let listing = wait_until(Duration::from_secs(30), "A's alert listing B and C", async || {
        let sent: Vec<Value> = hook.sent(&["firing", "update"]);
        match sent.last() {
            Some(alert) if flows_of(alert) == ["ea-clean", "ea-settle"] => Ok(alert.clone()),
            _ => Err(format!("{:?}", hook.bodies())),
        }
    })
    .await;
    assert_eq!((listing["flow"].as_str(), listing["node"].as_str()), (Some("ea-pull"), Some("pull")));
    let text: Vec<String> =
        hook.bodies().iter().filter_map(|b| b["text"].as_str().map(String::from)).collect();
    let last = text.last().cloned().unwrap_or_default();
    assert!(last.contains(&format!("holds: ea-clean {day}, ea-settle {day}")), "{last}");

    // B's and C's deadlines pass while held: recorded, the root cause named, no page of their own.
    let misses = wait_until(Duration::from_secs(30), "B's and C's deadline misses", async || {
        let (_, audit) = dev.get("/audit?limit=50").await;
        let misses: Vec<Value> = audit["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["action"] == "deadline_missed")
            .cloned()
            .collect();
        if misses.len() >= 2 { Ok(misses) } else { Err(audit.to_string()) }
    })
    .await;
    for miss in &misses {
        let reason = miss["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(&format!("root cause: ea-pull.pull FAILED in run {a}")), "{miss}");
        assert_eq!(miss["details"]["held_by"], json!(a), "{miss}");
    }
    let (_, listed) = wait_until(Duration::from_secs(10), "the misses on A's alert", async || {
        let (status, listed) = dev.get("/alerts").await;
        let alerts = listed["alerts"].as_array().cloned().unwrap_or_default();
        let marked = alerts.iter().flat_map(|a| a["holds"].as_array().cloned().unwrap_or_default());
        if marked.filter(|h| h["deadline_missed"].is_string()).count() == 2 {
            Ok((status, listed))
        } else {
            Err(listed.to_string())
        }
    })
    .await;
    let alerts = listed["alerts"].as_array().cloned().unwrap_or_default();
    assert_eq!(alerts.len(), 1, "exactly one alert: {listed}");
    // The map says the same: A holds B and C, both late against their deadline.
    let (status, map) = dev.get(&format!("/estate?date={day}")).await;
    assert_eq!(status, 200, "{map}");
    let flow = |name: &str| {
        map["flows"].as_array().into_iter().flatten().find(|f| f["flow"] == name).cloned().unwrap_or_default()
    };
    assert_eq!(flow("ea-pull")["holds"], json!(["ea-clean", "ea-settle"]), "{map}");
    for name in ["ea-clean", "ea-settle"] {
        let f = flow(name);
        assert_eq!((f["state"].as_str(), f["late"].as_bool()), (Some("held"), Some(true)), "{map}");
        assert_eq!(f["root_cause"], json!({"flow": "ea-pull", "node": "pull"}), "{map}");
        assert!(f["deadline"].as_str().is_some_and(|d| d.starts_with(&day)), "{map}");
    }
    assert_eq!(flow("ea-pull")["late"], json!(false), "no deadline, never late: {map}");
    assert_eq!(alerts[0]["alertname"], "MadeiraRunFailed", "{listed}");
    let paged_flows: Vec<String> =
        hook.sent(&[]).into_iter().filter_map(|a| a["flow"].as_str().map(String::from)).collect();
    assert!(paged_flows.iter().all(|f| f == "ea-pull"), "only A's alert went out: {paged_flows:?}");

    // A's rerun: the alert resolves, B then C run.
    let (status, body) =
        dev.post(&format!("/runs/{a}/nodes/pull/rerun"), json!({"reason": "payments API back"}), &[]).await;
    assert!(status < 300, "rerun: {status} {body}");
    for run in [&b, &c] {
        assert_eq!(dev.finished(run).await["status"], "SUCCESS", "{run}");
    }
    let resolved = hook.wait_alerts("resolved", |a| a["flow"] == "ea-pull").await;
    assert_eq!(resolved[0]["id"], listing["id"], "the same alert resolves");
    let firing = hook.alerts("firing", |_| true);
    assert_eq!(distinct(&firing), 1, "one firing alert in all: {firing:?}");
}

/// The latest message of `flow`'s alert, once it lists `held` (30 s at most).
async fn listing(hook: &Webhook, flow: &str, held: &[&str]) -> Value {
    wait_until(Duration::from_secs(30), "the upstream's alert listing what it holds", async || {
        let sent: Vec<Value> =
            hook.sent(&["firing", "update"]).into_iter().filter(|a| a["flow"] == flow).collect();
        match sent.last() {
            Some(alert) if flows_of(alert) == held => Ok(alert.clone()),
            _ => Err(format!("{:?}", hook.bodies())),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_runs_are_listed_on_the_upstreams_alert_across_replicas_on_postgres() {
    let Some(db) = madeira_store::testing::PgTestDb::create().await.expect("PostgreSQL test database") else {
        return;
    };
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::cluster::config(dir.path(), &db.url, &hook.config("1s"));
    let r1 = crate::cluster::replica(&config, "r1");
    let r2 = crate::cluster::replica(&config, "r2");
    r1.put_flow(
        "flow: pga-pull\nnodes:\n  pull:\n    retry: {attempts: 1}\n    run: {builtin: fail, message: down, times: 1}\n",
    )
    .await;
    r1.put_flow("flow: pga-clean\nafter:\n  - {flow: pga-pull}\nnodes:\n  clean: {run: {builtin: noop}}\n")
        .await;
    r1.put_flow(
        "flow: pga-settle\nafter:\n  - {flow: pga-clean}\nnodes:\n  settle: {run: {builtin: noop}}\n",
    )
    .await;
    let day = "2026-12-04";
    let b = start(&r2, "pga-clean", day).await;
    r2.wait_run(&b, 10, |r| r["waiting_reason"].is_string()).await;
    let a = start(&r1, "pga-pull", day).await;
    assert_eq!(r1.finished(&a).await["status"], "FAILED");
    let c = start(&r2, "pga-settle", day).await;
    r2.wait_run(&c, 10, |r| r["waiting_reason"].is_string()).await;
    let alert = listing(&hook, "pga-pull", &["pga-clean", "pga-settle"]).await;
    assert_eq!(alert["node"], "pull", "{alert}");
    let (status, body) =
        r2.post(&format!("/runs/{a}/nodes/pull/rerun"), json!({"reason": "back"}), &[]).await;
    assert!(status < 300, "rerun: {status} {body}");
    for run in [&b, &c] {
        assert_eq!(r1.finished(run).await["status"], "SUCCESS", "{run}");
    }
    let resolved = hook.wait_alerts("resolved", |a| a["flow"] == "pga-pull").await;
    assert_eq!(resolved[0]["id"], alert["id"]);
    let firing = hook.alerts("firing", |_| true);
    assert_eq!(distinct(&firing), 1, "one alert across both replicas: {firing:?}");
    assert!(hook.bodies().iter().all(|b| b["alerts"][0]["flow"] == "pga-pull"), "{:?}", hook.bodies());
    drop(db);
}

#[tokio::test]
async fn a_failed_child_run_and_its_parent_are_one_alert_naming_the_childs_node() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "1s");
    dev.put_flow(
        "flow: sa-charge\nnodes:\n  call_bank:\n    retry: {attempts: 1}\n    run: {builtin: fail, message: bank API down}\n",
    )
    .await;
    dev.put_flow(
        "flow: sa-orders\nnodes:\n  charge:\n    retry: {attempts: 1}\n    run: {flow: sa-charge}\n  notify: {needs: [charge], run: {builtin: noop}}\n",
    )
    .await;
    let day = "2026-12-04";
    let parent = start(&dev, "sa-orders", day).await;
    let run = dev.finished(&parent).await;
    assert_eq!(run["status"], "FAILED", "{run}");
    let child =
        run["nodes"]["charge"]["attempt_history"][0]["child_run"].as_str().expect("child run").to_string();
    assert_eq!(dev.finished(&child).await["status"], "FAILED");
    // One alert: the child's, naming its node, listing the parent that failed with it.
    let alert = wait_until(Duration::from_secs(30), "the child's alert listing its parent", async || {
        let sent: Vec<Value> = hook.sent(&["firing", "update"]);
        match sent.last() {
            Some(a) if flows_of(a) == ["sa-orders"] => Ok(a.clone()),
            _ => Err(format!("{:?}", hook.bodies())),
        }
    })
    .await;
    assert_eq!(
        (alert["alertname"].as_str(), alert["flow"].as_str(), alert["node"].as_str()),
        (Some("MadeiraRunFailed"), Some("sa-charge"), Some("call_bank")),
        "{alert}"
    );
    let hold = &alert["holds"][0];
    assert_eq!(
        (hold["run_id"].as_str(), hold["root_run"].as_str(), hold["parent_node"].as_str()),
        (Some(parent.as_str()), Some(child.as_str()), Some("charge")),
        "{alert}"
    );
    let text: Vec<String> =
        hook.bodies().iter().filter_map(|b| b["text"].as_str().map(String::from)).collect();
    let last = text.last().cloned().unwrap_or_default();
    assert!(
        last.contains(&format!("holds: sa-orders {day} (parent: its node charge failed with it)")),
        "{last}"
    );
    // Past another group_wait: still exactly one alert, the parent never paged.
    hold_for(Duration::from_millis(2500), "exactly one alert", async || {
        let all: Vec<Value> = hook.sent(&[]);
        distinct(&all) == 1 && all.iter().all(|a| a["flow"] == "sa-charge")
    })
    .await;
    let (_, listed) = dev.get("/alerts").await;
    assert_eq!(listed["alerts"].as_array().map(Vec::len), Some(1), "{listed}");
}
