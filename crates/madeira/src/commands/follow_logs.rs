//! `madeira logs -f RUN NODE`: prints an attempt's output as the job writes it,
//! from the API's Server-Sent Events (`…/logs?follow=true`), until the `end`
//! event. A dropped connection (a control-plane restart) is resumed from the last
//! byte offset printed (`Last-Event-ID`), so nothing is printed twice or lost
//! while the bytes are still held; after `GIVE_UP` without a successful
//! connection the command fails.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use serde_json::Value;

use crate::cli::ServerArgs;
use crate::client::{Client, Opening};

/// Longest event accepted (the server sends at most 64 KiB of text per event).
const MAX_EVENT: usize = 1024 * 1024;
/// How long reconnecting is tried after the stream broke.
const GIVE_UP: Duration = Duration::from_secs(60);

/// One Server-Sent Event.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

/// Splits a byte stream into events (`\n\n`-separated blocks; comments skipped).
#[derive(Default)]
pub struct SseParser {
    buf: Vec<u8>,
}

impl SseParser {
    /// Adds `bytes`; returns the events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = find_blank_line(&self.buf) {
            let block: Vec<u8> = self.buf.drain(..end.0).collect();
            self.buf.drain(..end.1);
            if let Some(event) = parse_block(&String::from_utf8_lossy(&block)) {
                events.push(event);
            }
        }
        if self.buf.len() > MAX_EVENT {
            bail!("the log stream sent an event over {MAX_EVENT} bytes");
        }
        Ok(events)
    }
}

/// (end of the block, length of the separator) of the first blank line.
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn parse_block(block: &str) -> Option<SseEvent> {
    let mut event = SseEvent { event: "message".into(), ..Default::default() };
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event.event = value.to_string(),
            "id" => event.id = Some(value.to_string()),
            "data" => data.push(value),
            _ => {}
        }
    }
    if data.is_empty() {
        return None;
    }
    event.data = data.join("\n");
    Some(event)
}

/// How one connection ended.
enum Ended {
    /// The `end` event came: the attempt finished.
    Finished,
    /// The stream broke (or the server closed it) before the end.
    Broken(anyhow::Error),
}

/// Follows `node` of `run_id` until its attempt ends.
pub async fn follow(server: &ServerArgs, run_id: &str, node: &str, attempt: Option<u32>) -> Result<ExitCode> {
    let client = Client::streaming(server)?;
    let mut state = Progress { attempt, last_id: None, progressed: false };
    let mut broken_since: Option<Instant> = None;
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut path = format!("/runs/{run_id}/nodes/{node}/logs?follow=true");
        if let Some(a) = state.attempt {
            path.push_str(&format!("&attempt={a}"));
        }
        let headers: Vec<(&str, String)> =
            state.last_id.iter().map(|id| ("last-event-id", id.clone())).collect();
        let why = match client.open(&path, &headers).await {
            Ok(resp) => match state.read(resp).await {
                Ended::Finished => return Ok(ExitCode::SUCCESS),
                Ended::Broken(e) => e,
            },
            Err(Opening::Api(e)) => return Err(e),
            Err(Opening::Link(e)) if state.last_id.is_none() && broken_since.is_none() => return Err(e),
            Err(Opening::Link(e)) => e,
        };
        if std::mem::take(&mut state.progressed) {
            broken_since = None;
            backoff = Duration::from_millis(100);
        }
        let since = *broken_since.get_or_insert_with(Instant::now);
        if since.elapsed() > GIVE_UP {
            return Err(why.context(format!("the log stream stayed broken for {}s", GIVE_UP.as_secs())));
        }
        tracing::debug!(error = %format!("{why:#}"), "log stream interrupted; resuming");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// What has been printed so far (to resume from).
struct Progress {
    attempt: Option<u32>,
    last_id: Option<String>,
    /// An event came on this connection.
    progressed: bool,
}

impl Progress {
    async fn read(&mut self, mut resp: reqwest::Response) -> Ended {
        let mut parser = SseParser::default();
        let mut out = std::io::stdout();
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => return Ended::Broken(anyhow!("the server closed the log stream")),
                Err(e) => return Ended::Broken(anyhow!(crate::client::cause(e))),
            };
            let events = match parser.push(&chunk) {
                Ok(events) => events,
                Err(e) => return Ended::Broken(e),
            };
            for event in events {
                let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                if let Some(a) = data["attempt"].as_u64().and_then(|a| u32::try_from(a).ok()) {
                    self.attempt = Some(a);
                }
                self.progressed = true;
                match event.event.as_str() {
                    "log" => {
                        let text = data["text"].as_str().unwrap_or_default();
                        if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
                            // stdout closed (`| head`): nothing more to do.
                            return Ended::Finished;
                        }
                        self.last_id = event.id;
                    }
                    "end" => return Ended::Finished,
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_split_across_chunks_and_comments_are_skipped() {
        let mut p = SseParser::default();
        assert!(p.push(b": keep-alive\n\nevent: log\nid: 5\nda").expect("ok").is_empty());
        let events = p.push(b"ta: {\"text\":\"hello\"}\n\nevent: end\r\ndata: {}\r\n\r\n").expect("ok");
        assert_eq!(
            events,
            vec![
                SseEvent { event: "log".into(), id: Some("5".into()), data: "{\"text\":\"hello\"}".into() },
                SseEvent { event: "end".into(), id: None, data: "{}".into() },
            ]
        );
        let huge = vec![b'x'; MAX_EVENT + 1];
        assert!(p.push(&huge).is_err(), "an event without end is bounded");
    }
}
