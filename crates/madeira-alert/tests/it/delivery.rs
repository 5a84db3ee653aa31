//! One alert per root cause with an exact WeCom payload, then `resolved`; DingTalk
//! and Feishu signatures checked by verifying receivers; Alertmanager's v2 array,
//! re-sent while firing and resolved with `endsAt`; test messages.

use std::collections::HashMap;
use std::time::Duration;

use madeira_core::{Command, NodeState, RunState};
use madeira_store::AlertQuery;
use serde_json::json;

use crate::support::{
    Harness, Mode, Receiver, drive, failed_run, flow, settings, wait_for, webhook_signature,
};

const SEC: Duration = Duration::from_secs(1);

/// `GET /alerts` as the handle answers it, once `cond` holds (10 s deadline).
async fn list_until(h: &Harness, cond: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let list = h
            .handle
            .list(&AlertQuery { status: None, flow: None, limit: 10, before: None })
            .await
            .expect("list");
        if cond(&list) {
            return list;
        }
        assert!(std::time::Instant::now() < deadline, "alerts never reached the condition: {list}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn clock() -> madeira_alert::ManualClock {
    madeira_alert::ManualClock::new(madeira_engine::now_ms())
}

const EXPECTED: &str = "## [critical] MadeiraRunFailed · flow settle
**Root cause:** node `root` failed after 3 attempts
**Error:** HTTP 503 from ledger
**Skipped because of it:** d0, d1, d2, d3, d4, d5 (6)
[Run run-1](http://madeira.test:7070/runs/run-1)
`madeira rerun run-1 root --reason \"…\"`
`madeira mark-success run-1 root --reason \"…\"`
";

#[tokio::test]
async fn root_failure_after_three_attempts_yields_exactly_one_wecom_message_then_resolved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wecom = Receiver::start(Mode::Ok).await;
    let url = wecom.url("/cgi-bin/webhook/send?key=wecom-key-123");
    let config = json!({"group_wait": "10s", "external_url": "http://madeira.test:7070",
        "channels": [{"name": "fin", "type": "wecom", "url_env": "WECOM_URL"}]});
    let h = Harness::start(dir.path(), settings(config, &[("WECOM_URL", &url)]), clock()).await;

    let flow = flow("settle", 6);
    let mut snap = failed_run(&flow, "run-1", "HTTP 503 from ledger");
    assert_eq!(snap.state, RunState::Failed);
    assert_eq!(snap.nodes[0].attempt, 3, "two retries, then FAILED");
    assert_eq!(snap.nodes.iter().filter(|n| n.state == NodeState::Skipped).count(), 6);
    let observer = h.handle.observer();
    observer.run_finished(&snap);

    h.advance(5 * SEC, SEC).await;
    assert_eq!(wecom.count(), 0, "nothing before group_wait");
    h.advance(6 * SEC, SEC).await;
    wait_for("the WeCom message", || wecom.count() == 1).await;
    h.advance(Duration::from_secs(120), 10 * SEC).await;
    let hits = wecom.delivered();
    assert_eq!(hits.len(), 1, "exactly one message for one failed run");
    assert_eq!(hits[0].path, "/cgi-bin/webhook/send?key=wecom-key-123");
    assert_eq!(hits[0].body, json!({"msgtype": "markdown", "markdown": {"content": EXPECTED}}));

    drive(&mut snap, Command::Rerun { node: 0, downstream: true }, &HashMap::new());
    assert_eq!(snap.state, RunState::Success);
    observer.run_finished(&snap);
    h.advance(SEC, SEC).await;
    wait_for("the resolved message", || wecom.count() == 2).await;
    let resolved = wecom.delivered()[1].body["markdown"]["content"].as_str().expect("content").to_string();
    assert!(resolved.starts_with("## [resolved] MadeiraRunFailed · flow settle\n"), "{resolved}");
    assert!(resolved.contains("1 failed run(s) succeeded again"), "{resolved}");

    let list = list_until(&h, |l| l["alerts"][0]["deliveries"][1]["status"] == "sent").await;
    assert_eq!(list["alerts"][0]["status"], "resolved");
    let kinds: Vec<_> = list["alerts"][0]["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| (d["kind"].clone(), d["status"].clone()))
        .collect();
    assert_eq!(kinds, [(json!("firing"), json!("sent")), (json!("resolved"), json!("sent"))]);
    assert!(!list.to_string().contains("wecom-key-123"), "the key never shows: {list}");
    h.stop().await;
}

#[tokio::test]
async fn dingtalk_and_feishu_signatures_verify_at_the_receiver() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ding = Receiver::start(Mode::VerifyDingtalk("SECding-secret".into())).await;
    let feishu = Receiver::start(Mode::VerifyFeishu("feishu-secret".into())).await;
    let wrong = Receiver::start(Mode::VerifyDingtalk("SECanother".into())).await;
    let secret_file = dir.path().join("feishu.secret");
    std::fs::write(&secret_file, "feishu-secret\n").expect("write secret");
    let config = json!({"group_wait": "1s", "channels": [
        {"name": "ding", "type": "dingtalk", "url": ding.url("/robot/send?access_token=tok"), "secret_env": "DING"},
        {"name": "lark", "type": "feishu", "url": feishu.url("/open-apis/bot/v2/hook/abc"), "secret_file": secret_file},
        {"name": "bad", "type": "dingtalk", "url": wrong.url("/robot/send?access_token=t2"), "secret_env": "DING"}]});
    let h = Harness::start(dir.path(), settings(config, &[("DING", "SECding-secret")]), clock()).await;
    h.handle.observer().run_finished(&failed_run(&flow("settle", 2), "run-1", "boom"));
    h.advance(2 * SEC, SEC).await;
    wait_for("signed messages", || ding.count() == 1 && feishu.count() == 1).await;
    assert!(ding.delivered()[0].verified && feishu.delivered()[0].verified);
    assert_eq!(ding.delivered()[0].body["msgtype"], "markdown");
    assert_eq!(feishu.delivered()[0].body["msg_type"], "text");

    wait_for("the refused signature is tried", || wrong.requests() >= 1).await;
    let has_error = |l: &serde_json::Value| l.to_string().contains("310000");
    let list = list_until(&h, has_error).await;
    let bad = list["alerts"][0]["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["channel"] == "bad")
        .cloned()
        .expect("bad delivery");
    assert_eq!(bad["status"], "pending", "HTTP 200 with errcode != 0 is a failure, retried later");
    assert_eq!(bad["last_error"], "errcode 310000: sign not match");
    assert_eq!(wrong.count(), 0);
    h.stop().await;
}

#[tokio::test]
async fn alertmanager_gets_a_v2_array_resent_while_firing_and_a_resolve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let am = Receiver::start(Mode::Ok).await;
    let config = json!({"group_wait": "1s", "resend_every": "1m",
        "channels": [{"name": "am", "type": "alertmanager", "url": am.url("")}]});
    let h = Harness::start(dir.path(), settings(config, &[]), clock()).await;
    let observer = h.handle.observer();
    let mut snap = failed_run(&flow("settle", 2), "run-1", "HTTP 503");
    observer.run_finished(&snap);
    h.advance(2 * SEC, SEC).await;
    wait_for("the first post", || am.count() == 1).await;
    let first = am.delivered()[0].clone();
    assert_eq!(first.path, "/api/v2/alerts");
    let items = first.body.as_array().expect("a JSON array");
    assert_eq!(items.len(), 1);
    let labels = &items[0]["labels"];
    assert_eq!(
        (&labels["alertname"], &labels["flow"], &labels["node"], &labels["severity"], &labels["team"]),
        (&json!("MadeiraRunFailed"), &json!("settle"), &json!("root"), &json!("critical"), &json!("finance"))
    );
    assert_eq!(items[0]["annotations"]["run_id"], "run-1");
    assert!(items[0]["annotations"]["summary"].as_str().expect("summary").contains("root"));
    assert!(items[0]["startsAt"].is_string() && items[0].get("endsAt").is_none());

    h.advance(Duration::from_secs(61), SEC).await;
    wait_for("a re-send while firing", || am.count() == 2).await;
    assert!(am.delivered()[1].body[0].get("endsAt").is_none());

    drive(&mut snap, Command::MarkSuccess { node: 0 }, &HashMap::new());
    assert_eq!(snap.state, RunState::Success);
    observer.run_finished(&snap);
    h.advance(SEC, SEC).await;
    wait_for("the resolve", || am.count() == 3).await;
    let resolve = &am.delivered()[2].body[0];
    assert!(resolve["endsAt"].is_string(), "{resolve}");
    assert_eq!(resolve["labels"], labels.clone());
    h.advance(Duration::from_secs(180), 10 * SEC).await;
    assert_eq!(am.count(), 3, "nothing is re-sent once resolved");
    h.stop().await;
}

#[tokio::test]
async fn test_message_reaches_the_channel_and_unknown_channels_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let config =
        json!({"channels": [{"name": "hook", "type": "webhook", "url": hook.url("/h"), "secret_env": "S"}]});
    let h = Harness::start(dir.path(), settings(config, &[("S", "hook-secret")]), clock()).await;
    let outcome = h.handle.test("hook").await.expect("test");
    assert!(outcome.delivered, "{outcome:?}");
    let hit = &hook.delivered()[0];
    assert_eq!(hit.body["kind"], "test");
    let ts = hit.headers["x-madeira-timestamp"].to_str().expect("ts").parse::<i64>().expect("int");
    let expected = webhook_signature("hook-secret", ts, &hit.raw);
    assert_eq!(hit.headers["x-madeira-signature"].to_str().ok(), Some(expected.as_str()));
    let e = h.handle.test("nope").await.expect_err("unknown");
    assert_eq!(e.to_string(), "no alert channel named `nope`; configured channels: hook");
    h.stop().await;
}

