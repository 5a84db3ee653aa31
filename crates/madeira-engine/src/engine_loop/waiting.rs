//! The engine loop's handling of nodes that wait for their executor (the gate) and
//! of observe-only runs reported by `madeira exec`.

use madeira_core::{Command, NodeState, RunState};
use tracing::debug;

use super::Engine;
use crate::EngineError;
use crate::executor::AttemptResult;
use crate::record::Work;

impl Engine {
    /// Looks at every waiting node again: dispatches those whose executor can now
    /// take them, keeps the others waiting.
    pub(super) async fn recheck_waiting(&mut self, work: &mut Work) {
        for (run_id, node, name, ready_at) in self.step.gate.take_all() {
            let still_waiting = match self.ensure_loaded(&run_id, false).await {
                Ok(()) => self.step.runs.get(&run_id).map(|snap| {
                    let live = snap.state == RunState::Running && snap.nodes[node].state == NodeState::Init;
                    (live, snap.flow.clone())
                }),
                Err(_) => None,
            };
            let Some((true, flow)) = still_waiting else {
                self.stop_waiting(&run_id, &name, None);
                continue;
            };
            match self.step.waiting_reason(&flow, node) {
                Some(reason) => {
                    self.step.gate.park(&run_id, node, &name, ready_at, reason);
                }
                None => {
                    self.stop_waiting(&run_id, &name, Some(&flow.name));
                    self.step.on_ready(&run_id, node, ready_at, work);
                }
            }
        }
    }

    fn stop_waiting(&mut self, run_id: &str, name: &str, flow: Option<&str>) {
        self.step.gate.clear(run_id, name);
        let flow =
            flow.map(str::to_string).or_else(|| self.step.runs.get(run_id).map(|s| s.flow.name.clone()));
        let flow = flow.unwrap_or_default();
        self.effects.observers.iter().for_each(|o| o.node_waiting(run_id, &flow, name, None));
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
        let state = self.step.runs.get(run_id).map(|s| (s.state, s.nodes.get(node).map(|n| n.state)));
        match state {
            Some((RunState::Running, Some(NodeState::Init))) => {
                self.step.apply(run_id, Command::Dispatch { node }, "exec", work)?;
            }
            Some((_, Some(NodeState::Running))) => {}
            Some((_, Some(other))) => {
                debug!(run_id = %run_id, state = %other, "observed result for a node no longer running; kept as is");
                return Ok(());
            }
            _ => return Err(EngineError::RunNotFound(run_id.to_string())),
        }
        let attempt = self.step.runs.get(run_id).map(|s| s.nodes[node].attempt).unwrap_or(1);
        let host = self.step.runs.get(run_id).and_then(|s| self.step.start_host(s, node, false));
        self.step.attempt_done(run_id, node, attempt, result, host, work);
        Ok(())
    }
}
