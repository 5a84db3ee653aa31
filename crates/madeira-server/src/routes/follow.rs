//! `GET /api/v1/runs/{id}/nodes/{node}/logs?follow=true`: a node's live output as
//! Server-Sent Events, pushed as the engine receives it (`EngineHandle::attempt_log`
//! woken by `follow_log`; nothing polls the store).
//!
//! - `event: log` carries `{"attempt", "offset", "text"}`; its `id` is the byte
//!   offset after the text, so a client resumes with `Last-Event-ID` (or
//!   `offset=`) and gets exactly the rest. Text is cut at UTF-8 boundaries (a
//!   character split across chunks waits for its last byte); invalid bytes are
//!   shown as U+FFFD but still count in offsets. Bytes that fell out of the
//!   attempt's buffer (past `live_log_bytes`) are replaced by a marker line.
//! - `event: end` (`{"attempt", "offset", "stored"}`) is the last event: the
//!   attempt finished. A node whose attempt ended without live output here (it
//!   printed nothing, or ended before this replica started) is answered from the
//!   stored tail (`"stored": true`, offsets counted within that tail).
//! - Without `attempt=`, the stream follows the node's latest attempt with live
//!   output, waiting for the first one while the node has not ended.
//! - A comment keeps the connection alive every 10 s; streams end when the server
//!   shuts down (the client reconnects with `Last-Event-ID`).

use std::convert::Infallible;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use madeira_engine::EngineHandle;
use serde_json::json;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::{ApiError, AppState};

/// Interval of the keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(10);
/// Events buffered per stream before the producer waits for the client.
const QUEUE: usize = 16;
/// Most bytes of output one event carries.
const MAX_EVENT_BYTES: usize = 64 * 1024;

/// What a follow asks for.
pub struct FollowRequest {
    pub run_id: String,
    pub node: String,
    pub attempt: Option<u32>,
    pub offset: u64,
}

/// The offset a follow starts from: `Last-Event-ID` (a reconnecting
/// `EventSource` sends the id of the last event it got), else `offset=`, else 0.
pub fn resume_offset(headers: &HeaderMap, query_offset: Option<u64>) -> Result<u64, ApiError> {
    match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be a byte offset")),
        None => Ok(query_offset.unwrap_or(0)),
    }
}

