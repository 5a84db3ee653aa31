//! The engine loop's timers for manual nodes: `alert_after` (an overdue
//! confirmation is audited and reported to observers) and `fallback_after`.

use std::time::Duration;

use madeira_core::model::NodeAction;
use madeira_store::AuditRecord;
use tracing::warn;

use super::Engine;
use crate::clock::now_ms;
use crate::record::Work;
use crate::timers::{Timer, TimerKind};

impl Engine {
    pub(super) async fn confirm_overdue(&mut self, run_id: &str, node: usize, work: &mut Work) {
        if self.ensure_loaded(run_id, false).await.is_err() {
            return;
        }
        let Some(snap) = self.runs.get(run_id) else {
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

    pub(super) fn arm_confirm_timers(&mut self, run_id: &str, node: usize) {
        let Some(snap) = self.runs.get(run_id) else {
            return;
        };
        let NodeAction::Manual(manual) = &snap.flow.nodes[node].action else {
            return;
        };
        let since = snap.nodes[node].started_at_ms.unwrap_or_else(now_ms);
        let at = |d: Duration| since + i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4);
        if let Some(after) = manual.alert_after {
            let timer = Timer { run_id: run_id.to_string(), node, kind: TimerKind::ConfirmOverdue };
            self.timers.at(at(after), timer);
        }
        if let (Some(after), Some(_)) = (manual.fallback_after, &manual.fallback) {
            let timer = Timer { run_id: run_id.to_string(), node, kind: TimerKind::ConfirmFallback };
            self.timers.at(at(after), timer);
        }
    }
}
