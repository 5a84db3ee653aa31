//! The transactional outbox of a shared store: before the commit that ends a run,
//! observers may add an alert event to the same commit (see
//! `EngineObserver::alert_event`), so a replica killed right after the commit
//! cannot lose the alert of a run it finished.

use madeira_core::Action;

use super::Engine;
use crate::record::Work;

impl Engine {
    pub(super) fn outbox(&self, work: &mut Work) {
        for (run_id, action) in &work.actions {
            if !matches!(action, Action::RunFinished { .. }) {
                continue;
            }
            let Some(snap) = self.runs.get(run_id) else { continue };
            for observer in &self.p.observers {
                if let Some(event) = observer.alert_event(snap) {
                    work.batch.alert_events.push(event);
                }
            }
        }
    }
}