/// Follows `req.node` of run `req.run_id` as SSE (404 when either is unknown):
/// the REST API's `…/logs?follow=true` and the console's log viewer.
/// Streams end when `state.shutdown` fires.
pub async fn follow_node(state: &AppState, req: FollowRequest) -> Result<Response, ApiError> {
    let engine = &state.engine;
    // Subscribed before the run is read, so no transition falls between the two.
    let events = engine.subscribe();
    let id = &req.run_id;
    let stored = state
        .reads
        .runs
        .load_run(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {id} not found")))?;
    let Some(row) = stored.nodes.iter().find(|n| n.node == req.node) else {
        return Err(ApiError::not_found(format!("run {id}: node {} not found", req.node)));
    };
    let follower = Follower {
        engine: engine.clone(),
        runs: state.reads.runs.clone(),
        events,
        node_ended: row.state.is_terminal(),
        req,
        tx: mpsc::channel(QUEUE).0,
        carry: Vec::new(),
    };
    Ok(stream(follower, state.shutdown.clone()).into_response())
}

/// The SSE response of `follower` (whose `node_ended` is the node's state as
/// stored when the request came, read after subscribing to the engine's events,
/// so no transition is missed between the two).
fn stream(mut follower: Follower, shutdown: CancellationToken) -> impl axum::response::IntoResponse {
    let (tx, rx) = mpsc::channel(QUEUE);
    follower.tx = tx;
    tokio::spawn(async move {
        tokio::select! {
            _ = follower.run() => {}
            _ = shutdown.cancelled() => {}
        }
    });
    Sse::new(ReceiverStream::new(rx)).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

struct Follower {
    engine: EngineHandle,
    /// The stored run and logs (a node that ended without live output here).
    runs: std::sync::Arc<dyn madeira_store::RunReader>,
    events: broadcast::Receiver<std::sync::Arc<madeira_engine::RunEvent>>,
    /// The node reached SUCCESS, FAILED or SKIPPED.
    node_ended: bool,
    req: FollowRequest,
    tx: mpsc::Sender<Result<Event, Infallible>>,
    /// The start of a UTF-8 character whose last bytes have not come yet.
    carry: Vec<u8>,
}

impl Follower {
    /// Sends events until the attempt ends or the client goes away.
    async fn run(mut self) {
        let mut created = self.engine.live_logs().watch_new();
        created.borrow_and_update();
        loop {
            let (run, node, attempt) = (&self.req.run_id, &self.req.node, self.req.attempt);
            let found = self
                .engine
                .follow_log(run, node, attempt)
                .map(|rx| (attempt.or_else(|| self.engine.live_logs().latest_attempt(run, node)), rx));
            if let Some((attempt, rx)) = found {
                self.live(attempt.unwrap_or(0), rx).await;
                return;
            }
            if self.node_ended {
                self.stored().await;
                return;
            }
            tokio::select! {
                changed = created.changed() => if changed.is_err() { return },
                event = self.events.recv() => match event {
                    Ok(e) => self.note(&e),
                    Err(broadcast::error::RecvError::Lagged(_)) => self.reload().await,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = self.tx.closed() => return,
            }
        }
    }

    /// Notes a transition of the followed node (its end, or a later attempt
    /// when a specific one is followed).
    fn note(&mut self, e: &madeira_engine::RunEvent) {
        if e.run_id != self.req.run_id || e.node.as_deref() != Some(self.req.node.as_str()) {
            return;
        }
        let terminal = matches!(e.to.as_str(), "SUCCESS" | "FAILED" | "SKIPPED");
        let moved_on = self.req.attempt.is_some_and(|a| e.attempt > a);
        self.node_ended |= terminal || moved_on;
    }

    /// After missing events, reads the node's state once more.
    async fn reload(&mut self) {
        if let Ok(Some(stored)) = self.runs.load_run(&self.req.run_id).await
            && let Some(n) = stored.nodes.iter().find(|n| n.node == self.req.node)
        {
            let moved_on = self.req.attempt.is_some_and(|a| n.attempt > a);
            self.node_ended |= n.state.is_terminal() || moved_on;
        }
    }

    /// Streams the attempt's live buffer from the offset asked for to its end.
    async fn live(&mut self, attempt: u32, mut rx: watch::Receiver<u64>) {
        let (run, node) = (self.req.run_id.clone(), self.req.node.clone());
        // Bytes up to `sent` went out as text; up to `self.req.offset` were read
        // (the difference waits in `carry`).
        let mut sent = self.req.offset;
        loop {
            rx.borrow_and_update();
            let Some(slice) = self.engine.attempt_log(&run, &node, Some(attempt), self.req.offset) else {
                // Evicted: nothing more will come.
                let _ = self.send(end_event(attempt, sent, false)).await;
                return;
            };
            let mut data = slice.data.as_slice();
            if slice.dropped > 0 {
                // The marker line `LiveLogs::read` put first takes no offsets.
                self.carry.clear();
                sent = self.req.offset + slice.dropped;
                let marker = data.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
                let text = String::from_utf8_lossy(&data[..marker]);
                if self.send(log_event(attempt, sent, sent, &text)).await.is_err() {
                    return;
                }
                data = &data[marker..];
            }
            self.carry.extend_from_slice(data);
            self.req.offset = slice.next_offset;
            let complete = if slice.finished { self.carry.len() } else { complete_utf8(&self.carry) };
            let rest = self.carry.split_off(complete);
            let ready = std::mem::replace(&mut self.carry, rest);
            match self.send_bytes(attempt, sent, &ready).await {
                Ok(next) => sent = next,
                Err(()) => return,
            }
            if slice.finished {
                let _ = self.send(end_event(attempt, slice.next_offset, false)).await;
                return;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    let _ = self.send(end_event(attempt, sent, false)).await;
                    return;
                },
                _ = self.tx.closed() => return,
            }
        }
    }

    /// Answers an ended attempt without live output from the stored tail.
    async fn stored(&mut self) {
        let logs = self.runs.logs(&self.req.run_id, &self.req.node).await.unwrap_or_default();
        let log = match self.req.attempt {
            Some(a) => logs.into_iter().find(|l| l.attempt == a),
            None => logs.into_iter().max_by_key(|l| l.attempt),
        };
        let attempt = log.as_ref().map(|l| l.attempt).or(self.req.attempt).unwrap_or(0);
        let content = log.map(|l| l.content).unwrap_or_default();
        let bytes = content.as_bytes();
        let from = usize::try_from(self.req.offset).unwrap_or(usize::MAX).min(bytes.len());
        let from = (0..=from).rev().find(|&i| content.is_char_boundary(i)).unwrap_or(0);
        if let Ok(end) = self.send_bytes(attempt, from as u64, &bytes[from..]).await {
            let _ = self.send(end_event(attempt, end, true)).await;
        }
    }

    /// Sends `bytes` (starting at `offset`) as log events of at most
    /// `MAX_EVENT_BYTES`, cut at character boundaries; returns the offset after them.
    async fn send_bytes(&self, attempt: u32, mut offset: u64, mut bytes: &[u8]) -> Result<u64, ()> {
        while !bytes.is_empty() {
            let mut n = bytes.len().min(MAX_EVENT_BYTES);
            if n < bytes.len() {
                n = Some(complete_utf8(&bytes[..n])).filter(|&c| c > 0).unwrap_or(n);
            }
            let text = String::from_utf8_lossy(&bytes[..n]);
            let next = offset + n as u64;
            self.send(log_event(attempt, offset, next, &text)).await?;
            (offset, bytes) = (next, &bytes[n..]);
        }
        Ok(offset)
    }

    async fn send(&self, event: Event) -> Result<(), ()> {
        self.tx.send(Ok(event)).await.map_err(|_| ())
    }
}

/// The length of the longest prefix of `bytes` that does not end inside a UTF-8
/// character (invalid bytes count as complete: they are shown as U+FFFD).
fn complete_utf8(bytes: &[u8]) -> usize {
    let mut at = 0;
    loop {
        match std::str::from_utf8(&bytes[at..]) {
            Ok(_) => return bytes.len(),
            Err(e) => match e.error_len() {
                None => return at + e.valid_up_to(),
                Some(bad) => at += e.valid_up_to() + bad,
            },
        }
    }
}

fn log_event(attempt: u32, offset: u64, id: u64, text: &str) -> Event {
    Event::default()
        .event("log")
        .id(id.to_string())
        .data(json!({"attempt": attempt, "offset": offset, "text": text}).to_string())
}

fn end_event(attempt: u32, offset: u64, stored: bool) -> Event {
    Event::default()
        .event("end")
        .id(offset.to_string())
        .data(json!({"attempt": attempt, "offset": offset, "stored": stored}).to_string())
}

#[cfg(test)]
mod tests {
    use super::complete_utf8;

    #[test]
    fn text_is_cut_before_a_split_character_only() {
        assert_eq!(complete_utf8(b"abc"), 3);
        let euro = "€".as_bytes();
        assert_eq!(complete_utf8(&[b'a', euro[0], euro[1]]), 1, "waits for the last byte");
        assert_eq!(complete_utf8(&[b'a', 0xff, b'b']), 3, "invalid bytes do not hold text back");
        assert_eq!(complete_utf8(&[0xff, euro[0]]), 1);
        assert_eq!(complete_utf8(b""), 0);
    }
}
