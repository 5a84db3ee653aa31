//! Log tail by byte offset: `GET /runs/{id}/nodes/{node}/log?attempt=N&offset=K`
//! answers the bytes of attempt N's output from K on (cut back to a UTF-8
//! boundary) and the offset to ask from next in `X-Log-Offset`. While the attempt
//! runs the page then follows `GET /runs/{id}/nodes/{node}/log/follow?attempt=N&offset=K`:
//! the same SSE stream as the API's `…/logs?follow=true` (`madeira_server::follow_node`),
//! pushed as the engine receives output, resumed by byte offset (`Last-Event-ID`);
//! after repeated errors the page falls back to asking every second.
//!
//! `read_log` is the one place the console reads output: the live output the
//! sidecar link streams into the engine while the attempt runs (and keeps after
//! it ends, `EngineHandle::attempt_log`, offsets counted from the attempt's first
//! byte), else what the store keeps per attempt (the last 64 KiB, stored when the
//! attempt ends).

use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::session::Ctx;
use crate::{Console, ConsoleError};

/// Most bytes one answer carries.
const MAX_CHUNK: usize = 256 * 1024;

/// What the log of one attempt holds from an offset on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogChunk {
    pub text: String,
    /// Offset (bytes) to ask from next.
    pub next_offset: usize,
    /// Bytes the log has now.
    pub total: usize,
}

/// Attempt `attempt`'s output of `run`/`node` from byte `offset` on.
pub async fn read_log(
    app: &madeira_server::AppState,
    run: &str,
    node: &str,
    attempt: u32,
    offset: usize,
) -> Result<LogChunk, madeira_store::StoreError> {
    if let Some(live) = app.engine.attempt_log(run, node, Some(attempt), offset as u64) {
        return Ok(live_chunk(live));
    }
    let content = app
        .reads
        .runs
        .logs(run, node)
        .await?
        .into_iter()
        .filter(|l| l.attempt == attempt)
        .map(|l| l.content)
        .collect::<Vec<_>>()
        .join("");
    Ok(slice(&content, offset))
}

/// A live slice as text, cut back to the last whole UTF-8 character (the rest
/// comes with the next read).
fn live_chunk(live: madeira_engine::LogSlice) -> LogChunk {
    let end = live.next_offset as usize;
    let mut data = live.data;
    let keep = match std::str::from_utf8(&data) {
        Ok(_) => data.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => data.len(),
    };
    let held_back = data.len() - keep;
    data.truncate(keep);
    let text = String::from_utf8_lossy(&data).into_owned();
    LogChunk { text, next_offset: end - held_back, total: end }
}

/// `content` from `offset` (at most `MAX_CHUNK` bytes), on char boundaries.
fn slice(content: &str, offset: usize) -> LogChunk {
    let total = content.len();
    let mut start = offset.min(total);
    while !content.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (start + MAX_CHUNK).min(total);
    while !content.is_char_boundary(end) {
        end -= 1;
    }
    LogChunk { text: content[start..end].to_string(), next_offset: end, total }
}

#[derive(Debug, Deserialize)]
pub struct LogQuery {
    #[serde(default = "one")]
    attempt: u32,
    #[serde(default)]
    offset: usize,
    #[serde(default)]
    download: Option<String>,
}

fn one() -> u32 {
    1
}

pub async fn serve(
    State(console): State<Console>,
    ctx: Ctx,
    Path((run, node)): Path<(String, String)>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ConsoleError> {
    // Another team's run is "not found", as in the API.
    let stored = crate::pages::load_run(&console, &ctx.user, &run).await?.stored;
    if !stored.nodes.iter().any(|n| n.node == node) {
        return Err(ConsoleError::NotFound(format!("run {run}: node {node} not found")));
    }
    let offset = if q.download.is_some() { 0 } else { q.offset };
    let chunk = read_log(&console.app, &run, &node, q.attempt, offset).await?;
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_string()),
            (header::CACHE_CONTROL, "no-store".to_string()),
            (header::HeaderName::from_static("x-log-offset"), chunk.next_offset.to_string()),
            (header::HeaderName::from_static("x-log-total"), chunk.total.to_string()),
        ],
        chunk.text,
    )
        .into_response();
    if q.download.is_some() {
        let name = format!("attachment; filename=\"{run}-{node}-{}.log\"", q.attempt);
        if let Ok(v) = name.parse() {
            response.headers_mut().insert(header::CONTENT_DISPOSITION, v);
        }
    }
    Ok(response)
}

#[derive(Debug, Deserialize)]
pub struct FollowQuery {
    #[serde(default = "one")]
    attempt: u32,
    #[serde(default)]
    offset: Option<u64>,
}

/// `GET /runs/{id}/nodes/{node}/log/follow`: attempt N's output as SSE.
pub async fn follow(
    State(console): State<Console>,
    ctx: Ctx,
    Path((run, node)): Path<(String, String)>,
    Query(q): Query<FollowQuery>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ConsoleError> {
    crate::pages::load_run(&console, &ctx.user, &run).await?;
    let offset = madeira_server::resume_offset(&headers, q.offset)?;
    let req = madeira_server::FollowRequest { run_id: run, node, attempt: Some(q.attempt), offset };
    Ok(madeira_server::follow_node(&console.app, req).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_slice_holds_back_a_split_character() {
        let mut data = "ok 日".as_bytes().to_vec();
        data.pop(); // the slice ends inside 日
        let live = madeira_engine::LogSlice { data, next_offset: 105, dropped: 0, finished: false };
        assert_eq!(live_chunk(live), LogChunk { text: "ok ".into(), next_offset: 103, total: 105 });
    }

    #[test]
    fn offsets_never_split_a_character() {
        let text = "ab日本";
        assert_eq!(slice(text, 0), LogChunk { text: text.into(), next_offset: 8, total: 8 });
        let mid = slice(text, 3); // inside 日
        assert_eq!(mid.text, "日本");
        assert_eq!(slice(text, 8).text, "");
        assert_eq!(slice(text, 99), LogChunk { text: String::new(), next_offset: 8, total: 8 });
        let big = "x".repeat(MAX_CHUNK + 10);
        let first = slice(&big, 0);
        assert_eq!(first.next_offset, MAX_CHUNK);
        assert_eq!(slice(&big, first.next_offset).text.len(), 10);
    }
}