#[tokio::test]
async fn other_sources_raise_warnings_that_group_by_key_and_resolve() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let config = json!({"group_wait": "2s", "channels": [{"name": "hook", "type": "webhook", "url": hook.url("/h")}],
        "routes": [{"severity": "warning", "channels": ["hook"]}]});
    let h = Harness::start(dir.path(), settings(config, &[]), clock()).await;
    let raise = || madeira_alert::Raise {
        key: "sidecar_lost|billing".into(),
        alertname: "MadeiraSidecarLost".into(),
        severity: madeira_alert::Severity::Warning,
        flow: None,
        node: None,
        labels: Default::default(),
        summary: "sidecar group billing: no heartbeat for 30s".into(),
        description: Some("host pay-01 stopped answering".into()),
        run_id: None,
        fallback_note: None,
        held_by: None,
    };
    h.handle.raise(raise());
    h.handle.raise(raise());
    h.advance(3 * SEC, SEC).await;
    wait_for("one warning", || hook.count() == 1).await;
    let alert = &hook.delivered()[0].body["alerts"][0];
    assert_eq!((&alert["severity"], &alert["count"]), (&json!("warning"), &json!(2)));
    assert_eq!(alert["alertname"], "MadeiraSidecarLost");
    h.handle.resolve("sidecar_lost|billing");
    h.advance(SEC, SEC).await;
    wait_for("resolved", || hook.count() == 2).await;
    assert_eq!(hook.delivered()[1].body["kind"], "resolved");
    h.stop().await;
}

