//! The HTTP server against a browser and a guesser (issue 34, items 8 and 9):
//! `madeira dev` refuses JSON sent as `text/plain`, a foreign `Host` (DNS
//! rebinding) and a foreign `Origin` (a cross-origin page) while the CLI and its
//! own pages keep working; `serve` answers 429 to an address that keeps guessing
//! tokens and logs each refusal with that address (never the token); a client
//! that never finishes its headers is closed; a sign-in `next` with a control
//! character is no 5xx.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{BIN, Dev, client, wait_until};

const ADMIN: &str = "admin-token-0123456789abcdef";

/// The server's header read deadline (`madeira_server::HEADER_READ_TIMEOUT`).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends `request` on a new connection and returns the status code and the whole
/// answer (the request should say `Connection: close`).
async fn raw(base: &str, request: &str) -> (u16, String) {
    let addr = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("an answer within 10 s")
        .expect("read");
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

async fn run_count(dev: &Dev, flow: &str) -> usize {
    let (status, body) = dev.get(&format!("/runs?flow={flow}")).await;
    assert_eq!(status, 200, "{body}");
    body["runs"].as_array().map(Vec::len).unwrap_or_else(|| panic!("runs: {body}"))
}

#[tokio::test]
async fn dev_refuses_text_plain_foreign_hosts_and_origins_and_serves_its_own() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: target\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let runs = dev.url("/flows/target/runs");
    let port = dev.base.rsplit(':').next().expect("port").to_string();

    // What a cross-origin page's no-cors fetch sends: JSON as text/plain.
    let resp = dev
        .http
        .post(&runs)
        .header("content-type", "text/plain;charset=UTF-8")
        .body(r#"{"params": {}}"#)
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status().as_u16(), 415);
    let body: Value = resp.json().await.expect("json error");
    assert_eq!(body["error"]["code"], "unsupported_media_type", "{body}");
    // And the same with the browser's Origin, and a bodiless cancel-style POST.
    let foreign = dev
        .http
        .post(&runs)
        .header("origin", "https://evil.example")
        .json(&json!({"params": {}}))
        .send()
        .await
        .expect("post");
    assert_eq!(foreign.status().as_u16(), 403);
    let body: Value = foreign.json().await.expect("json error");
    assert_eq!(body["error"]["code"], "cross_origin", "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("evil.example")), "{body}");
    let empty = dev.http.post(&runs).header("origin", "null").send().await.expect("post");
    assert_eq!(empty.status().as_u16(), 403);
    assert_eq!(run_count(&dev, "target").await, 0, "no refused request created a run");

    // DNS rebinding: the page's own name reaches loopback; the API and the console refuse it.
    for path in ["/api/v1/runs", "/", "/runs"] {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: rebind.evil.example:{port}\r\nConnection: close\r\n\r\n");
        let (status, answer) = raw(&dev.base, &request).await;
        assert_eq!(status, 421, "{path}: {answer}");
        assert!(answer.contains("foreign_host") && answer.contains("loopback"), "{answer}");
    }
    let post = format!(
        "POST /api/v1/flows/target/runs HTTP/1.1\r\nHost: rebind.evil.example:{port}\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    assert_eq!(raw(&dev.base, &post).await.0, 421);
    assert_eq!(run_count(&dev, "target").await, 0);

    // What is addressed to it by its own name, from its own origin, passes.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), "localhost".to_string()] {
        let request = format!("GET /api/v1/runs HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        assert_eq!(raw(&dev.base, &request).await.0, 200, "{host}");
    }
    let (status, body) = dev.post("/flows/target/runs", json!({"params": {}}), &[]).await;
    assert_eq!(status, 201, "{body}");
    let same_origin = [("origin", dev.base.as_str()), ("content-type", "application/json; charset=utf-8")];
    let mut req = dev.http.post(&runs).body(r#"{"params": {}}"#);
    for (k, v) in same_origin {
        req = req.header(k, v);
    }
    assert_eq!(req.send().await.expect("post").status().as_u16(), 201);
    let out = dev.cli(&["run", "target"]);
    assert!(out.status.success(), "the CLI still triggers: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(run_count(&dev, "target").await, 3);
}

#[test]
fn dev_refuses_to_listen_beyond_loopback() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .args(["dev", "--http", "0.0.0.0:0", "--grpc", "127.0.0.1:0", "--data"])
        .arg(dir.path())
        .output()
        .expect("run dev");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("loopback"), "{stderr}");
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_closed() {
    let (_dir, dev) = Dev::start();
    let addr = dev.base.trim_start_matches("http://").to_string();
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        stream.write_all(b"GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").await.expect("send");
        slow.push(stream);
    }
    let idle = TcpStream::connect(&addr).await.expect("connect");
    slow.push(idle);
    let started = Instant::now();
    let deadline = HEADER_TIMEOUT + Duration::from_secs(5);
    for mut stream in slow {
        let left = deadline.saturating_sub(started.elapsed());
        let mut buf = [0u8; 512];
        // Closed: EOF (0 bytes), or an error answer and then EOF, or a reset.
        let closed = tokio::time::timeout(left, async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "a connection was still open {:?} after its half header", started.elapsed());
    }
    // The server still answers.
    assert_eq!(dev.get("/runs").await.0, 200);
}

/// `madeira serve` with one admin token, keeping its stderr.
fn serve_logged(dir: &Path) -> (Dev, Arc<Mutex<String>>) {
    let config = dir.join("madeira.yaml");
    let db = dir.join("madeira.db");
    let text = format!(
        "http: 127.0.0.1:0\nstore: sqlite://{}\nauth:\n  tokens:\n    - {{name: sre, role: admin, token_env: MADEIRA_T_ADMIN}}\n",
        db.display()
    );
    std::fs::write(&config, text).expect("write config");
    let mut cmd = Command::new(BIN);
    cmd.arg("serve").arg("--config").arg(&config).env("MADEIRA_T_ADMIN", ADMIN).env_remove("RUST_LOG");
    Dev::spawn_logged(cmd, "madeira serve: API on ", client(Some(ADMIN)))
}

#[tokio::test]
async fn guessing_tokens_gets_429_and_each_refusal_is_logged_with_the_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, logs) = serve_logged(dir.path());
    let guess = "guess-0000000000000000000000";
    let guesser = client(Some(guess));
    let flows = server.url("/flows");
    for i in 1..10 {
        let status = guesser.get(&flows).send().await.expect("guess").status().as_u16();
        assert_eq!(status, 401, "guess {i}");
    }
    // The right token is not slowed or refused before the limit, nor counted.
    let started = Instant::now();
    assert_eq!(server.get("/flows").await.0, 200);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    // A wrong sign-in on the console counts too: the 10th failure.
    let signin = reqwest::Client::new()
        .post(format!("{}/signin", server.base))
        .header("cookie", "madeira_signin=c")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf=c&next=%2F&token={guess}"))
        .send()
        .await
        .expect("sign in");
    assert_eq!(signin.status().as_u16(), 401);
    let limited = guesser.get(&flows).send().await.expect("guess");
    assert_eq!(limited.status().as_u16(), 429);
    let retry: u64 = limited
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=60).contains(&retry), "{retry}");
    let body: Value = limited.json().await.expect("json error");
    assert_eq!(body["error"]["code"], "too_many_auth_failures", "{body}");
    // Requests without credentials are not attempts.
    let health = reqwest::get(format!("{}/healthz", server.base)).await.expect("healthz");
    assert_eq!(health.status().as_u16(), 200);

    let text = wait_until(Duration::from_secs(10), "the refusals logged with the address", async || {
        let text = logs.lock().expect("logs").clone();
        let refusals = text.lines().filter(|l| l.contains("authentication refused")).count();
        let limited = text.contains("too many failed authentication attempts");
        if refusals >= 10 && limited { Ok(text) } else { Err(text) }
    })
    .await;
    let refusals: Vec<&str> = text.lines().filter(|l| l.contains("authentication refused")).collect();
    assert!(refusals.iter().all(|l| l.contains("WARN") && l.contains("client=127.0.0.1")), "{text}");
    assert!(refusals.iter().any(|l| l.contains("path=/signin")), "{text}");
    assert!(!text.contains(guess), "a presented token reached the log: {text}");
}

#[tokio::test]
async fn a_signin_next_with_a_control_character_is_no_server_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server, _logs) = serve_logged(dir.path());
    let (_dev_dir, dev) = Dev::start();
    let plain =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    for base in [&server.base, &dev.base] {
        for path in
            ["/signin?next=/%01", "/signin?next=/%7F", "/lang?set=en&next=/%0D%0Ax", "/signin?next=/%09"]
        {
            let resp = plain.get(format!("{base}{path}")).send().await.expect("get");
            let status = resp.status();
            assert!(!status.is_server_error(), "{base}{path}: {status}");
            if let Some(to) = resp.headers().get("location") {
                assert_eq!(to, "/", "{base}{path}");
            }
        }
    }
}
