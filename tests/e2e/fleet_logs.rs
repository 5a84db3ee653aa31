//! Live job output end to end (SPEC §9, `GET …/logs?follow=true`): a real
//! `madeira sidecar` runs a job printing a timestamped line every 200 ms;
//! `madeira logs -f` shows each line within 1 s of the job printing it (the
//! job's clock vs the moment the CLI's stdout shows it) and exits when the
//! attempt ends; the SSE stream resumed from a byte offset (`Last-Event-ID` or
//! `offset=`) gives exactly the rest. The chunk latency (job print → SSE event)
//! is printed as p50/p99; run with `MADEIRA_E2E_BIN=target/release/madeira` and
//! `MADEIRA_E2E_LOG_LINES=300` to measure a release build.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::sidecar::{SidecarProc, wait_sidecars};
use crate::support::{Dev, bin, status_of};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A job printing `tick <i> <epoch ms>` every 200 ms, `lines` times.
const TICKER: &str = r#"jobs:
  ticker:
    command: ["/bin/sh", "-c", "i=0; while [ $i -lt $1 ]; do echo \"tick $i $(date +%s%3N)\"; i=$((i+1)); sleep 0.2; done", "sh", "{{ params.lines }}"]
"#;

/// The printed time of a `tick <i> <ms>` line.
fn printed_at(line: &str) -> Option<(u32, i64)> {
    let mut f = line.split_whitespace();
    (f.next() == Some("tick")).then_some(())?;
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

/// One SSE event: (event, id, data).
type Sse = (String, Option<String>, Value);

/// Reads an SSE answer until its `end` event (or `secs` pass), noting when each
/// event arrived.
async fn read_sse(resp: reqwest::Response, secs: u64) -> Vec<(i64, Sse)> {
    let mut resp = resp;
    let mut buf = String::new();
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk()).await.expect("the stream ended in time");
        let Some(chunk) = chunk.expect("read the stream") else {
            panic!("stream closed before `end`: {events:?}")
        };
        buf.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut event, mut id, mut data) = (String::new(), None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = v.to_string();
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_string());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            if event.is_empty() {
                continue;
            }
            let done = event == "end";
            events.push((now_ms(), (event, id, serde_json::from_str(&data).expect("json data"))));
            if done {
                return events;
            }
        }
    }
}