#[tokio::test]
async fn an_overdue_confirmation_warns_and_its_answer_resolves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let config =
        json!({"group_wait": "1s", "channels": [{"name": "hook", "type": "webhook", "url": hook.url("/h")}]});
    let h = Harness::start(dir.path(), settings(config, &[]), clock()).await;
    let yaml = "flow: approve\nlabels: {team: fin}\nnodes:\n  prep: {run: {builtin: noop}}\n  confirm: {needs: [prep], manual: {prompt: check the diff, alert_after: 1h}}\n";
    let flow = std::sync::Arc::new(madeira_core::spec::parse_flow("approve.yaml", yaml).expect("flow"));
    let mut snap = madeira_core::RunSnapshot::new("run-9".into(), flow, json!({}));
    drive(&mut snap, Command::Start, &HashMap::new());
    assert_eq!(snap.nodes[1].state, NodeState::ManualConfirm);
    let observer = h.handle.observer();
    observer.confirm_overdue(&snap, "confirm");
    h.advance(2 * SEC, SEC).await;
    wait_for("the warning", || hook.count() == 1).await;
    let alert = &hook.delivered()[0].body["alerts"][0];
    assert_eq!(
        (&alert["alertname"], &alert["severity"]),
        (&json!("MadeiraConfirmOverdue"), &json!("warning"))
    );
    assert_eq!((&alert["node"], &alert["description"]), (&json!("confirm"), &json!("check the diff")));
    let answered = madeira_engine::RunEvent {
        run_id: "run-9".into(),
        flow: "approve".into(),
        node: Some("confirm".into()),
        from: "MANUAL_CONFIRM".into(),
        to: "SUCCESS".into(),
        cause: "confirm".into(),
        attempt: 0,
        reason: None,
        at_ms: 0,
    };
    observer.transitions(&[answered]);
    h.advance(SEC, SEC).await;
    wait_for("resolved", || hook.count() == 2).await;
    assert_eq!(hook.delivered()[1].body["kind"], "resolved");
    h.stop().await;
}
