//! Framework answers an operator meets first (issue 33, item 7): a wrong method's
//! 405 names the allowed ones; `--server` secrets never appear in the CLI's
//! errors; `validate --config` and `apply` check message sources and name the
//! real file:line; a message published right after `pause` answered starts no
//! run until `resume`.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::brokers::{dev_with_source, flow_yaml, fresh, redis_url, runs_of, source_config};
use crate::messages_redis::{connection, publish};
use crate::support::{BIN, Dev, wait_until};

#[tokio::test]
async fn a_wrong_method_answers_405_naming_the_allowed_methods() {
    let (_dir, dev) = Dev::start();
    let resp = dev.http.patch(dev.url("/runs")).send().await.expect("patch");
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(resp.headers()["allow"], "GET,HEAD");
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(
        body["error"],
        json!({"code": "method_not_allowed", "details": {"allow": "GET,HEAD"},
               "message": "PATCH is not allowed on /api/v1/runs; use GET,HEAD"})
    );
    let resp = dev.http.delete(format!("{}/healthz", dev.base)).send().await.expect("delete");
    assert_eq!(resp.status().as_u16(), 405);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["error"]["details"]["allow"], "GET,HEAD", "{body}");
}

#[test]
fn server_secrets_never_appear_in_cli_errors() {
    for server in [
        "http://127.0.0.1:1/?token=Secret",
        "http://127.0.0.1:1/?a=1&access_token=Secret",
        "http://sre:Secret@127.0.0.1:1",
        "http://Secret@127.0.0.1:1/",
        "http://127.0.0.1:1/#Secret",
    ] {
        let out = Command::new(BIN)
            .args(["runs", "--server", server])
            .env_remove("MADEIRA_SERVER")
            .env_remove("MADEIRA_TOKEN")
            .output()
            .expect("run madeira");
        assert!(!out.status.success(), "{server}: no server answers there");
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!text.contains("Secret"), "{server}: the secret is printed: {text}");
        assert!(text.contains("127.0.0.1:1"), "{server}: the error still names the server: {text}");
    }
}

const UNKNOWN_SOURCE: &str = "flow: msg-unknown\n\
    triggers:\n\
    \x20 # the trigger below names no configured source\n\
    \x20 - message: {source: nope, stream: s, group: g}\n\
    nodes:\n\
    \x20 a: {run: {builtin: noop}}\n";

#[test]
fn validate_with_a_config_checks_message_sources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = source_config(dir.path(), "redis_streams", "");
    let flow = dir.path().join("msg.yaml");
    std::fs::write(&flow, UNKNOWN_SOURCE).expect("write");
    let out =
        Command::new(BIN).arg("validate").arg("--config").arg(&config).arg(&flow).output().expect("validate");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let expected = format!("{}:4: unknown message source `nope`; configured: bus", flow.display());
    assert_eq!(text.trim(), expected);
    // Without a config there is nothing to check the name against.
    let out = Command::new(BIN).arg("validate").arg(&flow).output().expect("validate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[tokio::test]
async fn apply_names_the_real_file_and_line_of_an_unknown_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A port nothing listens on: apply refuses before any consumer would start.
    let dev = dev_with_source(dir.path(), "redis_streams", "redis://127.0.0.1:1");
    let flow = dir.path().join("msg.yaml");
    std::fs::write(&flow, UNKNOWN_SOURCE).expect("write");
    let out = dev.cli(&["apply", "-f", flow.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let expected = format!("{}:4: unknown message source `nope`; configured: bus", flow.display());
    assert!(text.contains(&expected), "{text}");
    assert!(!text.contains("msg-unknown.yaml"), "the server's name for the file: {text}");
}

/// Before: the consumer kept taking messages for up to a second after `pause`
/// answered (it reads the flow list once a second), so these made runs while
/// the flow read paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_published_right_after_pause_starts_no_run_until_resume() {
    let Some(url) = redis_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dev_with_source(dir.path(), "redis_streams", &url);
    let (flow, stream) = (fresh("pause-race"), fresh("madeira:test:pause"));
    dev.put_flow(&flow_yaml(&flow, &format!("stream: {stream}, group: g"), "", "")).await;
    let mut conn = connection(&url).await;
    // The consumer is up: a first message makes a run.
    publish(&mut conn, &stream, &[("first".into(), br#"{"id": "first"}"#.to_vec())]).await;
    wait_runs(&dev, &flow, 1, 30).await;

    let (status, body) = dev.post(&format!("/flows/{flow}/pause"), json!({"reason": "test"}), &[]).await;
    assert_eq!(status, 200, "{body}");
    // Published over the next 0.3 s, well inside the consumer's 1 s look at the flows.
    for i in 0..6 {
        let body = json!({"id": format!("after-pause-{i}")}).to_string().into_bytes();
        publish(&mut conn, &stream, &[(format!("after-pause-{i}"), body)]).await;
        // Spreading the messages over time is the point (see above), not a wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The consumer notices the pause and stops; by then nothing more has run.
    wait_until(Duration::from_secs(10), "the consumer to stop", async || {
        let (_, sources) = dev.get("/sources").await;
        let consumers = sources["sources"][0]["consumers"].as_array().cloned().unwrap_or_default();
        let paused = consumers.iter().any(|c| c["flow"] == flow.as_str() && c["state"] == "paused");
        if paused { Ok(()) } else { Err(sources.to_string()) }
    })
    .await;
    assert_eq!(runs_of(&dev, &flow).await.len(), 1, "no run while paused");
    let (status, flow_view) = dev.get(&format!("/flows/{flow}")).await;
    assert_eq!((status, &flow_view["paused"]), (200, &json!(true)), "{flow_view}");

    // Resumed: the messages kept in the broker run, one run each.
    let (status, body) = dev.post(&format!("/flows/{flow}/resume"), json!({"reason": "test"}), &[]).await;
    assert_eq!(status, 200, "{body}");
    wait_runs(&dev, &flow, 7, 60).await;
    let _: () = redis::AsyncCommands::del(&mut conn, &[stream.as_str()]).await.expect("DEL");
}

async fn wait_runs(dev: &Dev, flow: &str, n: usize, secs: u64) {
    let what = format!("{n} runs of {flow}");
    let runs = wait_until(Duration::from_secs(secs), &what, async || {
        let runs = runs_of(dev, flow).await.len();
        if runs >= n { Ok(runs) } else { Err(format!("{runs} runs")) }
    })
    .await;
    assert_eq!(runs, n, "{flow}: one run per message");
}