fn text_of(events: &[(i64, Sse)]) -> String {
    events
        .iter()
        .filter(|(_, (e, _, _))| e == "log")
        .map(|(_, (_, _, d))| d["text"].as_str().unwrap_or(""))
        .collect()
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::test]
async fn logs_follow_shows_each_line_within_a_second_and_the_stream_resumes_by_offset() {
    let lines: u32 = std::env::var("MADEIRA_E2E_LOG_LINES").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_with(&dir.path().join("data"), &[]);
    let _sidecar = SidecarProc::start(dir.path(), "s-logs", &dev.grpc, TICKER);
    wait_sidecars(&dev, "billing", 1).await;
    dev.put_flow("flow: ticks\nnodes:\n  t: {run: {sidecar: {group: billing, job: ticker}}}\n").await;
    let run_id = dev.trigger("ticks", json!({"lines": lines})).await;

    // Started before the attempt has printed anything: both wait for it.
    let mut cli = Command::new(bin())
        .args(["logs", "-f", &run_id, "t", "--server", &dev.base])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn madeira logs -f");
    let stdout = cli.stdout.take().expect("stdout");
    let shown = std::thread::spawn(move || {
        BufReader::new(stdout).lines().map_while(Result::ok).map(|l| (now_ms(), l)).collect::<Vec<_>>()
    });
    let sse =
        dev.http.get(dev.url(&format!("/runs/{run_id}/nodes/t/logs?follow=true"))).send().await.expect("sse");
    assert_eq!(sse.status(), 200);
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let events = read_sse(sse, 30 + u64::from(lines) / 2).await;

    let status =
        tokio::task::spawn_blocking(move || cli.wait_with_output()).await.expect("join").expect("wait");
    assert!(
        status.status.success(),
        "logs -f exits 0 at the end: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let shown = shown.join().expect("reader");
    assert_eq!(shown.len(), lines as usize, "every line, once, in order: {shown:?}");
    for (i, (at, line)) in shown.iter().enumerate() {
        let (n, printed) = printed_at(line).unwrap_or_else(|| panic!("a tick line: {line:?}"));
        assert_eq!(n as usize, i, "in order: {shown:?}");
        assert!(at - printed <= 1000, "line {i} shown {} ms after the job printed it", at - printed);
    }

    // Latency of the SSE events: job print → event received.
    let mut latencies: Vec<i64> = Vec::new();
    for (at, (_, _, data)) in events.iter().filter(|(_, (e, _, _))| e == "log") {
        for line in data["text"].as_str().unwrap_or("").lines() {
            if let Some((_, printed)) = printed_at(line) {
                latencies.push(at - printed);
            }
        }
    }
    latencies.sort_unstable();
    assert_eq!(latencies.len(), lines as usize, "{events:?}");
    let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    eprintln!("live log latency (job print -> SSE event) over {lines} lines: p50 {p50} ms, p99 {p99} ms");
    assert!(p99 <= 1000, "p99 {p99} ms");

    let full = text_of(&events);
    let (_, (_, _, end)) = events.last().expect("events");
    assert_eq!(
        end["offset"].as_u64(),
        Some(full.len() as u64),
        "the end event gives the final offset: {end}"
    );
    let run = dev.finished(&run_id).await;
    assert_eq!(status_of(&run, "t"), "SUCCESS", "{run}");

    // Resume from the id of an event in the middle: exactly the rest.
    let logs = &events[..events.len() - 1];
    let (_, (_, id, _)) = &logs[logs.len() / 2];
    let id = id.clone().expect("log events carry their offset as id");
    let at: usize = id.parse().expect("offset");
    assert!(0 < at && at < full.len(), "a middle offset: {at} of {}", full.len());
    let resumed = dev
        .http
        .get(dev.url(&format!("/runs/{run_id}/nodes/t/logs?follow=true")))
        .header("last-event-id", &id)
        .send()
        .await
        .expect("resume");
    assert_eq!(text_of(&read_sse(resumed, 10).await), full[at..], "Last-Event-ID gives the rest");
    let by_query =
        dev.http.get(dev.url(&format!("/runs/{run_id}/nodes/t/logs?follow=true&offset=7"))).send().await;
    assert_eq!(text_of(&read_sse(by_query.expect("offset"), 10).await), full[7..], "offset= gives the rest");
    let (status, plain) = dev.get(&format!("/runs/{run_id}/nodes/t/logs")).await;
    assert_eq!(status, 200);
    assert!(plain["logs"][0]["content"].as_str().is_some_and(|c| c.contains("tick 0")), "{plain}");
}

#[tokio::test]
async fn following_an_unknown_node_is_a_404_and_a_bad_offset_a_400() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_with(&dir.path().join("data"), &[]);
    dev.put_flow("flow: quick\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let run_id = dev.trigger("quick", json!({})).await;
    dev.finished(&run_id).await;
    let (status, body) = dev.get(&format!("/runs/{run_id}/nodes/zz/logs?follow=true")).await;
    assert_eq!(status, 404, "{body}");
    let resp = dev
        .http
        .get(dev.url(&format!("/runs/{run_id}/nodes/a/logs?follow=true")))
        .header("last-event-id", "soon")
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), 400);
    // A node that ended without output: answered from the store, then `end`.
    let resp = dev.http.get(dev.url(&format!("/runs/{run_id}/nodes/a/logs?follow=true"))).send().await;
    let events = read_sse(resp.expect("get"), 10).await;
    let (_, (event, _, data)) = events.last().expect("an end event");
    assert_eq!((event.as_str(), data["stored"].as_bool()), ("end", Some(true)), "{events:?}");
    let out = Command::new(bin())
        .args(["logs", "-f", &run_id, "nope", "--server", &dev.base])
        .output()
        .expect("run madeira logs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"), "{}", String::from_utf8_lossy(&out.stderr));
}
