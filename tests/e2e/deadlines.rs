//! Deadlines end to end on the real binary (issue #35 item 5): a flow whose run
//! for today is held at a manual node past its `deadline` raises exactly one
//! critical `MadeiraDeadlineMissed` through a real webhook, naming the flow, the
//! business date and the manual node; the next deadline is on `/metrics`.

use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};

use crate::support::{hold_for, status_of, wait_until};
use crate::webhook::Webhook;

/// The firing alerts named `alertname` that `hook` received.
fn named(hook: &Webhook, alertname: &str) -> Vec<Value> {
    hook.alerts("firing", |a| a["alertname"] == alertname)
}

#[tokio::test]
async fn a_run_held_at_a_manual_node_past_its_deadline_raises_one_alert_naming_it() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "200ms");
    // The deadline: a few seconds from now, on the same (UTC) day.
    let due = Utc::now() + chrono::Duration::seconds(6);
    let (date, by) = (due.format("%Y-%m-%d").to_string(), due.format("%H:%M:%S").to_string());
    dev.put_flow(&format!(
        "flow: sign-off\ntimezone: UTC\ndeadline: {{by: \"{by}\", days: 0}}\nnodes:\n  \
         prep: {{run: {{builtin: noop}}}}\n  \
         approve: {{needs: [prep], manual: {{prompt: 'sign the reconciliation file'}}}}\n"
    ))
    .await;
    let (status, made) = dev.post("/flows/sign-off/runs", json!({"params": {}, "biz_date": date}), &[]).await;
    assert_eq!(status, 201, "{made}");
    let run_id = made["run_id"].as_str().expect("run_id").to_string();
    dev.wait_run(&run_id, 20, |r| status_of(r, "approve") == "MANUAL_CONFIRM").await;
    // The watcher looks once a second: the next deadline is on /metrics within a few.
    let wanted = due.timestamp() as f64;
    wait_until(Duration::from_secs(10), &format!("the deadline metric at {wanted}"), async || {
        let metrics = dev.http.get(format!("{}/metrics", dev.base)).send().await.expect("metrics");
        let text = metrics.text().await.expect("text");
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix("madeira_flow_deadline_seconds{flow=\"sign-off\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        if value == Some(wanted) { Ok(()) } else { Err(format!("{value:?}")) }
    })
    .await;

    let fired = hook.bodies_within(1, 30).await;
    let alerts = named(&hook, "MadeiraDeadlineMissed");
    assert_eq!(alerts.len(), 1, "{fired:?}");
    let alert = &alerts[0];
    assert_eq!(alert["severity"], "critical", "{alert}");
    let text = alert.to_string();
    for needle in ["sign-off", date.as_str(), "manual node approve", "sign the reconciliation file"] {
        assert!(text.contains(needle), "the alert does not name `{needle}`: {alert}");
    }
    // The watcher keeps looking every second: still one alert, raised once, over
    // three more of its looks.
    hold_for(Duration::from_secs(3), "one deadline alert", async || {
        named(&hook, "MadeiraDeadlineMissed").len() == 1
    })
    .await;
    let (_, listed) = dev.get("/alerts").await;
    let missed: Vec<&Value> = listed["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["alertname"] == "MadeiraDeadlineMissed")
        .collect();
    assert_eq!(missed.len(), 1, "{listed}");
    assert_eq!(missed[0]["count"], 1, "raised once: {listed}");
}

/// `warn_before` with a known history: `slow` took 4 s in the flow's earlier
/// runs, so the warning comes about 4 s *before* the warning line (deadline −
/// warn_before) for a date with no run yet — not at the line, as it would with
/// no history — once, naming the flow, the date and the estimate.
#[tokio::test]
async fn a_deadline_is_at_risk_once_the_usual_critical_path_no_longer_fits() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "100ms");
    let nodes =
        "nodes:\n  slow: {run: {builtin: sleep, for: 4s}}\n  post: {needs: [slow], run: {builtin: noop}}\n";
    dev.put_flow(&format!("flow: closing\ntimezone: UTC\n{nodes}")).await;
    // The history: two runs for old dates, each spending 4 s in `slow`.
    let mut history = Vec::new();
    for date in ["2026-01-05", "2026-01-06"] {
        let (status, made) = dev.post("/flows/closing/runs", json!({"biz_date": date}), &[]).await;
        assert_eq!(status, 201, "{made}");
        history.push(made["run_id"].as_str().expect("run_id").to_string());
    }
    for run in &history {
        dev.wait_run(run, 30, |r| r["status"] == "SUCCESS").await;
    }
    // Today's deadline 20 s from now, warned 10 s before: the line is 10 s away
    // and 4 s of usual work no longer fit from 6 s on.
    let due = Utc::now() + chrono::Duration::seconds(20);
    let (date, by) = (due.format("%Y-%m-%d").to_string(), due.format("%H:%M:%S").to_string());
    let due = chrono::NaiveDateTime::parse_from_str(&format!("{date} {by}"), "%Y-%m-%d %H:%M:%S")
        .expect("due")
        .and_utc();
    let line = due - chrono::Duration::seconds(10);
    dev.put_flow(&format!(
        "flow: closing\ntimezone: UTC\ndeadline: {{by: \"{by}\", days: 0, warn_before: 10s}}\n{nodes}"
    ))
    .await;
    let at_risk = wait_until(Duration::from_secs(30), "the at-risk warning", async || {
        let found = named(&hook, "MadeiraDeadlineAtRisk");
        if found.is_empty() { Err(format!("{:?}", hook.bodies())) } else { Ok(found) }
    })
    .await;
    let arrived = Utc::now();
    assert!(arrived < line, "warned at {arrived}, not before the line {line}: the history was not counted");
    assert!(arrived > line - chrono::Duration::seconds(6), "warned at {arrived}, long before {line} − 4 s");
    let alert = &at_risk[0];
    assert_eq!(alert["severity"], "warning", "{alert}");
    let text = alert.to_string();
    for needle in ["closing", date.as_str(), "about 4s of work", "no run has been created for this date yet"]
    {
        assert!(text.contains(needle), "the warning does not say `{needle}`: {alert}");
    }
    // Once per flow and date, though the watcher looks every second.
    hold_for(Duration::from_secs(3), "one at-risk warning", async || {
        named(&hook, "MadeiraDeadlineAtRisk").len() == 1
    })
    .await;
    let (_, audit) = dev.get("/audit?actor=deadlines&limit=20").await;
    let entries = audit["entries"].as_array().cloned().unwrap_or_default();
    assert_eq!(entries.iter().filter(|e| e["action"] == "deadline_at_risk").count(), 1, "{audit}");
}

