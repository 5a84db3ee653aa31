//! The engine's side of run ownership: it plans and dispatches only for runs this
//! replica holds. A run is claimed (by lease) before it is loaded; runs created
//! here arrive already claimed, with their fresh snapshot (`Start { fresh }`, from
//! the creator); every commit is fenced on the
//! owner in the store, and when a fence fails the lost runs' attempts in this
//! process are stopped because another replica now resumes them (a sidecar's
//! attempt is left to finish: its result is relayed to the new holder).

use madeira_store::Claim;

use super::Engine;
use crate::EngineError;

impl Engine {
    /// Takes `run_id` for this replica, or says who holds it.
    pub(super) async fn claim(&self, run_id: &str, steal_idle: bool) -> Result<(), EngineError> {
        match self.store.claim_run(run_id, &self.holder.lease_now(), steal_idle).await? {
            Claim::Held => Ok(()),
            Claim::Missing => Err(EngineError::RunNotFound(run_id.to_string())),
            Claim::Other { owner } => Err(EngineError::HeldElsewhere { run: run_id.to_string(), owner }),
        }
    }

    /// Another replica took these runs over: stop our attempts of them that run
    /// in this process. An attempt on a sidecar is left to finish there: killing
    /// it would not undo what it did, and its result is relayed through the store
    /// to the run's holder, which does not place it again meanwhile (the fleet's
    /// `relay`); whatever it returns here is ignored (the run is forgotten).
    pub(super) fn lost(&mut self, runs: &[String]) {
        self.effects.running.retain(|(run_id, _), running| {
            let lost = runs.contains(run_id);
            if lost && running.in_process {
                running.token.cancel();
            }
            !lost
        });
        self.publish_in_process();
    }
}
