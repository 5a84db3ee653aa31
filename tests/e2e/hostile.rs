//! Hostile and careless input against the real binary: one bad input never hurts
//! the control plane or other flows (issue 13). A 100 MB HTTP response, a
//! pathological CEL condition, forged and reused idempotency keys, and the JSON
//! error shape for what the framework rejects.

use std::process::Command;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use serde_json::{Value, json};

use crate::support::{BIN, Dev, client, status_of};

/// A local HTTP server whose every answer is a 100 MB body, streamed in 64 KiB
/// chunks without `Content-Length`, so nothing short of reading it finds its size.
async fn huge_body_server() -> String {
    let app = axum::Router::new().fallback(|| async {
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let chunks = (0..1600).map(move |_| Ok::<_, std::io::Error>(chunk.clone()));
        Body::from_stream(futures::stream::iter(chunks))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/report", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

/// `field` (e.g. `VmRSS`, `VmHWM`) of `/proc/PID/status`, in bytes.
fn proc_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status.lines().find(|l| l.starts_with(field)).expect("field");
    line.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()).expect("kB") * 1024
}

#[tokio::test]
async fn a_100_mb_http_response_fails_the_node_and_memory_stays_flat() {
    let url = huge_body_server().await;
    let (_dir, dev) = Dev::start();
    dev.put_flow(&format!("flow: huge\nnodes:\n  fetch: {{run: {{http: {{url: '{url}', method: GET}}}}}}\n"))
        .await;
    let pid = dev.child.id();
    // Reset the peak (VmHWM) so it measures this test only.
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
    let before = proc_kb(pid, "VmRSS");
    let run_id = dev.trigger("huge", json!({})).await;
    let run = dev.wait_run(&run_id, 60, |r| r["status"] == "FAILED" || r["status"] == "SUCCESS").await;
    let peak = proc_kb(pid, "VmHWM").max(proc_kb(pid, "VmRSS"));
    assert_eq!(status_of(&run, "fetch"), "FAILED", "{run}");
    let reason = run["nodes"]["fetch"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("over http_executor.max_response_bytes (1048576 bytes)"), "{reason}");
    let grew = peak.saturating_sub(before);
    eprintln!("huge response: RSS before {} MB, peak after {} MB", before >> 20, peak >> 20);
    assert!(grew < 20 << 20, "control plane grew by {} MB reading one response", grew >> 20);
}

fn chain_flow(name: &str, n: usize) -> String {
    let mut yaml = format!("flow: {name}\nnodes:\n  n0: {{run: {{builtin: noop}}}}\n");
    for i in 1..n {
        yaml.push_str(&format!("  n{i}: {{needs: [n{}], run: {{builtin: noop}}}}\n", i - 1));
    }
    yaml
}

async fn chain_latency(dev: &Dev) -> Duration {
    let started = Instant::now();
    let run_id = dev.trigger("chain100", json!({})).await;
    let run = dev.wait_run(&run_id, 120, |r| r["status"] == "SUCCESS" || r["status"] == "FAILED").await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    started.elapsed()
}

#[tokio::test]
async fn a_pathological_condition_does_not_stall_other_flows() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(&chain_flow("chain100", 100)).await;
    dev.put_flow(
        "flow: nasty\nnodes:\n  a: {run: {builtin: noop}}\n  b:\n    needs: [a]\n    when: \
         'params.xs.exists(i, params.xs.exists(j, params.xs.exists(k, false)))'\n    run: {builtin: noop}\n",
    )
    .await;
    chain_latency(&dev).await; // warm up
    let mut quiet = Duration::ZERO;
    for _ in 0..3 {
        quiet = quiet.max(chain_latency(&dev).await);
    }
    // 300 elements: 27 million steps without a budget (5.7 s in a release build).
    let xs: Vec<u32> = (0..300).collect();
    let mut nasty = Vec::new();
    for _ in 0..5 {
        nasty.push(dev.trigger("nasty", json!({"xs": xs})).await);
    }
    let loaded = chain_latency(&dev).await;
    for run_id in &nasty {
        let run = dev.finished(run_id).await;
        assert_eq!(status_of(&run, "b"), "FAILED", "{run}");
        let reason = run["nodes"]["b"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("over the evaluation budget"), "{reason}");
    }
    eprintln!("chain100: quiet {quiet:?}, beside 5 pathological conditions {loaded:?}");
    // 2x of a quiet run, plus slack for a shared CI machine.
    assert!(loaded <= quiet * 2 + Duration::from_millis(500), "quiet {quiet:?}, loaded {loaded:?}");
}

#[tokio::test]
async fn caller_keys_cannot_take_cron_or_event_keys_and_reuse_with_other_params_is_refused() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: keys\ntriggers:\n  - event: pay.closed\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let runs = "/flows/keys/runs";
    for forged in ["cron:keys:2030-01-01T00:00:00.000Z", "event:pay.closed:7", "EXEC:x"] {
        let (status, body) =
            dev.post(runs, json!({"params": {"evil": true}}), &[("Idempotency-Key", forged)]).await;
        assert_eq!(status, 400, "{forged}: {body}");
        assert_eq!(body["error"]["code"], "bad_idempotency_key", "{body}");
        assert_eq!(body["error"]["details"]["header"], "Idempotency-Key", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("Idempotency-Key") && message.contains("reserves"), "{message}");
    }
    // The real event still gets its own run, with its own payload.
    let (status, body) =
        dev.post("/events", json!({"type": "pay.closed", "id": "7", "payload": {"real": true}}), &[]).await;
    assert_eq!(status, 200, "{body}");
    let event_run = body["runs"][0].as_str().expect("a run").to_string();
    let (_, run) = dev.get(&format!("/runs/{event_run}")).await;
    assert_eq!(run["params"], json!({"real": true}), "{run}");

    // Same key, same params: the first run again. Other params: 409 naming it.
    let key = [("Idempotency-Key", "order-42")];
    let (status, first) = dev.post(runs, json!({"params": {"amount": 1}}), &key).await;
    assert_eq!(status, 201, "{first}");
    let first_id = first["run_id"].as_str().expect("run_id").to_string();
    let (status, again) = dev.post(runs, json!({"params": {"amount": 1}}), &key).await;
    assert_eq!((status, again["run_id"].as_str()), (200, Some(first_id.as_str())), "{again}");
    let (status, reused) = dev.post(runs, json!({"params": {"amount": 2}}), &key).await;
    assert_eq!(status, 409, "{reused}");
    assert_eq!(reused["error"]["code"], "idempotency_key_reused", "{reused}");
    assert_eq!(reused["error"]["details"]["run_id"], Value::from(first_id.clone()), "{reused}");
    assert!(reused["error"]["message"].as_str().unwrap_or_default().contains(&first_id), "{reused}");
}