/// `max_duration` on a run and on a node: each overrun is one warning naming
/// the node and how long, and the run is not stopped.
#[tokio::test]
async fn a_run_and_a_node_past_their_max_duration_are_warned_of_once_and_not_stopped() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "100ms");
    dev.put_flow(
        "flow: long\nmax_duration: 2s\nnodes:\n  slow: {run: {builtin: sleep, for: 6s}, max_duration: 1s}\n",
    )
    .await;
    let run_id = dev.trigger("long", json!({})).await;
    let both = wait_until(Duration::from_secs(20), "two max_duration warnings", async || {
        let found = named(&hook, "MadeiraMaxDuration");
        if found.len() >= 2 { Ok(found) } else { Err(format!("{:?}", hook.bodies())) }
    })
    .await;
    let node = both.iter().find(|a| a["node"] == "slow").expect("the node's warning");
    let run = both.iter().find(|a| a["node"] != "slow").expect("the run's warning");
    for (alert, needles) in [
        (node, ["node slow of run", "past its max_duration 1s", "It is not stopped"]),
        (run, ["has been running for", "past its max_duration 2s", "slow (RUNNING since"]),
    ] {
        assert_eq!(alert["severity"], "warning", "{alert}");
        let text = alert.to_string();
        for needle in needles {
            assert!(text.contains(needle), "the warning does not say `{needle}`: {alert}");
        }
        assert!(text.contains(&run_id), "{alert}");
    }
    // Never killed: the sleep ends and the run succeeds; still one warning each.
    let done = dev.wait_run(&run_id, 20, |r| r["status"] != "RUNNING").await;
    assert_eq!(done["status"], "SUCCESS", "{done}");
    assert_eq!(named(&hook, "MadeiraMaxDuration").len(), 2, "{:?}", hook.bodies());
}
