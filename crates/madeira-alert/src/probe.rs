//! The safety net of stall and slow warnings: the replica that reported a node
//! stalled or slow says when it moved on, but it may die first, or a restart may
//! dispatch the node before anyone watches it again. So the aggregating replica
//! checks the runs its open `MadeiraNodeStalled` / `MadeiraNodeSlow` alerts still
//! count against the run store every `PROBE_MS`, and lets go of those whose node
//! is no longer INIT (stalled) or RUNNING (slow), or whose run has ended.

use std::sync::Arc;

use async_trait::async_trait;
use madeira_core::NodeState;
use madeira_store::{RunStore, StoreError};
use tracing::warn;

use crate::aggregate::Changes;
use crate::task::{AlertTask, NodeProbe};

/// Most runs looked up per check (the rest wait for the next one).
const PROBE_MAX: usize = 200;

/// `NodeProbe` over the run store.
pub struct StoreProbe(pub Arc<dyn RunStore>);

#[async_trait]
impl NodeProbe for StoreProbe {
    async fn node_state(&self, run_id: &str, node: &str) -> Result<Option<NodeState>, StoreError> {
        let Some(stored) = self.0.load_run(run_id).await? else { return Ok(None) };
        if stored.run.state.is_terminal() {
            return Ok(None);
        }
        Ok(stored.nodes.iter().find(|n| n.node == node).map(|n| n.state))
    }
}

impl AlertTask {
    /// Checks open stall and slow alerts against the run store (see `probe`).
    pub fn with_probe(mut self, probe: Arc<dyn NodeProbe>) -> Self {
        self.probe = Some(probe);
        self
    }

    pub(crate) async fn probe_watched(&mut self) {
        let Some(probe) = self.probe.clone() else { return };
        let mut checks = Vec::new();
        for alert in self.agg.open() {
            let held = match alert.alertname.as_str() {
                "MadeiraNodeStalled" => NodeState::Init,
                "MadeiraNodeSlow" => NodeState::Running,
                _ => continue,
            };
            let Some(node) = alert.node.clone() else { continue };
            for run in &alert.runs {
                checks.push((alert.key.clone(), run.clone(), node.clone(), held));
            }
        }
        let now = self.shared.clock.now_ms();
        let mut out = Changes::default();
        for (key, run_id, node, held) in checks.into_iter().take(PROBE_MAX) {
            match probe.node_state(&run_id, &node).await {
                Ok(state) if state == Some(held) => {}
                Ok(_) => self.agg.leave(&key, &run_id, now, &mut out),
                Err(e) => {
                    warn!(error = %e, "cannot check stalled or slow nodes against the store");
                    break;
                }
            }
        }
        self.apply(out, Vec::new()).await;
    }
}
