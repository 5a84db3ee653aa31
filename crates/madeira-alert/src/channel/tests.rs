//! Exact payloads per channel, byte limits, signatures in URLs and bodies, and how
//! receivers' answers are read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::model::{Alert, AlertStatus, Cause, Severity};
use crate::secret::{Scrubber, Secret};

fn alert() -> Arc<Alert> {
    Arc::new(Alert {
        id: "a1".into(),
        key: "k".into(),
        alertname: "MadeiraRunFailed".into(),
        severity: Severity::Critical,
        status: AlertStatus::Firing,
        flow: Some("settle".into()),
        node: Some("pull".into()),
        labels: BTreeMap::from([
            ("team".to_string(), "fin".to_string()),
            ("cost-center".into(), "42".into()),
        ]),
        summary: "flow settle failed: root cause node pull (3 attempts)".into(),
        description: None,
        causes: vec![Cause {
            node: "pull".into(),
            error: Some("HTTP 503 上游不可用".into()),
            attempts: 3,
            skipped: vec!["verify".into(), "export".into()],
        }],
        runs: vec!["r1".into()],
        count: 1,
        fixed: 0,
        created_at: 1_700_000_000_000,
        notify_at: 1_700_000_000_000,
        updated_at: 1_700_000_000_000,
        resolved_at: None,
        fallback_note: None,
        resolution: None,
        recovered_by: None,
        resolved_by_run: None,
        moved: None,
        announced_at: None,
        announced_count: None,
        acknowledged: None,
        silenced: None,
        added: 0,
        holds: Vec::new(),
        holds_changes: 0,
        announced_holds: None,
        holds_added: 0,
    })
}

fn spec(kind: ChannelKind, url: &str, secret: Option<&str>) -> ChannelSpec {
    let url = Secret::new(url);
    let secret = secret.map(Secret::new);
    ChannelSpec {
        name: "c".into(),
        kind,
        scrubber: Scrubber::for_channel(&url, secret.as_ref()),
        url,
        secret,
        mentions: vec![],
        rate_count: 20,
        rate_per: Duration::from_secs(60),
        digest_wait: Duration::from_secs(10),
        timeout: Duration::from_secs(5),
    }
}

fn body(req: &Request) -> Value {
    serde_json::from_slice(&req.body).expect("json body")
}

