//! Alerts end to end: `madeira dev --config FILE` with channels pointing at a local
//! receiver. A run whose root fails after 3 attempts with 6 skipped nodes yields
//! exactly one WeCom message naming the root node and its error; the API and the
//! CLI list it; the webhook keys and signing secrets appear in no log line, API
//! answer or CLI output.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::Uri;
use serde_json::{Value, json};

use crate::support::{BIN, Dev, wait_until};

const WECOM_KEY: &str = "wecom-key-5f0c9a1e77d2";
const DING_TOKEN: &str = "ding-token-3b8e51c0aa94";
const DING_SECRET: &str = "SECding-secret-90d1e2f3";

type Hits = Arc<Mutex<Vec<(String, Value)>>>;

/// A receiver on 127.0.0.1:0: `/down/*` answers 503, everything else a robot's `errcode: 0`.
async fn receiver() -> (String, Hits) {
    let hits: Hits = Arc::default();
    let app = Router::new()
        .fallback(|State(hits): State<Hits>, uri: Uri, body: Bytes| async move {
            let path = uri.path_and_query().map(|p| p.to_string()).unwrap_or_default();
            if path.starts_with("/down") {
                return (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!("down")));
            }
            hits.lock().expect("hits").push((path, serde_json::from_slice(&body).unwrap_or(Value::Null)));
            (axum::http::StatusCode::OK, axum::Json(json!({"errcode": 0, "errmsg": "ok"})))
        })
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, hits)
}

/// `madeira dev --config FILE --log-level debug` with the channels' URLs and
/// secrets in its environment, keeping every stderr line.
fn start_dev(dir: &Path, config: &Path, receiver: &str) -> (Dev, Arc<Mutex<String>>) {
    let wecom = format!("{receiver}/cgi-bin/webhook/send?key={WECOM_KEY}");
    let ding = format!("{receiver}/down/robot/send?access_token={DING_TOKEN}");
    let env = [("WECOM_URL", wecom.as_str()), ("DING_URL", ding.as_str()), ("DING_SECRET", DING_SECRET)];
    crate::support::start_logged(dir, config, &env)
}

const FLOW: &str = "flow: settle-alerts
labels: {team: finance}
defaults:
  retry: {attempts: 3, backoff: 50ms, factor: 1, max_backoff: 50ms, jitter: 0s}
nodes:
  pull_ledger: {run: {builtin: fail, message: 'HTTP 503 from ledger'}}
  verify: {needs: [pull_ledger], run: {builtin: noop}}
  coupons: {needs: [pull_ledger], run: {builtin: noop}}
  receivables: {needs: [verify, coupons], run: {builtin: noop}}
  refunds: {needs: [verify], run: {builtin: noop}}
  export: {needs: [receivables], run: {builtin: noop}}
  notify: {needs: [export], run: {builtin: noop}}
";

