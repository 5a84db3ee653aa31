//! Conversions between stored rows and the planner's `RunSnapshot`.

use std::sync::Arc;

use madeira_core::{FlowDef, NodeRt, RunSnapshot, RunState};
use madeira_store::{NodeRow, StoredRun};

use crate::EngineError;

/// Rebuilds a run's snapshot from its rows; node rows are matched by index.
pub(crate) fn from_stored(stored: StoredRun, flow: Arc<FlowDef>) -> Result<RunSnapshot, EngineError> {
    let run_id = stored.run.id.clone();
    let state: RunState = stored.run.state;
    let mut nodes = vec![NodeRt::default(); flow.nodes.len()];
    for row in stored.nodes {
        let Some(slot) = nodes.get_mut(row.idx as usize) else {
            return Err(EngineError::Store(madeira_store::StoreError::Corrupt {
                table: "nodes",
                detail: format!("run {run_id}: node index {} beyond its flow", row.idx),
            }));
        };
        *slot = NodeRt {
            state: row.state,
            reason: row.reason,
            attempt: row.attempt,
            series_start: row.series_start,
            data_version: row.data_version,
            outputs: row.outputs,
            reads: row.reads,
            stale: row.stale,
            fallback: row.fallback,
            next_attempt_at_ms: row.next_attempt_at,
            started_at_ms: row.started_at,
            finished_at_ms: row.finished_at,
        };
    }
    Ok(RunSnapshot { run_id, flow, state, params: stored.run.params, nodes, biz_date: stored.run.biz_date })
}

/// The row to write for node `idx` of `snap`.
pub(crate) fn node_row(snap: &RunSnapshot, idx: usize) -> NodeRow {
    let n = &snap.nodes[idx];
    NodeRow {
        run_id: snap.run_id.clone(),
        idx: idx as u32,
        node: snap.flow.nodes[idx].id.clone(),
        state: n.state,
        reason: n.reason.clone(),
        attempt: n.attempt,
        series_start: n.series_start,
        data_version: n.data_version,
        outputs: n.outputs.clone(),
        reads: n.reads.clone(),
        stale: n.stale,
        fallback: n.fallback,
        next_attempt_at: n.next_attempt_at_ms,
        started_at: n.started_at_ms,
        finished_at: n.finished_at_ms,
    }
}
