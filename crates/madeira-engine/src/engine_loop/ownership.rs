//! The engine's side of run ownership: it plans and dispatches only for runs this
//! replica holds. A run is claimed (by lease) before it is loaded; runs created
//! here arrive already claimed and loaded (`Adopt`); every commit is fenced on the
//! owner in the store, and when a fence fails the lost runs' attempts are stopped
//! because another replica now resumes them.

use madeira_core::Command;
use madeira_store::{Claim, StoredRun};
use tracing::error;

use super::Engine;
use crate::EngineError;
use crate::record::Work;
use crate::snapshot;

impl Engine {
    /// Takes `run_id` for this replica, or says who holds it.
    pub(super) async fn claim(&self, run_id: &str, steal_idle: bool) -> Result<(), EngineError> {
        match self.p.store.claim_run(run_id, &self.holder.lease_now(), steal_idle).await? {
            Claim::Held => Ok(()),
            Claim::Missing => Err(EngineError::RunNotFound(run_id.to_string())),
            Claim::Other { owner } => Err(EngineError::HeldElsewhere { run: run_id.to_string(), owner }),
        }
    }

    /// Starts a run that the handle created, claimed and loaded (as `Resume` would).
    pub(super) async fn adopt(&mut self, stored: StoredRun, work: &mut Work) {
        let run_id = stored.run.id.clone();
        self.runs.remove(&run_id);
        let snap = match self.p.flows.get(self.p.store.as_ref(), &stored.run.flow, stored.run.version).await {
            Ok(flow) => snapshot::from_stored(stored, flow),
            Err(e) => Err(e),
        };
        match snap {
            Ok(snap) => {
                self.runs.insert(run_id.clone(), snap);
                let _ = self.apply(&run_id, Command::Recover, "engine", work);
                work.resumed.push(run_id);
            }
            Err(e) => error!(run_id = %run_id, error = %e, "cannot start run"),
        }
    }

    /// Another replica took these runs over: stop our attempts of them.
    pub(super) fn lost(&mut self, runs: &[String]) {
        self.running.retain(|(run_id, _), token| {
            let lost = runs.contains(run_id);
            if lost {
                token.cancel();
            }
            !lost
        });
    }
}
