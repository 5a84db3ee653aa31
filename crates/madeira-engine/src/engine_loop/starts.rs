//! How runs come into this engine's hands, and the only two commands that do it.
//! `Command::Start` is the only way a run starts: a run the store admitted to
//! start (created ADMITTED with room, or promoted QUEUED -> ADMITTED when a slot
//! freed) arrives as `Envelope::Start` and its ADMITTED -> RUNNING edge is
//! written by the group commit that also writes its first node transitions.
//! `Command::Recover` is for recovery only: a RUNNING run taken in charge again
//! (restart, reconcile sweep, lease takeover, a commit that failed) arrives as
//! `Envelope::Resume`. A run admitted but never started (its starter died between
//! the creation commit and the group commit, or its start was not saved) is found
//! by the same recovery paths and started then. Loading a run's snapshot (after
//! claiming it) lives here too.

use madeira_core::{Command, NodeState, RunState};
use tracing::{debug, error};

use super::Engine;
use crate::envelope::{Envelope, Fresh};
use crate::record::Work;
use crate::trace::RunTrace;
use crate::{EngineError, clock::now_ms, snapshot};

impl Engine {
    /// Resumes every unfinished run the store knows and this engine does not drive:
    /// at start (crash recovery) and periodically as a safety net. RUNNING and
    /// ADMITTED runs are resumed (the latter also when held here QUEUED, in case
    /// another replica's promotion could not reach this holder); flows with QUEUED
    /// runs get a promotion.
    pub(super) async fn reconcile(&mut self) {
        let ids = match self.store.unfinished_runs().await {
            Ok(ids) => ids,
            Err(e) => {
                error!(error = %e, "reconcile: cannot list unfinished runs");
                return;
            }
        };
        let mut queued_flows = Vec::new();
        for run_id in ids {
            let held = self.step.runs.get(&run_id).map(|snap| snap.state);
            if held.is_some_and(|state| !state.is_unstarted()) {
                continue;
            }
            match self.store.load_run(&run_id).await {
                Ok(Some(stored)) if stored.run.state == RunState::Admitted => {
                    self.intake.pending.push_back(Envelope::Resume { run_id })
                }
                Ok(Some(stored)) if stored.run.state == RunState::Queued => {
                    queued_flows.push(stored.run.flow.clone())
                }
                Ok(Some(_)) if held.is_none() => self.intake.pending.push_back(Envelope::Resume { run_id }),
                Ok(_) => {}
                Err(e) => error!(run_id = %run_id, error = %e, "reconcile: cannot load run"),
            }
        }
        queued_flows.sort();
        queued_flows.dedup();
        for flow in queued_flows {
            self.promote(&flow).await;
        }
        let handle = self.handle.clone();
        self.effects.tasks.spawn(async move { handle.sweep_backfills().await });
    }

    /// Admits queued runs of `flow` to start while `max_active_runs` leaves room,
    /// and starts them.
    pub(super) async fn promote(&mut self, flow: &str) {
        let Ok(Some(record)) = self.store.get_flow(flow).await else {
            return;
        };
        let Ok(def) = self.flows.get(self.store.as_ref(), flow, record.latest_version).await else {
            return;
        };
        let max = def.concurrency.max_active_runs;
        if def.concurrency.depends_on_past {
            let released = crate::bizdates::release_waiting(
                self.store.as_ref(),
                &self.effects.observers,
                &def,
                &self.flows.calendars(),
                now_ms(),
                &mut self.past_alerted,
            )
            .await;
            for run_id in released {
                self.intake.pending.push_back(Envelope::Start { run_id, fresh: None });
            }
        }
        loop {
            match self.store.promote_queued(flow, max, now_ms()).await {
                Ok(Some(run_id)) => self.intake.pending.push_back(Envelope::Start { run_id, fresh: None }),
                Ok(None) => break,
                Err(e) => {
                    error!(flow = %flow, error = %e, "cannot promote queued run");
                    break;
                }
            }
        }
    }

