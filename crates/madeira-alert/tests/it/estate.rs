//! Alerts follow the estate (issue 36 item 4), through the engine's hooks and a
//! webhook receiver: runs held behind a failed upstream run are listed on that
//! run's one failure alert (`holds` in its JSON, a "holds: …" line in its text),
//! a flow held later is one `update`, a held flow's missed deadline joins the
//! alert instead of paging on its own, and the upstream's success resolves the
//! alert once, saying what it released. Also through a restart: the holds are
//! kept with the alert in the store.

use std::time::Duration;

use madeira_core::{Command, RunState};
use madeira_engine::{BusinessAlert, HeldRun};
use serde_json::{Value, json};

use crate::support::{Harness, Mode, Receiver, drive, failed_run, flow, settings, wait_for};

const SEC: Duration = Duration::from_secs(1);
const DAY: &str = "2026-12-04";

fn config(hook: &Receiver) -> Value {
    json!({"group_wait": "10s", "group_interval": "5m", "repeat_interval": "4h",
        "channels": [{"name": "hook", "type": "webhook", "url": hook.url("/hook")}]})
}

fn held<'a>(run_id: &'a str, flow: &'a str) -> HeldRun<'a> {
    HeldRun {
        run_id,
        flow,
        biz_date: DAY,
        root_run: "pull-1",
        root_flow: "payments-pull",
        root_node: Some("root"),
    }
}

/// `(kind, text, alerts[0])` of every webhook body so far.
fn sent(hook: &Receiver) -> Vec<(String, String, Value)> {
    hook.delivered()
        .iter()
        .map(|h| {
            let kind = h.body["kind"].as_str().unwrap_or_default().to_string();
            let text = h.body["text"].as_str().unwrap_or_default().to_string();
            (kind, text, h.body["alerts"][0].clone())
        })
        .collect()
}

fn held_flows(alert: &Value) -> Vec<(String, String)> {
    alert["holds"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            (h["flow"].as_str().unwrap_or("?").to_string(), h["biz_date"].as_str().unwrap_or("?").into())
        })
        .collect()
}

#[tokio::test]
async fn one_alert_names_the_failed_upstream_and_lists_what_it_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let clock = madeira_alert::ManualClock::new(madeira_engine::now_ms());
    let h = Harness::start(dir.path(), settings(config(&hook), &[]), clock.clone()).await;
    let pull = flow("payments-pull", 0);
    let mut snap = failed_run(&pull, "pull-1", "HTTP 503 from the payments API");
    snap.biz_date = Some(DAY.into());
    let observer = h.handle.observer();
    observer.run_finished(&snap);
    observer.run_held(&held("clean-1", "warehouse-clean"));
    h.advance(11 * SEC, SEC).await;
    let messages = sent(&hook);
    assert_eq!(messages.len(), 1, "one firing: {messages:?}");
    let (kind, text, alert) = &messages[0];
    assert_eq!((kind.as_str(), alert["alertname"].as_str()), ("firing", Some("MadeiraRunFailed")));
    assert_eq!((alert["flow"].as_str(), alert["node"].as_str()), (Some("payments-pull"), Some("root")));
    assert_eq!(held_flows(alert), [("warehouse-clean".to_string(), DAY.to_string())]);
    assert!(text.contains(&format!("holds: warehouse-clean {DAY}")), "{text}");

    // Another flow held behind it, and a held flow's deadline passing: one update.
    observer.run_held(&held("settle-1", "finance-settle"));
    let summary = format!("flow warehouse-clean: the run for business date {DAY} was not SUCCESS by 03:00");
    let key = format!("deadline:warehouse-clean:{DAY}");
    observer.business_alert(&BusinessAlert {
        key: &key,
        alertname: "MadeiraDeadlineMissed",
        critical: true,
        flow: "warehouse-clean",
        node: None,
        biz_date: DAY,
        summary: &summary,
        run_id: Some("clean-1"),
        held_by: Some("pull-1"),
    });
    h.advance(5 * 60 * SEC, 10 * SEC).await;
    let messages = sent(&hook);
    let kinds: Vec<&str> = messages.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(kinds, ["firing", "update"], "{messages:?}");
    let (_, text, alert) = &messages[1];
    assert_eq!(alert["id"], messages[0].2["id"], "the same alert");
    assert_eq!(
        held_flows(alert),
        [("warehouse-clean".to_string(), DAY.to_string()), ("finance-settle".to_string(), DAY.to_string())]
    );
    assert!(
        text.contains(&format!("holds: warehouse-clean {DAY} (deadline missed), finance-settle {DAY}")),
        "{text}"
    );
    assert!(text.contains("2 runs of other flows held behind it now"), "{text}");
    assert_eq!(alert["holds"][0]["deadline_missed"], json!(summary));

    // Restarted: the holds come back from the store; the rerun's success resolves it once.
    h.stop().await;
    let h = Harness::start(dir.path(), settings(config(&hook), &[]), clock).await;
    drive(&mut snap, Command::Rerun { node: 0, downstream: false }, &Default::default());
    assert_eq!(snap.state, RunState::Success);
    h.handle.observer().run_finished(&snap);
    wait_for("the resolved message", || hook.count() >= 3).await;
    h.advance(30 * 60 * SEC, 60 * SEC).await;
    let messages = sent(&hook);
    let kinds: Vec<&str> = messages.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(kinds, ["firing", "update", "resolved"], "{messages:?}");
    assert!(messages[2].1.contains("released"), "{}", messages[2].1);
    assert!(messages[2].1.contains("finance-settle"), "{}", messages[2].1);
    let listed =
        h.handle.list(&madeira_store::AlertQuery { status: None, flow: None, limit: 10, before: None }).await;
    let listed = listed.expect("alerts");
    let alerts = listed["alerts"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = alerts.iter().filter_map(|a| a["alertname"].as_str()).collect();
    assert_eq!(names, ["MadeiraRunFailed"], "no alert of the held flows' own: {alerts:?}");
    assert_eq!(alerts[0]["holds"].as_array().map(Vec::len), Some(2), "{alerts:?}");
    h.stop().await;
}
