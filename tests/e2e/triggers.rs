//! Triggers on the real binary: a 6-field cron firing every second, misfire
//! policies across a restart, event dedup (also concurrent), trigger rate limits.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::support::{Dev, cron_runs, hold_for, wait_until};

/// Scheduled instants of every cron run of `flow`, sorted.
async fn ticks(dev: &Dev, flow: &str) -> Vec<DateTime<Utc>> {
    cron_runs(dev, flow).await.0.into_iter().map(|(tick, _)| tick).collect()
}

async fn wait_ticks(dev: &Dev, flow: &str, n: usize, secs: u64) -> Vec<DateTime<Utc>> {
    let what = format!("{n} cron runs of {flow}");
    wait_until(Duration::from_secs(secs), &what, async || {
        let t = ticks(dev, flow).await;
        if t.len() >= n { Ok(t) } else { Err(format!("{} cron runs", t.len())) }
    })
    .await
}

fn every_second(flow: &str, misfire: &str) -> String {
    format!(
        "flow: {flow}\ntriggers:\n  - cron: \"* * * * * *\"\n    misfire: {misfire}\nnodes:\n  a: {{run: {{builtin: noop}}}}\n"
    )
}

#[tokio::test]
async fn six_field_cron_fires_once_per_second_without_duplicates() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(&every_second("tick", "skip")).await;
    let t = wait_ticks(&dev, "tick", 6, 20).await;
    let unique: BTreeSet<_> = t.iter().collect();
    assert_eq!(unique.len(), t.len(), "duplicate ticks: {t:?}");
    for pair in t.windows(2) {
        assert_eq!((pair[1] - pair[0]).num_milliseconds(), 1000, "gap or duplicate in {t:?}");
    }
}

/// Runs the flow, stops the server for ~3 s, restarts it, and returns how many
/// catch-up runs the restart fired, after checking no tick fired twice.
async fn catchup_runs_after_downtime(misfire: &str) -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = Dev::start_in(dir.path());
    let flow = format!("down-{}", misfire.replace('_', "-"));
    dev.put_flow(&every_second(&flow, misfire)).await;
    let before = wait_ticks(&dev, &flow, 2, 20).await;
    dev.kill9();
    tokio::time::sleep(Duration::from_secs(3)).await; // the outage itself, not a wait for a condition
    let dev = Dev::start_in(dir.path());
    let after = wait_ticks(&dev, &flow, before.len() + 3, 20).await;
    let unique: BTreeSet<_> = after.iter().collect();
    assert_eq!(unique.len(), after.len(), "a tick fired twice: {after:?}");
    let (_, list) = dev.get(&format!("/runs?flow={flow}&limit=1000")).await;
    list["runs"].as_array().into_iter().flatten().filter(|r| r["trigger"] == "cron_catchup").count()
}

#[tokio::test]
async fn misfire_skip_fires_nothing_missed_and_run_once_exactly_one() {
    assert_eq!(catchup_runs_after_downtime("skip").await, 0, "skip fires no burst");
    assert_eq!(catchup_runs_after_downtime("run_once").await, 1, "run_once fires exactly one");
}

#[tokio::test]
async fn an_event_posted_twice_or_concurrently_makes_one_run() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: on-close\ntriggers:\n  - event: payment.batch_closed\nnodes:\n  a: {run: {builtin: noop}}\n",
    )
    .await;
    let event = json!({"type": "payment.batch_closed", "id": "batch-42", "payload": {"batch": 42}});
    let (status, first) = dev.post("/events", event.clone(), &[]).await;
    assert_eq!(status, 200, "{first}");
    let (_, second) = dev.post("/events", event.clone(), &[]).await;
    assert_eq!(first["runs"].as_array().map(Vec::len), Some(1));
    assert_eq!(first, second);

    let concurrent = json!({"type": "payment.batch_closed", "id": "batch-43", "payload": {}});
    let replies =
        futures::future::join_all((0..20).map(|_| dev.post("/events", concurrent.clone(), &[]))).await;
    let ids: BTreeSet<String> = replies
        .iter()
        .map(|(s, b)| {
            assert_eq!(*s, 200, "{b}");
            b["runs"][0].as_str().unwrap_or("").to_string()
        })
        .collect();
    assert_eq!(ids.len(), 1, "20 deliveries of one id made {ids:?}");
    let run = dev.finished(ids.iter().next().expect("one")).await;
    assert_eq!(run["params"]["batch"], Value::Null);
    let (_, runs) = dev.get("/runs?flow=on-close").await;
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn an_event_nobody_listens_to_answers_404_naming_the_known_types() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: on-close\ntriggers:\n  - event: payment.batch_closed\nnodes:\n  a: {run: {builtin: noop}}\n",
    )
    .await;
    let (status, body) = dev.post("/events", json!({"type": "payment.batch_close", "id": "1"}), &[]).await;
    assert_eq!((status, &body["error"]["code"]), (404, &json!("no_listener")), "{body}");
    assert_eq!(body["error"]["details"]["known_types"], json!(["payment.batch_closed"]));
    // A paused listener still makes the type known (not a typo): the event is kept for it.
    dev.post("/flows/on-close/pause", json!({}), &[]).await;
    let (status, body) = dev.post("/events", json!({"type": "payment.batch_closed", "id": "2"}), &[]).await;
    assert_eq!((status, &body["queued"][0]["flow"]), (202, &json!("on-close")), "{body}");
}

#[tokio::test]
async fn triggers_past_the_rate_limit_get_429_with_retry_after() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: limited\nrate_limit: 2/m\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    dev.trigger("limited", json!({})).await;
    dev.trigger("limited", json!({})).await;
    let resp = dev.http.post(dev.url("/flows/limited/runs")).json(&json!({})).send().await.expect("post");
    assert_eq!(resp.status().as_u16(), 429);
    let retry: u64 = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After header");
    assert!((1..=30).contains(&retry), "retry after {retry}s");
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["error"]["code"], "rate_limited");
}

#[tokio::test]
async fn paused_flows_do_not_fire_and_show_next_run() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: nightly\ntriggers:\n  - cron: \"5 1 * * *\"\n    timezone: Asia/Shanghai\nnodes:\n  a: {run: {builtin: noop}}\n")
        .await;
    let (_, flow) = dev.get("/flows/nightly").await;
    let next = flow["triggers"][0]["next_run"].as_str().expect("next_run");
    assert!(next.ends_with("17:05:00.000Z"), "01:05 in Shanghai is 17:05 UTC: {next}");
    assert_eq!(flow["triggers"][0]["timezone"], "Asia/Shanghai");
    dev.put_flow(&every_second("paused", "skip")).await;
    let (status, body) = dev.post("/flows/paused/pause", json!({"reason": "maintenance"}), &[]).await;
    assert_eq!((status, body["paused"].as_bool()), (200, Some(true)));
    let (_, flow) = dev.get("/flows/paused").await;
    assert_eq!(flow["paused"], true);
    let settled = ticks(&dev, "paused").await.len();
    hold_for(Duration::from_millis(2500), "a paused flow not firing", async || {
        ticks(&dev, "paused").await.len() <= settled + 1
    })
    .await;
}
