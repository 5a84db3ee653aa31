//! The executor against a real local HTTP server (a raw TCP listener writing
//! HTTP/1.1 by hand, so the body can be endless).

use std::time::Duration;

use madeira_core::ExecutorDef;
use madeira_core::model::HttpDef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::*;

/// Serves every connection `status` with a body of `len` bytes (chunked when
/// `announce` is false); returns the base URL.
async fn server(status: u16, len: u64, announce: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let head = if announce {
                    format!("HTTP/1.1 {status} X\r\ncontent-length: {len}\r\n\r\n")
                } else {
                    format!("HTTP/1.1 {status} X\r\ntransfer-encoding: chunked\r\n\r\n")
                };
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; 64 * 1024];
                let mut sent = 0u64;
                while sent < len {
                    let n = (len - sent).min(chunk.len() as u64) as usize;
                    let framed = if announce {
                        conn.write_all(&chunk[..n]).await
                    } else {
                        let mut framed = format!("{n:x}\r\n").into_bytes();
                        framed.extend_from_slice(&chunk[..n]);
                        framed.extend_from_slice(b"\r\n");
                        conn.write_all(&framed).await
                    };
                    if framed.is_err() {
                        return;
                    }
                    sent += n as u64;
                }
                if !announce {
                    let _ = conn.write_all(b"0\r\n\r\n").await;
                }
            });
        }
    });
    format!("http://{addr}/")
}

fn job(url: &str) -> Job {
    Job {
        run_id: "r".into(),
        flow: "f".into(),
        node: "n".into(),
        attempt: 1,
        idempotency_key: "r:n:v1".into(),
        executor: ExecutorDef::Http(HttpDef {
            url: url.to_string(),
            method: "GET".into(),
            headers: Default::default(),
            body: None,
        }),
        no_retry_exit_codes: Vec::new(),
        input: serde_json::json!({}),
        timeout: Duration::from_secs(20),
        traceparent: None,
        resumed: false,
    }
}

fn dev_policy() -> HttpPolicy {
    HttpPolicy { allow_loopback: true, ..HttpPolicy::default() }
}

async fn run(policy: HttpPolicy, url: &str) -> AttemptResult {
    HttpExecutor::new(policy).execute(job(url), CancellationToken::new()).await
}

#[tokio::test]
async fn a_small_json_body_becomes_the_outputs() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.expect("accept");
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf).await;
        let body = r#"{"n": 3}"#;
        let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
        let _ = conn.write_all(reply.as_bytes()).await;
    });
    match run(dev_policy(), &format!("http://{addr}/")).await {
        AttemptResult::Success { outputs, .. } => assert_eq!(outputs["n"], 3),
        other => panic!("expected success, got {other:?}"),
    }
}

#[tokio::test]
async fn a_body_over_the_cap_fails_the_attempt_without_retry() {
    for announce in [true, false] {
        let url = server(200, 100 * 1024 * 1024, announce).await;
        match run(dev_policy(), &url).await {
            AttemptResult::Failure { error, retryable, .. } => {
                assert!(!retryable, "{error}");
                assert!(error.contains("over http_executor.max_response_bytes (1048576 bytes)"), "{error}");
            }
            other => panic!("announce={announce}: expected failure, got {other:?}"),
        }
    }
    // Just under a smaller configured cap is fine.
    let url = server(200, 2000, false).await;
    let small = HttpPolicy { max_response_bytes: Some(2000), ..dev_policy() };
    assert!(matches!(run(small.clone(), &url).await, AttemptResult::Success { .. }));
    let url = server(200, 2001, false).await;
    assert!(matches!(run(small, &url).await, AttemptResult::Failure { retryable: false, .. }));
}

#[tokio::test]
async fn a_large_error_body_keeps_the_status_verdict() {
    let url = server(503, 10 * 1024 * 1024, true).await;
    match run(dev_policy(), &url).await {
        AttemptResult::Failure { error, retryable, log } => {
            assert!(retryable, "{error}");
            assert!(error.contains("503"), "{error}");
            assert!(log.contains("not read"), "{log}");
        }
        other => panic!("expected failure, got {other:?}"),
    }
}

#[tokio::test]
async fn serve_refuses_loopback_unless_listed() {
    let url = server(200, 2, true).await;
    match run(HttpPolicy::default(), &url).await {
        AttemptResult::Failure { error, retryable, .. } => {
            assert!(!retryable);
            assert!(error.contains("loopback addresses are refused"), "{error}");
            assert!(error.contains("http_executor.allow_hosts"), "{error}");
        }
        other => panic!("expected refusal, got {other:?}"),
    }
    let listed = HttpPolicy { allow_hosts: vec!["127.0.0.1".into()], ..HttpPolicy::default() };
    assert!(matches!(run(listed, &url).await, AttemptResult::Success { .. }));
}
