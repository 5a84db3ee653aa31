//! The bench's handle on its replicas' engines: `Engines` (trigger in turn, merged
//! run events, pooled stats), one bench trigger, waiting for a set of runs to end,
//! and the process's RSS from /proc. Shared by `bench` and its scenario modules
//! (`bench_alerts`, `bench_sidecar`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use madeira_engine::{EngineHandle, RunEvent, TriggerRequest};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

/// The replicas' engines.
pub(super) struct Engines(pub(super) Vec<EngineHandle>);

impl Engines {
    /// The engine that takes the `i`-th trigger.
    pub(super) fn pick(&self, i: usize) -> &EngineHandle {
        &self.0[i % self.0.len()]
    }

    /// Every replica's run-level ends (SUCCESS, FAILED, CANCELLED), merged (a lag
    /// is reported as an error). Only the ends are forwarded: a scenario that
    /// triggers for a while before it reads (`steady`) would otherwise keep every
    /// node event of every run in this unbounded channel, ~30 per settlement run,
    /// and report the harness's growth as the engine's peak RSS.
    pub(super) fn subscribe(&self) -> mpsc::UnboundedReceiver<Result<Arc<RunEvent>, String>> {
        let (tx, rx) = mpsc::unbounded_channel();
        for engine in &self.0 {
            let mut events = engine.subscribe();
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    let item = match events.recv().await {
                        Ok(e) if is_run_end(&e) => Ok(e),
                        Ok(_) => continue,
                        Err(RecvError::Lagged(n)) => Err(format!("event stream lagged by {n}")),
                        Err(RecvError::Closed) => return,
                    };
                    if tx.send(item).is_err() {
                        return;
                    }
                }
            });
        }
        rx
    }

    /// Counters summed and latencies pooled over every replica.
    pub(super) fn stats(&self) -> madeira_engine::StatsSnapshot {
        let mut total = madeira_engine::StatsSnapshot::default();
        for s in self.0.iter().map(|e| e.stats().snapshot(true)) {
            total.transitions += s.transitions;
            total.commits += s.commits;
            total.dispatch_latency_us.extend(s.dispatch_latency_us);
        }
        total
    }
}

/// A run-level change to a final state.
fn is_run_end(e: &RunEvent) -> bool {
    e.node.is_none() && matches!(e.to.as_str(), "SUCCESS" | "FAILED" | "CANCELLED")
}

pub(super) async fn trigger(engine: &EngineHandle, flow: &str) -> Result<String> {
    let req = TriggerRequest {
        flow: flow.into(),
        params: json!({}),
        idempotency_key: None,
        trigger: "bench".into(),
        actor: "bench".into(),
        version: None,
        biz_date: None,
        at_ms: None,
    };
    Ok(engine.trigger(req).await?.run_id)
}

/// Waits until every run in `ids` has finished; errors past the deadline.
pub(super) async fn wait_all(
    events: &mut mpsc::UnboundedReceiver<Result<Arc<RunEvent>, String>>,
    mut ids: HashSet<String>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !ids.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.recv()).await {
            Ok(Some(Ok(e)))
                if e.node.is_none() && matches!(e.to.as_str(), "SUCCESS" | "FAILED" | "CANCELLED") =>
            {
                if e.to != "SUCCESS" && ids.contains(&e.run_id) {
                    bail!("run {} ended {}", e.run_id, e.to);
                }
                ids.remove(&e.run_id);
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(lag))) => bail!("{lag}; cannot count completions"),
            Ok(None) => bail!("engines stopped"),
            Err(_) => bail!("{} run(s) unfinished after 300 s", ids.len()),
        }
    }
    Ok(())
}

/// A field of /proc/self/status in kB (0 where unavailable).
pub(super) fn rss_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets VmHWM so each scenario reports its own peak (Linux `clear_refs` 5).
pub(super) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The settlement flow of the benchmarks (`steady`, `history`): eight noop
/// nodes with strong, weak and conditional edges.
pub(super) const SETTLEMENT_DAG: &str = "flow: bench-settlement
nodes:
  pull_payments: {run: {builtin: noop, outputs: {n: 1}}}
  pull_refunds: {run: {builtin: noop, outputs: {refund_count: 2}}}
  verify: {needs: [pull_payments, pull_refunds], run: {builtin: noop}}
  coupons: {needs: [pull_payments], run: {builtin: noop}}
  receivables: {needs: [verify, coupons], run: {builtin: noop}}
  refund_check: {needs: [verify], when: 'nodes.pull_refunds.outputs.refund_count > 0', run: {builtin: noop}}
  notify: {needs: [{node: receivables, kind: weak}], run: {builtin: noop}}
  export: {needs: [receivables, refund_check], run: {builtin: noop}}
";
