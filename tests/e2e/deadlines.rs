//! Deadlines end to end on the real binary (issue #35 item 5): a flow whose run
//! for today is held at a manual node past its `deadline` raises exactly one
//! critical `MadeiraDeadlineMissed` through a real webhook, naming the flow, the
//! business date and the manual node; the next deadline is on `/metrics`.

use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};

use crate::support::{Dev, status_of};
use crate::webhook::Webhook;

fn deadline_alerts(bodies: &[Value]) -> Vec<Value> {
    bodies
        .iter()
        .filter(|b| b["kind"] == "firing")
        .flat_map(|b| b["alerts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["alertname"] == "MadeiraDeadlineMissed")
        .collect()
}

#[tokio::test]
async fn a_run_held_at_a_manual_node_past_its_deadline_raises_one_alert_naming_it() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("madeira.yaml");
    std::fs::write(&config, hook.config("200ms")).expect("write config");
    let config = config.to_string_lossy().to_string();
    let dev = Dev::start_with(&dir.path().join("data"), &["--config", &config]);
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
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = dev.http.get(format!("{}/metrics", dev.base)).send().await.expect("metrics");
        let text = metrics.text().await.expect("text");
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix("madeira_flow_deadline_seconds{flow=\"sign-off\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        if value == Some(wanted) {
            break;
        }
        assert!(std::time::Instant::now() < until, "deadline metric {value:?}, wanted {wanted}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let fired = hook.bodies_within(1, 30).await;
    let alerts = deadline_alerts(&fired);
    assert_eq!(alerts.len(), 1, "{fired:?}");
    let alert = &alerts[0];
    assert_eq!(alert["severity"], "critical", "{alert}");
    let text = alert.to_string();
    for needle in ["sign-off", date.as_str(), "manual node approve", "sign the reconciliation file"] {
        assert!(text.contains(needle), "the alert does not name `{needle}`: {alert}");
    }
    // The watcher keeps looking every second: still one alert, raised once.
    // (An absence cannot be waited on; three more looks are given the chance.)
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(deadline_alerts(&hook.bodies()).len(), 1, "{:?}", hook.bodies());
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