const MARKDOWN: &str = "## [critical] MadeiraRunFailed · flow settle
**Root cause:** node `pull` failed after 3 attempts
**Error:** HTTP 503 上游不可用
**Skipped because of it:** verify, export (2)
[Run r1](http://m:7070/runs/r1)
`madeira rerun r1 pull --reason \"…\"`
`madeira mark-success r1 pull --reason \"…\"`
";

fn outgoing<'a>(content: &'a Content, mentions: &'a Mentions) -> Outgoing<'a> {
    Outgoing { content, mentions, now_ms: 1_700_000_000_000, base: Some("http://m:7070") }
}

#[test]
fn wecom_sends_markdown_and_switches_to_text_for_mentions() {
    let content = Content::Firing(alert());
    let none = Mentions::default();
    let req = build(&spec(ChannelKind::Wecom, "http://r/send?key=K", None), &outgoing(&content, &none))
        .expect("build");
    assert_eq!(body(&req), json!({"msgtype": "markdown", "markdown": {"content": MARKDOWN}}));
    let who = Mentions::parse(&["13800000000".into(), "lisi".into(), "@all".into()]);
    let req = build(&spec(ChannelKind::Wecom, "http://r/send?key=K", None), &outgoing(&content, &who))
        .expect("build");
    let b = body(&req);
    assert_eq!(b["msgtype"], "text");
    assert_eq!(b["text"]["mentioned_list"], json!(["lisi", "@all"]));
    assert_eq!(b["text"]["mentioned_mobile_list"], json!(["13800000000"]));
    assert!(b["text"]["content"].as_str().expect("text").starts_with("[critical] MadeiraRunFailed"));
}

#[test]
fn long_messages_are_cut_to_each_channel_limit() {
    let mut long = (*alert()).clone();
    long.causes[0].error = Some("错误".repeat(5_000));
    let content = Content::Firing(Arc::new(long));
    let none = Mentions::default();
    let wecom = build(&spec(ChannelKind::Wecom, "http://r/s?key=K", None), &outgoing(&content, &none))
        .expect("build");
    let text = body(&wecom)["markdown"]["content"].as_str().expect("content").to_string();
    assert!(text.len() <= 4096 && text.contains("truncated"), "{}", text.len());
    let ding =
        build(&spec(ChannelKind::Dingtalk, "http://r/s?access_token=T", None), &outgoing(&content, &none))
            .expect("build");
    assert!(ding.body.len() <= 20_000, "{}", ding.body.len());
    let feishu = build(&spec(ChannelKind::Feishu, "http://r/hook/x", None), &outgoing(&content, &none))
        .expect("build");
    assert!(feishu.body.len() <= 20_000);
}

#[test]
fn dingtalk_signs_in_the_query_and_mentions_mobiles_in_the_text() {
    let content = Content::Firing(alert());
    let who = Mentions::parse(&["13800000000".into()]);
    let spec = spec(ChannelKind::Dingtalk, "http://r/robot/send?access_token=T", Some("SECtest"));
    let req = build(&spec, &outgoing(&content, &who)).expect("build");
    assert_eq!(
        req.url.as_str(),
        "http://r/robot/send?access_token=T&timestamp=1700000000000&sign=aZLLrriXgn05YbwaGR7knYsLeJADjr9NwLaNNKpxh4g%3D"
    );
    let b = body(&req);
    assert_eq!(b["msgtype"], "markdown");
    assert_eq!(b["markdown"]["title"], "[critical] MadeiraRunFailed · flow settle");
    assert_eq!(b["markdown"]["text"], format!("@13800000000\n\n{MARKDOWN}"));
    assert_eq!(b["at"], json!({"atMobiles": ["13800000000"], "atUserIds": [], "isAtAll": false}));
}

#[test]
fn feishu_signs_in_the_body() {
    let content = Content::Resolved(alert());
    let none = Mentions::default();
    let req = build(&spec(ChannelKind::Feishu, "http://r/hook/x", Some("test")), &outgoing(&content, &none))
        .expect("build");
    let b = body(&req);
    assert_eq!(b["timestamp"], "1700000000");
    assert_eq!(b["sign"], "eSJQnOl8XqPTMPHWz9e5IzeHS/tqoc68g2967ekIPmg=");
    assert_eq!(b["msg_type"], "text");
    assert!(
        b["content"]["text"].as_str().expect("text").starts_with("[resolved] MadeiraRunFailed · flow settle")
    );
}

#[test]
fn webhook_signature_header_covers_the_exact_body() {
    let content = Content::Firing(alert());
    let none = Mentions::default();
    let req = build(&spec(ChannelKind::Webhook, "http://r/hook", Some("s3cret")), &outgoing(&content, &none))
        .expect("build");
    let header = |n: &str| req.headers.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
    assert_eq!(header("x-madeira-timestamp").as_deref(), Some("1700000000"));
    assert_eq!(header("x-madeira-signature"), crate::sign::webhook(1_700_000_000, "s3cret", &req.body));
    let b = body(&req);
    assert_eq!(b["kind"], "firing");
    assert_eq!(b["alerts"][0]["causes"][0]["skipped"], json!(["verify", "export"]));
    assert_eq!(b["alerts"][0]["run_url"], "http://m:7070/runs/r1");
}

/// A resolved alert has no failed run left on it: its payload links the run
/// whose success resolved it instead of `"run_url": null`.
#[test]
fn a_resolved_payload_links_the_run_that_resolved_it() {
    let mut resolved = (*alert()).clone();
    resolved.status = AlertStatus::Resolved;
    resolved.runs.clear();
    resolved.resolved_by_run = Some("r9".into());
    let content = Content::Resolved(Arc::new(resolved));
    let none = Mentions::default();
    let req =
        build(&spec(ChannelKind::Webhook, "http://r/hook", None), &outgoing(&content, &none)).expect("build");
    assert_eq!(body(&req)["alerts"][0]["run_url"], "http://m:7070/runs/r9");
}

#[test]
fn alertmanager_gets_a_v2_array_with_endsat_on_resolve() {
    let firing = Content::Firing(alert());
    let none = Mentions::default();
    let spec = spec(ChannelKind::Alertmanager, "http://am:9093/", None);
    let req = build(&spec, &outgoing(&firing, &none)).expect("build");
    assert_eq!(req.url.as_str(), "http://am:9093/api/v2/alerts");
    let b = body(&req);
    assert_eq!(
        b[0]["labels"],
        json!({"alertname": "MadeiraRunFailed", "severity": "critical", "flow": "settle", "node": "pull",
               "alert_id": "a1", "team": "fin", "cost_center": "42"})
    );
    assert_eq!(b[0]["annotations"]["run_id"], "r1");
    assert_eq!(b[0]["startsAt"], "2023-11-14T22:13:20.000Z");
    assert_eq!(b[0]["generatorURL"], "http://m:7070/runs/r1");
    assert!(b[0].get("endsAt").is_none());
    let mut done = (*alert()).clone();
    done.status = AlertStatus::Resolved;
    done.resolved_at = Some(1_700_000_060_000);
    let resolved = Content::Resolved(Arc::new(done));
    let b = body(&build(&spec, &outgoing(&resolved, &none)).expect("build"));
    assert_eq!(b[0]["endsAt"], "2023-11-14T22:14:20.000Z");
}

#[test]
fn robot_answers_are_read() {
    assert_eq!(read_answer(ChannelKind::Wecom, 200, r#"{"errcode":0,"errmsg":"ok"}"#), Answer::Ok);
    assert!(matches!(
        read_answer(ChannelKind::Wecom, 200, r#"{"errcode":45009,"errmsg":"freq"}"#),
        Answer::SlowDown(_)
    ));
    assert!(matches!(read_answer(ChannelKind::Dingtalk, 200, r#"{"errcode":130101}"#), Answer::SlowDown(_)));
    assert_eq!(
        read_answer(ChannelKind::Dingtalk, 200, r#"{"errcode":310000,"errmsg":"sign not match"}"#),
        Answer::Failed("errcode 310000: sign not match".into())
    );
    assert_eq!(read_answer(ChannelKind::Feishu, 200, r#"{"code":0,"msg":"success"}"#), Answer::Ok);
    assert!(matches!(
        read_answer(ChannelKind::Feishu, 200, r#"{"code":19021,"msg":"sign"}"#),
        Answer::Failed(_)
    ));
    assert!(matches!(read_answer(ChannelKind::Webhook, 503, "down"), Answer::Failed(_)));
    assert!(matches!(read_answer(ChannelKind::Alertmanager, 429, ""), Answer::SlowDown(_)));
    assert_eq!(read_answer(ChannelKind::Alertmanager, 200, ""), Answer::Ok);
}

#[test]
fn dingtalk_and_feishu_carry_updates_and_reminders() {
    let mut grown = (*alert()).clone();
    (grown.count, grown.added, grown.runs) = (31, 30, vec!["r1".into(), "r31".into()]);
    let none = Mentions::default();
    let update = Content::Update(Arc::new(grown.clone()));
    let req = build(
        &spec(ChannelKind::Dingtalk, "http://d/robot/send?access_token=T", None),
        &outgoing(&update, &none),
    )
    .expect("build");
    let b = body(&req);
    assert_eq!(b["markdown"]["title"], "[critical · update] MadeiraRunFailed · flow settle");
    let text = b["markdown"]["text"].as_str().expect("text");
    assert!(
        text.contains("**Update:** 31 failed runs now, 30 new since the last message (firing since 2023-11-14T22:13:20.000Z)"),
        "{text}"
    );
    assert!(text.contains("[Run r31](http://m:7070/runs/r31)"), "the newest run: {text}");
    let reminder = Content::Reminder(Arc::new(grown));
    let req = build(
        &spec(ChannelKind::Feishu, "http://f/open-apis/bot/v2/hook/x", None),
        &outgoing(&reminder, &none),
    )
    .expect("build");
    let text = body(&req)["content"]["text"].as_str().expect("text").to_string();
    assert!(text.starts_with("[critical · reminder] MadeiraRunFailed · flow settle\n"), "{text}");
    assert!(
        text.contains("Reminder: still unresolved: 31 failed runs, firing since 2023-11-14T22:13:20.000Z"),
        "{text}"
    );
    let am = build(&spec(ChannelKind::Alertmanager, "http://am:9093", None), &outgoing(&reminder, &none))
        .expect("build");
    let items = body(&am);
    assert_eq!(items[0]["annotations"]["run_id"], "r31", "re-posted with the newest run: {items}");
    assert!(items[0].get("endsAt").is_none(), "still firing: {items}");
}
