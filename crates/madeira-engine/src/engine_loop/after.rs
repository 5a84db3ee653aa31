//! Wakes after a commit: a run (or node) that ended SUCCESS releases the runs held
//! by `after` on it for its business date. The commit that wrote the SUCCESS is
//! what made those runs admissible (`madeira_store`'s `WAITING`); a task started
//! right after it reads them (off the loop) and has their flows promoted, so they
//! start without any polling. A run that ended
//! SUCCESS also starts the flows whose `flow_succeeded` trigger names its flow,
//! for the same business date. A wake lost to a crash is made up by the reconcile
//! sweep, which promotes every flow with waiting runs. A run that ended FAILED,
//! and a run created held, are looked at by `crate::holds` (who is held behind a
//! failure, for the alerts), off the loop; a run that ended (any way) advances the
//! backfill it belongs to, if any (`crate::backfill`).

use madeira_core::{RunSnapshot, RunState};
use tracing::{Instrument, error, info_span};

use super::Engine;
use crate::RunEvent;
use crate::envelope::Envelope;

/// One upstream success: `(flow, biz_date, whole run)`.
pub(super) type Success = (String, String, bool);

impl Engine {
    /// A run that ended FAILED with runs waiting for it: they are held behind it.
    pub(super) fn tell_holds(&self, run_id: &str, state: RunState, snap: &RunSnapshot) {
        let (RunState::Failed, Some(date)) = (state, snap.biz_date.clone()) else { return };
        if self.effects.observers.is_empty() {
            return;
        }
        let (store, observers) = (self.store.clone(), self.effects.observers.clone());
        let (run_id, flow) = (run_id.to_string(), snap.flow.name.clone());
        let span = info_span!("holds", run_id = %run_id);
        self.effects.tasks.spawn(
            async move { crate::holds::run_failed(store.as_ref(), &observers, &run_id, &flow, &date).await }
                .instrument(span),
        );
    }

    /// A run created held by `after`: is a failed upstream holding it?
    pub(super) fn tell_held(&self, run_id: String) {
        if self.effects.observers.is_empty() {
            return;
        }
        let (store, observers) = (self.store.clone(), self.effects.observers.clone());
        let span = info_span!("holds", run_id = %run_id);
        self.effects.tasks.spawn(
            async move { crate::holds::run_created_held(store.as_ref(), &observers, &run_id).await }
                .instrument(span),
        );
    }

    /// The successes among a commit's events: node SUCCESS of runs held here (of
    /// a flow something may wait on, `crate::waited`), and run SUCCESS (the run's
    /// business date read from its snapshot, still here).
    pub(super) fn successes(&self, events: &[RunEvent]) -> Vec<Success> {
        let mut out: Vec<Success> = events
            .iter()
            .filter(|e| e.to == "SUCCESS")
            .filter(|e| e.node.is_none() || self.waited.may_wait_on(&e.flow))
            .filter_map(|e| {
                let date = self.step.runs.get(&e.run_id)?.biz_date.clone()?;
                Some((e.flow.clone(), date, e.node.is_none()))
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Wakes what waits on `successes`, off the loop: a task reads the store
    /// (the nodes and the runs held on each success's flow and business date),
    /// tells the held nodes' runs (here through the loop's own channel, on another
    /// replica through its inbox), promotes the flows with runs held (a `Promote`
    /// envelope), and fires `flow_succeeded` triggers. The loop goes on to its next
    /// batch meanwhile: a chain's next node no longer waits for two reads per node
    /// that ended SUCCESS, nearly always answered "none".
    pub(super) fn wake_after(&self, successes: Vec<Success>) {
        let (store, handle, tasks) = (self.store.clone(), self.handle.clone(), self.effects.tasks.clone());
        let (tx, owner) = (self.intake.tx.clone(), self.holder.owner.clone());
        let span = info_span!("wake_after", successes = successes.len());
        self.effects.tasks.spawn(
            async move {
                let tell = super::node_after::Tell { store: store.as_ref(), handle: &handle, tasks: &tasks, tx: &tx };
                tell.node_waits(&owner, &successes).await;
                let mut flows = Vec::new();
                for (flow, date, whole) in &successes {
                    match store.after_dependents(flow, date).await {
                        Ok(held) => flows.extend(held),
                        Err(e) => {
                            error!(flow = %flow, biz_date = %date, error = %e, "cannot read runs held on this run; the reconcile sweep releases them")
                        }
                    }
                    if *whole {
                        let (handle, flow, date) = (handle.clone(), flow.clone(), date.clone());
                        let span = info_span!("flow_succeeded", upstream = %flow, biz_date = %date);
                        tasks.spawn(async move { handle.fire_flow_succeeded(&flow, &date).await }.instrument(span));
                    }
                }
                flows.sort();
                flows.dedup();
                for flow in flows {
                    let _ = tx.send(Envelope::Promote { flow }).await;
                }
            }
            .instrument(span),
        );
    }
}

/// Runs a commit ended (SUCCESS, FAILED or CANCELLED).
pub(super) fn finished_runs(events: &[RunEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.node.is_none() && matches!(e.to.as_str(), "SUCCESS" | "FAILED" | "CANCELLED"))
        .map(|e| e.run_id.clone())
        .collect()
}

impl Engine {
    /// Advances, off the loop, the backfills the runs that just ended belong to,
    /// and tells the parents of sub-flow children among them held elsewhere.
    pub(super) fn advance_backfills(&mut self, finished: Vec<String>) {
        if finished.is_empty() {
            return;
        }
        if self.options.shared_store {
            let (handle, ended) = (self.handle.clone(), finished.clone());
            self.effects
                .tasks
                .spawn(async move { handle.tell_parents(ended).await }.instrument(info_span!("subflow")));
        }
        let handle = self.handle.clone();
        self.effects
            .tasks
            .spawn(async move { handle.backfills_after(finished).await }.instrument(info_span!("backfill")));
    }
}
