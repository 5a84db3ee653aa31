//! W3C trace context of runs and attempts, without any tracing SDK. A run gets a
//! trace id and a run-span id when it is created; both are stored with the run, so
//! the run keeps one trace however long it lasts and across restarts. Each attempt
//! gets a child span id, derived from the run's context, the node, the attempt
//! number and the attempt's start, so the engine can name it again when the
//! attempt ends without remembering it. Finished spans go to observers
//! (`EngineObserver::span_ended`), which export them.

use std::collections::HashMap;
use std::sync::Arc;

use madeira_core::RunSnapshot;
use sha2::{Digest, Sha256};

use crate::EngineObserver;

/// An attempt that ended in this batch, as observers and spans see it.
pub(crate) struct FinishedAttempt {
    pub run_id: String,
    pub flow: String,
    pub node: String,
    pub attempt: u32,
    pub outcome: &'static str,
    pub error: Option<String>,
    pub duration: std::time::Duration,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
}

/// A W3C trace context: `00-<trace id>-<span id>-<flags>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// W3C trace flags; bit 0 is "sampled".
    pub flags: u8,
}

impl TraceContext {
    /// A new trace with random ids, sampled.
    pub fn new_root() -> Self {
        let mut trace_id: [u8; 16] = rand::random();
        if trace_id == [0; 16] {
            trace_id[15] = 1;
        }
        Self { trace_id, span_id: nonzero_span(rand::random()), flags: 1 }
    }

    /// A stable context for a run stored without one (created before tracing).
    pub fn for_run_id(run_id: &str) -> Self {
        let digest = Sha256::digest(format!("madeira-run:{run_id}").as_bytes());
        let mut trace_id = [0u8; 16];
        trace_id.copy_from_slice(&digest[..16]);
        let mut span = [0u8; 8];
        span.copy_from_slice(&digest[16..24]);
        Self { trace_id, span_id: nonzero_span(span), flags: 1 }
    }

    /// Parses a `traceparent` value (version 00 and later versions' first fields).
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.trim().split('-');
        let version = parts.next()?;
        let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
        if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        let mut flag = [0u8; 1];
        hex::decode_to_slice(trace, &mut trace_id).ok()?;
        hex::decode_to_slice(span, &mut span_id).ok()?;
        hex::decode_to_slice(flags, &mut flag).ok()?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self { trace_id, span_id, flags: flag[0] })
    }

    /// The `traceparent` value naming this span.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id_hex(), self.span_id_hex(), self.flags)
    }

    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    pub fn span_id_hex(&self) -> String {
        hex::encode(self.span_id)
    }

    /// The span of attempt `attempt` of `node` that started at `started_at_ms`,
    /// as a child of this (run) span.
    pub fn attempt(&self, node: &str, attempt: u32, started_at_ms: i64) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(self.trace_id);
        hasher.update(self.span_id);
        hasher.update(node.as_bytes());
        hasher.update([0]);
        hasher.update(attempt.to_be_bytes());
        hasher.update(started_at_ms.to_be_bytes());
        let digest = hasher.finalize();
        let mut span = [0u8; 8];
        span.copy_from_slice(&digest[..8]);
        Self { trace_id: self.trace_id, span_id: nonzero_span(span), flags: self.flags }
    }
}

fn nonzero_span(mut span: [u8; 8]) -> [u8; 8] {
    if span == [0; 8] {
        span[7] = 1;
    }
    span
}

/// What a finished span describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// The whole run, root of its trace.
    Run,
    /// One attempt of one node, child of the run span.
    Attempt,
}

/// A span that ended: the run (when it reached a final state) or one attempt.
#[derive(Debug, Clone)]
pub struct SpanEnded<'a> {
    pub kind: SpanKind,
    /// This span's trace and span id.
    pub context: TraceContext,
    /// The run span's id for an attempt; `None` for the run span.
    pub parent_span_id: Option<[u8; 8]>,
    pub start_ms: i64,
    pub end_ms: i64,
    pub run_id: &'a str,
    pub flow: &'a str,
    /// `manual`, `cron`, `event`, ... (how the run was triggered).
    pub trigger: &'a str,
    /// The node of an attempt span.
    pub node: Option<&'a str>,
    pub attempt: u32,
    /// Run: SUCCESS, FAILED or CANCELLED; attempt: SUCCESS, FAILED or RETRYABLE.
    pub result: &'a str,
    pub error: Option<&'a str>,
}

