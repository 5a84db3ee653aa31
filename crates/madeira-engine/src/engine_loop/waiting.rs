//! The engine loop's handling of nodes that wait for their executor (the gate) and
//! of observe-only runs reported by `madeira exec`.

use std::time::Instant;

use madeira_core::model::NodeAction;
use madeira_core::{Command, FlowDef, NodeState, RunState};
use tracing::{debug, info};

use super::Engine;
use crate::EngineError;
use crate::executor::AttemptResult;
use crate::record::Work;

impl Engine {
    /// Why `node` cannot be dispatched now; observe-only flows never wait.
    pub(super) fn waiting_reason(&self, flow: &FlowDef, node: usize) -> Option<String> {
        if flow.observe {
            return None;
        }
        match &flow.nodes[node].action {
            NodeAction::Run(executor) => self.p.executors.waiting_reason(executor),
            NodeAction::Manual(_) => None,
        }
    }

    pub(super) fn park(&mut self, run_id: &str, node: usize, ready_at: Instant, reason: String) {
        let Some(snap) = self.runs.get(run_id) else {
            return;
        };
        let (flow, name) = (snap.flow.name.clone(), snap.flow.nodes[node].id.clone());
        if self.gate.park(run_id, node, &name, ready_at, reason.clone()) {
            info!(run_id = %run_id, flow = %flow, node = %name, reason = %reason, "node waits in INIT");
            self.p.observers.iter().for_each(|o| o.node_waiting(run_id, &flow, &name, Some(&reason)));
        }
    }

    /// Looks at every waiting node again: dispatches those whose executor can now
    /// take them, keeps the others waiting.
    pub(super) async fn recheck_waiting(&mut self, work: &mut Work) {
        for (run_id, node, name, ready_at) in self.gate.take_all() {
            let still_waiting = match self.ensure_loaded(&run_id, false).await {
                Ok(()) => self.runs.get(&run_id).map(|snap| {
                    let live = snap.state == RunState::Running && snap.nodes[node].state == NodeState::Init;
                    (live, snap.flow.clone())
                }),
                Err(_) => None,
            };
            let Some((true, flow)) = still_waiting else {
                self.stop_waiting(&run_id, &name, None);
                continue;
            };
            match self.waiting_reason(&flow, node) {
                Some(reason) => {
                    self.gate.park(&run_id, node, &name, ready_at, reason);
                }
                None => {
                    self.stop_waiting(&run_id, &name, Some(&flow.name));
                    self.on_ready(&run_id, node, ready_at, work);
                }
            }
        }
    }

    fn stop_waiting(&mut self, run_id: &str, name: &str, flow: Option<&str>) {
        self.gate.clear(run_id, name);
        let flow = flow.map(str::to_string).or_else(|| self.runs.get(run_id).map(|s| s.flow.name.clone()));
        let flow = flow.unwrap_or_default();
        self.p.observers.iter().for_each(|o| o.node_waiting(run_id, &flow, name, None));
    }

    /// Ends the attempt of an observe-only node with what `madeira exec` reported.
    pub(super) async fn observed_done(
        &mut self,
        run_id: &str,
        node: usize,
        result: AttemptResult,
        work: &mut Work,
    ) -> Result<(), EngineError> {
        self.ensure_loaded(run_id, true).await?;
        let state = self.runs.get(run_id).map(|s| (s.state, s.nodes.get(node).map(|n| n.state)));
        match state {
            Some((RunState::Running, Some(NodeState::Init))) => {
                self.apply(run_id, Command::Dispatch { node }, "exec", work)?;
            }
            Some((_, Some(NodeState::Running))) => {}
            Some((_, Some(other))) => {
                debug!(run_id = %run_id, state = %other, "observed result for a node no longer running; kept as is");
                return Ok(());
            }
            _ => return Err(EngineError::RunNotFound(run_id.to_string())),
        }
        let attempt = self.runs.get(run_id).map(|s| s.nodes[node].attempt).unwrap_or(1);
        let host = self.runs.get(run_id).and_then(|s| self.start_host(s, node, false));
        self.attempt_done(run_id, node, attempt, result, host, work);
        Ok(())
    }
}