    /// Starts a run admission let start: `fresh` when the creator made and claimed
    /// it here, else claimed and loaded from the store.
    pub(super) async fn start(&mut self, run_id: String, fresh: Option<Fresh>, work: &mut Work) {
        // A QUEUED snapshot here predates the admission: read the run again.
        if self.step.runs.get(&run_id).is_some_and(|snap| snap.state == RunState::Queued) {
            self.step.runs.remove(&run_id);
            self.effects.traces.remove(&run_id);
        }
        // A snapshot already here (a sweep loaded the run first) is newer than `fresh`.
        if let Some(fresh) = fresh.filter(|_| !self.step.runs.contains_key(&run_id)) {
            let (snap, trace) = *fresh;
            self.step.runs.insert(run_id.clone(), snap);
            self.effects.traces.insert(run_id.clone(), trace);
        }
        match self.ensure_loaded(&run_id, false).await {
            Ok(()) => {}
            Err(EngineError::HeldElsewhere { owner, .. }) => {
                debug!(run_id = %run_id, owner = %owner, "run to start held by another replica; it starts it");
                return;
            }
            Err(e) => {
                error!(run_id = %run_id, error = %e, "cannot load a run to start; recovery starts it");
                return;
            }
        }
        match self.step.apply(&run_id, Command::Start, "engine", work) {
            Ok(()) => work.resumed.push(run_id),
            // Cancelled, or already started, meanwhile.
            Err(e) => debug!(run_id = %run_id, error = %e, "start not applied"),
        }
    }

    /// Takes charge of an unfinished run again, reloaded from the store: a RUNNING
    /// run is recovered; an ADMITTED run (admitted to start, never started) is
    /// started. A QUEUED run is left to promotion (and out of memory, so the
    /// reconcile sweep sees it again).
    pub(super) async fn resume(&mut self, run_id: String, work: &mut Work) {
        self.step.runs.remove(&run_id);
        match self.load(&run_id, false).await {
            Ok(()) => {}
            Err(EngineError::HeldElsewhere { owner, .. }) => {
                debug!(run_id = %run_id, owner = %owner, "run held by another replica");
                return;
            }
            Err(e) => {
                error!(run_id = %run_id, error = %e, "cannot resume run");
                return;
            }
        };
        let Some(snap) = self.step.runs.get(&run_id) else { return };
        let cmd = match snap.state {
            RunState::Running => {
                let running = snap.nodes.iter().enumerate().filter(|(_, n)| n.state == NodeState::Running);
                self.effects.resumed.extend(running.map(|(i, _)| (run_id.clone(), i)));
                Command::Recover
            }
            RunState::Admitted => Command::Start,
            _ => {
                self.step.runs.remove(&run_id);
                self.effects.traces.remove(&run_id);
                return;
            }
        };
        let _ = self.step.apply(&run_id, cmd, "engine", work);
        work.resumed.push(run_id);
    }

    /// Makes sure this replica holds `run_id` (claiming it by lease; `steal_idle`
    /// for commands, which may take a run whose holder has nothing in flight) and
    /// has its snapshot in memory.
    pub(super) async fn ensure_loaded(&mut self, run_id: &str, steal_idle: bool) -> Result<(), EngineError> {
        if self.step.runs.contains_key(run_id) {
            return Ok(());
        }
        self.load(run_id, steal_idle).await
    }

    /// Claims `run_id` and loads its snapshot from the store.
    async fn load(&mut self, run_id: &str, steal_idle: bool) -> Result<(), EngineError> {
        self.claim(run_id, steal_idle).await?;
        let stored =
            self.store.load_run(run_id).await?.ok_or_else(|| EngineError::RunNotFound(run_id.to_string()))?;
        let flow = self.flows.get(self.store.as_ref(), &stored.run.flow, stored.run.version).await?;
        self.effects.traces.insert(run_id.to_string(), RunTrace::from_stored(&stored.run));
        let snap = snapshot::from_stored(stored, flow)?;
        self.step.runs.insert(run_id.to_string(), snap);
        Ok(())
    }
}
