//! An operator acknowledges or silences an alert (issue #33 item 8), end to end
//! against a real webhook receiver: the reason is required (400 naming it);
//! acknowledged, a critical alert is reminded of no more, and the list shows who
//! took it on and why; silenced, its growth is held until the silence is lifted,
//! then told in one update; both audited; an unknown alert is a 404.

use std::time::Duration;

use serde_json::json;

use crate::support::{Dev, hold_for};
use crate::webhook::{Webhook, kinds};

const FLOW: &str = "flow: marks
defaults:
  retry: {attempts: 1}
nodes:
  pull: {run: {builtin: fail, message: 'ledger down'}}
";

async fn alert(dev: &Dev, id: &str) -> serde_json::Value {
    let (_, list) = dev.get("/alerts?limit=10").await;
    list["alerts"].as_array().into_iter().flatten().find(|a| a["id"] == id).cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_alert_stops_reminding_and_a_silenced_one_holds_its_updates() {
    let hook = Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("madeira.yaml");
    let text = format!(
        "alerts:\n  group_wait: 300ms\n  group_interval: 1s\n  repeat_interval: 2s\n  channels:\n    - {{name: hook, type: webhook, url: '{}'}}\n",
        hook.url
    );
    std::fs::write(&config, text).expect("write config");
    let config = config.to_string_lossy().to_string();
    let dev = Dev::start_with(&dir.path().join("data"), &["--config", &config]);
    dev.put_flow(FLOW).await;
    let run = dev.trigger("marks", json!({})).await;
    dev.finished(&run).await;
    let fired = hook.bodies_within(1, 20).await;
    let id = fired[0]["alerts"][0]["id"].as_str().expect("alert id").to_string();

    let (status, body) = dev.post(&format!("/alerts/{id}/acknowledge"), json!({}), &[]).await;
    assert_eq!((status, body["error"]["details"]["field"].clone()), (400, json!("reason")), "{body}");
    let (status, body) = dev.post("/alerts/0193-nope/acknowledge", json!({"reason": "x"}), &[]).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = dev
        .post(&format!("/alerts/{id}/acknowledge"), json!({"reason": "on it: ledger DB failover"}), &[])
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["action"], "alert_acknowledge");
    let shown = alert(&dev, &id).await;
    assert_eq!(shown["acknowledged"]["reason"], "on it: ledger DB failover", "{shown}");
    let (_, audit) = dev.get("/audit?limit=20").await;
    assert!(
        audit["entries"].as_array().into_iter().flatten().any(|e| e["action"] == "alert_acknowledge"
            && e["reason"] == "on it: ledger DB failover"
            && e["details"]["alert"] == id.as_str()),
        "audited: {audit}"
    );
    // Three reminder periods (repeat_interval is 2 s) pass with no reminder.
    hold_for(Duration::from_secs(6), "no reminder after the acknowledgement", async || {
        !kinds(&hook.bodies()).contains(&"reminder")
    })
    .await;

    // Silenced for an hour, the alert grows and says nothing; lifted, one update.
    let (status, body) =
        dev.post(&format!("/alerts/{id}/silence"), json!({"reason": "maintenance"}), &[]).await;
    assert_eq!((status, body["error"]["details"]["field"].clone()), (400, json!("for")), "{body}");
    let (status, body) =
        dev.post(&format!("/alerts/{id}/silence"), json!({"reason": "maintenance", "for": "1h"}), &[]).await;
    assert_eq!(status, 200, "{body}");
    assert!(alert(&dev, &id).await["silenced"]["until"].is_string());
    let again = dev.trigger("marks", json!({})).await;
    dev.finished(&again).await;
    // Three group intervals (1 s) pass with no update: the silence holds it.
    hold_for(Duration::from_secs(3), "nothing sent while silenced", async || {
        kinds(&hook.bodies()) == ["firing"]
    })
    .await;
    let (status, body) =
        dev.post(&format!("/alerts/{id}/silence"), json!({"reason": "done", "for": "0s"}), &[]).await;
    assert_eq!(status, 200, "{body}");
    let all = hook.bodies_within(2, 20).await;
    assert_eq!(kinds(&all), ["firing", "update"], "the growth is told once the silence is lifted");
    assert_eq!(all[1]["alerts"][0]["count"], 2);
}