#[tokio::test]
async fn framework_rejections_answer_in_the_json_error_shape() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: shape\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let big = format!("{{\"params\": {{\"x\": \"{}\"}}}}", "a".repeat(2 << 20));
    let cases = [
        // Its own client: the server closes that connection without reading the body.
        (
            client(None)
                .post(dev.url("/flows/shape/runs"))
                .header("content-type", "application/json")
                .body(big),
            413,
            "body_too_large",
        ),
        (dev.http.delete(dev.url("/runs")), 405, "method_not_allowed"),
        (dev.http.get(dev.url("/no/such/route")), 404, "not_found"),
        (dev.http.get(dev.url("/flows/shape/versions/abc")), 400, "bad_request"),
        (
            dev.http
                .post(dev.url("/flows/shape/runs"))
                .header("content-type", "application/json")
                .body("{not json"),
            400,
            "bad_request",
        ),
        (dev.http.post(dev.url("/flows/shape/runs")).body("{}"), 415, "unsupported_media_type"),
    ];
    for (request, status, code) in cases {
        let resp = request.send().await.expect("send");
        let got = resp.status().as_u16();
        let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!((got, body["error"]["code"].as_str()), (status, Some(code)), "{ct} {body}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    }
}

#[test]
fn a_password_in_the_server_url_stays_out_of_cli_errors() {
    // Nothing listens on port 9 of loopback: the CLI fails to connect.
    let out = Command::new(BIN)
        .args(["runs", "--server", "http://sre:hunter2-secret@127.0.0.1:9"])
        .env_remove("MADEIRA_SERVER")
        .output()
        .expect("run the CLI");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(stderr.contains("http://sre:***@127.0.0.1:9"), "{stderr}");
}

#[test]
fn a_secret_shared_by_two_token_entries_refuses_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = |auth: &str| {
        let config = dir.path().join("madeira.yaml");
        let db = dir.path().join("madeira.db");
        let text = format!("http: 127.0.0.1:0\ngrpc: 127.0.0.1:0\nstore: sqlite://{}\n{auth}", db.display());
        std::fs::write(&config, text).expect("write config");
        let out = Command::new(BIN)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("MADEIRA_T_A", "shared-secret-0123456789")
            .env("MADEIRA_T_B", "shared-secret-0123456789")
            .env("MADEIRA_T_C", "other-secret-0123456789ab")
            .output()
            .expect("run serve");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (code, stderr) = serve(
        "auth:\n  tokens:\n    - {name: sre, role: operator, token_env: MADEIRA_T_A}\n    \
         - {name: ci, role: admin, token_env: MADEIRA_T_B}\n",
    );
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("auth.tokens `sre` and auth.tokens `ci` have the same secret"), "{stderr}");
    let (code, stderr) = serve(
        "auth:\n  tokens:\n    - {name: sre, role: operator, token_env: MADEIRA_T_C}\n  sidecar_tokens:\n    \
         - {group: billing, token_env: MADEIRA_T_C}\n",
    );
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("auth.tokens `sre` and auth.sidecar_tokens `billing`"), "{stderr}");
    assert!(!stderr.contains("other-secret"), "the secret itself is never shown: {stderr}");
}

#[tokio::test]
async fn serve_refuses_loopback_http_targets_unless_listed() {
    let url = crate::webhook::Webhook::start().await.url;
    let dir = tempfile::tempdir().expect("tempdir");
    let token = "hostile-admin-token-0123456789";
    let flow = format!("flow: local\nnodes:\n  call: {{run: {{http: {{url: '{url}', method: POST}}}}}}\n");
    for (extra, want) in [("", "FAILED"), ("http_executor: {allow_hosts: ['127.0.0.1']}\n", "SUCCESS")] {
        let config = dir.path().join("madeira.yaml");
        let text = format!(
            "http: 127.0.0.1:0\nstore: sqlite://{}\n{extra}auth:\n  tokens:\n    - {{name: ci, role: admin, token_env: MADEIRA_T_HOSTILE}}\n",
            dir.path().join("madeira.db").display()
        );
        std::fs::write(&config, text).expect("write config");
        let dev = Dev::serve(&config, &[("MADEIRA_T_HOSTILE", token)], Some(token));
        dev.put_flow(&flow).await;
        let run_id = dev.trigger("local", json!({})).await;
        let run = dev.finished(&run_id).await;
        assert_eq!(status_of(&run, "call"), want, "{extra}: {run}");
        if want == "FAILED" {
            let reason = run["nodes"]["call"]["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("loopback addresses are refused in `serve`"), "{reason}");
            assert!(reason.contains("http_executor.allow_hosts"), "{reason}");
        }
    }
}