async fn cli(base: &str, args: &[&str]) -> (i32, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let base = base.to_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(BIN).args(&args).env("MADEIRA_SERVER", base).output().expect("run madeira")
    })
    .await
    .expect("join");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_wecom_message_per_failed_run_and_no_secret_anywhere() {
    let (receiver, hits) = receiver().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("madeira.yaml");
    std::fs::write(
        &config,
        "alerts:\n  group_wait: 1s\n  channels:\n    - {name: fin-wecom, type: wecom, url_env: WECOM_URL}\n    - {name: ops-ding, type: dingtalk, url_env: DING_URL, secret_env: DING_SECRET}\n  routes:\n    - {match: {team: finance}, channels: [fin-wecom, ops-ding]}\n",
    )
    .expect("write config");
    let (dev, logs) = start_dev(dir.path(), &config, &receiver);
    dev.put_flow(FLOW).await;
    let run_id = dev.trigger("settle-alerts", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "FAILED");
    assert_eq!(run["nodes"]["pull_ledger"]["attempts"], 3);

    // Wait until the API says the WeCom delivery was sent and DingTalk was tried.
    let alerts = wait_until(Duration::from_secs(20), "the alert delivered", async || {
        let (status, body) = dev.get("/alerts").await;
        assert_eq!(status, 200, "{body}");
        let deliveries = body["alerts"][0]["deliveries"].as_array().cloned().unwrap_or_default();
        let sent = deliveries.iter().any(|d| d["channel"] == "fin-wecom" && d["status"] == "sent");
        let tried =
            deliveries.iter().any(|d| d["channel"] == "ops-ding" && d["attempts"].as_u64() >= Some(1));
        if sent && tried { Ok(body) } else { Err(body.to_string()) }
    })
    .await;
    assert_eq!(alerts["alerts"].as_array().map(Vec::len), Some(1), "one alert for one failed run");
    let hits = hits.lock().expect("hits").clone();
    assert_eq!(hits.len(), 1, "exactly one WeCom message: {hits:?}");
    assert_eq!(hits[0].0, format!("/cgi-bin/webhook/send?key={WECOM_KEY}"));
    let content = hits[0].1["markdown"]["content"].as_str().expect("markdown content");
    assert!(content.starts_with("## [critical] MadeiraRunFailed · flow settle-alerts\n"), "{content}");
    assert!(content.contains("**Root cause:** node `pull_ledger` failed after 3 attempts"), "{content}");
    assert!(content.contains("**Error:** HTTP 503 from ledger"), "{content}");
    assert!(content.contains("(6)"), "six skipped nodes: {content}");
    assert!(content.contains(&format!("madeira rerun {run_id} pull_ledger")), "{content}");
    assert!(!content.contains("verify failed"), "skipped nodes never alert on their own");

    let ding = alerts["alerts"][0]["deliveries"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["channel"] == "ops-ding").cloned())
        .expect("ding delivery");
    assert_eq!(ding["status"], "pending");
    assert!(ding["last_error"].as_str().is_some_and(|e| e.starts_with("HTTP 503")), "{ding}");

    let (code, list_text) = cli(&dev.base, &["alerts"]).await;
    assert_eq!(code, 0, "{list_text}");
    assert!(list_text.contains("firing") && list_text.contains("fin-wecom"), "{list_text}");
    let (_, list_json) = cli(&dev.base, &["alerts", "--output", "json"]).await;
    let (code, test_out) = cli(&dev.base, &["alerts", "test", "fin-wecom"]).await;
    assert_eq!(code, 0, "{test_out}");
    let (code, failed_test) = cli(&dev.base, &["alerts", "test", "ops-ding"]).await;
    assert_eq!(code, 1, "{failed_test}");
    let (_, unknown) = cli(&dev.base, &["alerts", "test", "nope"]).await;
    assert!(unknown.contains("no alert channel named `nope`"), "{unknown}");

    let logs = logs.lock().expect("logs").clone();
    assert!(logs.contains("alert delivery failed"), "the DingTalk failure is logged: {logs}");
    let outputs = [
        ("logs", logs),
        ("API", alerts.to_string()),
        ("CLI list", list_text),
        ("CLI json", list_json),
        ("CLI test", test_out),
        ("CLI failed test", failed_test),
    ];
    for (what, text) in outputs {
        for secret in [WECOM_KEY, DING_TOKEN, DING_SECRET] {
            assert!(!text.contains(secret), "{what} shows a secret ({secret}):\n{text}");
        }
    }
}

/// Polls the receiver until it holds `n` messages, or panics after `secs`.
async fn hits_of(hits: &Hits, n: usize, secs: u64) -> Vec<(String, Value)> {
    let what = format!("{n} message(s)");
    wait_until(Duration::from_secs(secs), &what, async || {
        let now = hits.lock().expect("hits").clone();
        if now.len() >= n { Ok(now) } else { Err(format!("{now:?}")) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overdue_message_shows_the_rendered_prompt_and_the_fallback_says_it_ran() {
    let (receiver, hits) = receiver().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("madeira.yaml");
    std::fs::write(
        &config,
        "alerts:\n  group_wait: 500ms\n  channels:\n    - {name: fin-hook, type: webhook, url_env: WECOM_URL}\n  routes:\n    - {match: {team: finance}, channels: [fin-hook]}\n",
    )
    .expect("write config");
    let (dev, _logs) = start_dev(dir.path(), &config, &receiver);
    dev.put_flow(
        "flow: sign-off
labels: {team: finance}
nodes:
  calc: {run: {builtin: noop, outputs: {diff: '12.50'}}}
  approve:
    needs: [calc]
    manual:
      prompt: 'diff is {{ nodes.calc.outputs.diff }} CNY'
      alert_after: 1s
      fallback_after: 4s
      fallback: {builtin: noop, outputs: {drafted: true}}
",
    )
    .await;
    let run_id = dev.trigger("sign-off", json!({})).await;
    let hits = hits_of(&hits, 2, 20).await;
    assert_eq!(hits.len(), 2, "firing, then resolved by the fallback: {hits:?}");
    let (firing, resolved) = (&hits[0].1, &hits[1].1);
    assert_eq!(firing["kind"], "firing", "{firing}");
    assert_eq!(firing["alerts"][0]["alertname"], "MadeiraConfirmOverdue");
    assert_eq!(
        firing["alerts"][0]["description"], "diff is 12.50 CNY",
        "rendered, not the template: {firing}"
    );
    assert!(!firing.to_string().contains("{{"), "{firing}");
    assert_eq!(resolved["kind"], "resolved", "{resolved}");
    let title = resolved["title"].as_str().unwrap_or_default();
    assert!(title.starts_with("[fallback ran] MadeiraConfirmOverdue"), "{resolved}");
    let text = resolved["text"].as_str().unwrap_or_default();
    assert!(text.contains("no one confirmed within 4s: the fallback ran, check its result"), "{resolved}");
    assert!(!text.contains("the condition cleared"), "{resolved}");
    let run = dev.finished(&run_id).await;
    assert_eq!(run["nodes"]["approve"]["outputs"]["drafted"], true);
}
