//! The transactional outbox of a shared store: before a commit, observers may add
//! alert events to it (see `EngineObserver::alert_events`) for the runs it ends, the
//! confirmations it finds overdue and the confirmations it closes, so a replica
//! killed right after the commit cannot lose them.

use madeira_core::{Action, NodeState};
use madeira_store::Edge;

use super::Engine;
use crate::observer::AlertSource;
use crate::record::Work;

impl Engine {
    pub(super) fn outbox(&self, work: &mut Work) {
        let mut events = Vec::new();
        let mut report = |source: AlertSource<'_>| {
            for observer in &self.effects.observers {
                events.extend(observer.alert_events(source));
            }
        };
        for (run_id, action) in &work.actions {
            if let (Action::RunFinished { .. }, Some(snap)) = (action, self.step.runs.get(run_id)) {
                report(AlertSource::RunFinished(snap));
            }
        }
        for (run_id, node) in &work.overdue {
            if let Some(snap) = self.step.runs.get(run_id) {
                report(AlertSource::ConfirmOverdue(snap, node));
            }
        }
        for t in &work.batch.transitions {
            if let (Some(node), Edge::Node { from: NodeState::ManualConfirm, cause, .. }) = (&t.node, t.edge)
            {
                report(AlertSource::ConfirmLeft { run_id: &t.run_id, node, cause: cause.as_str() });
            }
        }
        work.batch.alert_events.extend(events);
    }
}
