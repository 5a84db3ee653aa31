//! The engine loop's timers for manual nodes: `alert_after` (an overdue
//! confirmation is audited and reported to observers) and `fallback_after`.

use madeira_store::AuditRecord;
use tracing::warn;

use super::Engine;
use crate::clock::now_ms;
use crate::record::Work;

impl Engine {
    pub(super) async fn confirm_overdue(&mut self, run_id: &str, node: usize, work: &mut Work) {
        if self.ensure_loaded(run_id, false).await.is_err() {
            return;
        }
        let Some(snap) = self.step.runs.get(run_id) else {
            return;
        };
        if snap.nodes[node].state != madeira_core::NodeState::ManualConfirm {
            return;
        }
        let name = snap.flow.nodes[node].id.clone();
        warn!(run_id = %run_id, flow = %snap.flow.name, node = %name, "manual confirmation overdue");
        work.overdue.push((run_id.to_string(), name.clone()));
        work.audit(AuditRecord {
            at: now_ms(),
            actor: "engine".into(),
            action: "confirm_overdue".into(),
            run_id: Some(run_id.to_string()),
            node: Some(name),
            reason: Some("alert_after elapsed without an answer".into()),
            details: None,
        });
    }
}
