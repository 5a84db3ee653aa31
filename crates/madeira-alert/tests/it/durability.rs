//! Nothing is lost: a receiver down for two minutes gets everything once it is
//! back; a restart sends the deliveries that were pending and fires the groups
//! that were gathering.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use crate::support::{Harness, Mode, Receiver, failed_run, flow, settings, wait_for};

const SEC: Duration = Duration::from_secs(1);

fn clock() -> madeira_alert::ManualClock {
    madeira_alert::ManualClock::new(madeira_engine::now_ms())
}

fn alert_ids(hook: &Receiver) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for hit in hook.delivered() {
        for a in hit.body["alerts"].as_array().cloned().unwrap_or_default() {
            *seen.entry(a["id"].as_str().unwrap_or_default().to_string()).or_insert(0) += 1;
        }
    }
    seen
}

#[tokio::test]
async fn a_receiver_down_for_two_minutes_receives_everything_afterwards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Down).await;
    let config =
        json!({"group_wait": "1s", "channels": [{"name": "hook", "type": "webhook", "url": hook.url("/h")}]});
    let h = Harness::start(dir.path(), settings(config, &[]), clock()).await;
    let observer = h.handle.observer();
    for i in 0..3 {
        observer.run_finished(&failed_run(&flow(&format!("f{i}"), 1), &format!("r{i}"), "boom"));
    }
    h.advance(Duration::from_secs(120), SEC).await;
    assert!(hook.requests() >= 5, "retried with backoff while down: {}", hook.requests());
    assert_eq!(hook.count(), 0);
    let states = h.delivery_states().await;
    assert!(states.iter().all(|(_, _, s)| s == "pending"), "{states:?}");

    hook.set(Mode::Ok);
    for _ in 0..90 {
        if alert_ids(&hook).len() == 3 {
            break;
        }
        h.advance(SEC, SEC).await;
    }
    wait_for("all three alerts", || alert_ids(&hook).len() == 3).await;
    assert!(alert_ids(&hook).values().all(|n| *n == 1), "each exactly once");
    h.advance(Duration::from_secs(60), 10 * SEC).await;
    let states = h.delivery_states().await;
    assert!(states.iter().all(|(_, _, s)| s == "sent"), "{states:?}");
    h.stop().await;
}

#[tokio::test]
async fn a_restart_sends_pending_deliveries_and_fires_gathering_groups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Down).await;
    let config = json!({"group_wait": "10s", "channels": [{"name": "hook", "type": "webhook", "url": hook.url("/h")}]});
    let h = Harness::start(dir.path(), settings(config.clone(), &[]), clock()).await;
    let observer = h.handle.observer();
    observer.run_finished(&failed_run(&flow("sent-before", 1), "r1", "boom"));
    h.advance(11 * SEC, SEC).await;
    wait_for("a failed attempt", || hook.requests() >= 1).await;
    observer.run_finished(&failed_run(&flow("gathering", 1), "r2", "boom"));
    h.advance(SEC, SEC).await;
    let now = madeira_alert::Clock::now_ms(&h.clock);
    h.stop().await;

    hook.set(Mode::Ok);
    let h = Harness::start(dir.path(), settings(config, &[]), madeira_alert::ManualClock::new(now)).await;
    h.advance(SEC, SEC).await;
    wait_for("the pending delivery", || alert_ids(&hook).len() == 1).await;
    h.advance(10 * SEC, SEC).await;
    wait_for("the group that was gathering", || alert_ids(&hook).len() == 2).await;
    let flows: Vec<String> = hook
        .delivered()
        .iter()
        .map(|hit| hit.body["alerts"][0]["flow"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(flows, ["sent-before", "gathering"]);
    h.stop().await;
}