/// Per loaded run: what its spans need.
#[derive(Debug, Clone)]
pub(crate) struct RunTrace {
    pub context: TraceContext,
    pub trigger: String,
    pub created_at_ms: i64,
}

impl RunTrace {
    /// For a run just created from `run`.
    pub fn from_new(run: &madeira_store::NewRun) -> Self {
        let context = run
            .trace_context
            .as_deref()
            .and_then(TraceContext::parse)
            .unwrap_or_else(|| TraceContext::for_run_id(&run.id));
        Self { context, trigger: run.trigger.clone(), created_at_ms: run.now_ms }
    }

    pub fn from_stored(run: &madeira_store::RunRow) -> Self {
        let context = run
            .trace_context
            .as_deref()
            .and_then(TraceContext::parse)
            .unwrap_or_else(|| TraceContext::for_run_id(&run.id));
        Self { context, trigger: run.trigger.clone(), created_at_ms: run.created_at }
    }
}

/// Reports the span of every finished attempt whose run is loaded.
pub(crate) fn attempt_spans(
    observers: &[Arc<dyn EngineObserver>],
    traces: &HashMap<String, RunTrace>,
    finished: &[FinishedAttempt],
) {
    for f in finished {
        let Some(run) = traces.get(&f.run_id) else {
            continue;
        };
        let span = SpanEnded {
            kind: SpanKind::Attempt,
            context: run.context.attempt(&f.node, f.attempt, f.started_at_ms),
            parent_span_id: Some(run.context.span_id),
            start_ms: f.started_at_ms,
            end_ms: f.finished_at_ms,
            run_id: &f.run_id,
            flow: &f.flow,
            trigger: &run.trigger,
            node: Some(&f.node),
            attempt: f.attempt,
            result: f.outcome,
            error: f.error.as_deref(),
        };
        observers.iter().for_each(|o| o.span_ended(&span));
    }
}

/// Reports the span of a run that reached a final state.
pub(crate) fn run_span(
    observers: &[Arc<dyn EngineObserver>],
    run: &RunTrace,
    snap: &RunSnapshot,
    end_ms: i64,
) {
    let span = SpanEnded {
        kind: SpanKind::Run,
        context: run.context,
        parent_span_id: None,
        start_ms: run.created_at_ms,
        end_ms,
        run_id: &snap.run_id,
        flow: &snap.flow.name,
        trigger: &run.trigger,
        node: None,
        attempt: 0,
        result: snap.state.as_str(),
        error: None,
    };
    observers.iter().for_each(|o| o.span_ended(&span));
}

/// The `tracing` span an attempt's execution runs in: its log lines carry the
/// run, node and trace ids.
pub(crate) fn attempt_log_span(job: &crate::Job, context: &TraceContext) -> tracing::Span {
    tracing::info_span!(
        "attempt",
        run_id = %job.run_id,
        flow = %job.flow,
        node = %job.node,
        attempt = job.attempt,
        trace_id = %context.trace_id_hex(),
        span_id = %context.span_id_hex(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips() {
        let ctx = TraceContext::new_root();
        let text = ctx.traceparent();
        assert_eq!(text.len(), 55);
        assert_eq!(TraceContext::parse(&text), Some(ctx));
    }

    #[test]
    fn bad_traceparents_are_refused() {
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
        let ok = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").expect("ok");
        assert_eq!(ok.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(ok.span_id_hex(), "00f067aa0ba902b7");
    }

    #[test]
    fn attempt_spans_are_stable_children() {
        let run = TraceContext::new_root();
        let a = run.attempt("verify", 1, 1000);
        assert_eq!(a.trace_id, run.trace_id);
        assert_eq!(a, run.attempt("verify", 1, 1000));
        assert_ne!(a.span_id, run.attempt("verify", 2, 1000).span_id);
        assert_ne!(a.span_id, run.attempt("verify", 1, 1001).span_id);
        assert_ne!(a.span_id, run.span_id);
        assert_eq!(TraceContext::for_run_id("r1"), TraceContext::for_run_id("r1"));
    }
}
