//! The engine loop, single writer of run state for this process, built from three
//! components that each own their state:
//! - `intake.rs`: every source of envelopes (the channel, timers, sweeps); a new
//!   source is one more sender or one more arm of `Intake::next`;
//! - `step.rs`: the pure part: a command on a run's snapshot, through the core's
//!   `plan::apply`, becomes transitions, rows and actions in one batch (`Work`);
//! - `effects.rs`: what a committed batch says is done: attempts started or
//!   aborted, timers armed, observers and viewers told, callers answered.
//!
//! Each turn: the intake hands over a batch of envelopes; each is routed to the
//! step (`apply_envelope`, loading or claiming its run first: `starts.rs`,
//! `ownership.rs`); the batch is group-committed (`fence.rs`); the effects perform
//! it; then what only the engine can do follows (`after.rs`: promotions, holds,
//! wake-ups, backfills). An attempt's end comes back as `Envelope::AttemptDone`:
//! `Step::attempt_done` records it, `Effects::perform` acts on what the planner
//! decided next.

use std::sync::Arc;
use std::time::Duration;

use madeira_store::{AuditRecord, CommandAnswer, Store};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

mod after;
mod drain;
mod effects;
mod fence;
mod handover;
mod hosts;
mod intake;
mod manual;
mod node_after;
mod outbox;
mod ownership;
mod permits;
mod starts;
mod step;
mod waiting;
mod watch;

use crate::envelope::Envelope;
use crate::lease::Holder;
use crate::record::Work;
use crate::{EngineError, EngineOptions, FlowCache, clock::now_ms, retention};
use effects::Perform;
pub(crate) use effects::{Effects, EffectsOptions};
pub(crate) use intake::Intake;
use intake::{Input, SourceCtx, Wait};
pub(crate) use step::{Step, StepOptions};

/// The engine: its three components and what the loop itself needs to take runs
/// in charge (load, claim, recover, hand over).
pub struct Engine {
    /// This engine's own handle (the inbox of forwarded actions acts through it).
    handle: crate::EngineHandle,
    store: Arc<dyn Store>,
    options: EngineOptions,
    flows: FlowCache,
    health: Arc<crate::health::StoreHealth>,
    holder: Holder,
    /// Every source of envelopes (`intake.rs`).
    intake: Intake,
    /// The pure part: commands on runs' snapshots become one batch (`step.rs`).
    step: Step,
    /// What a committed batch says is done (`effects.rs`).
    effects: Effects,
    watch: watch::Watch,
    /// `depends_on_past` runs held by a FAILED previous date already alerted.
    past_alerted: std::collections::HashSet<String>,
    /// The flows a run or node may wait on (`waited.rs`).
    waited: crate::waited::Waited,
}

/// What `crate::build` hands the engine.
pub(crate) struct Wiring {
    pub handle: crate::EngineHandle,
    pub store: Arc<dyn Store>,
    pub options: EngineOptions,
    pub flows: FlowCache,
    pub health: Arc<crate::health::StoreHealth>,
    pub intake: Intake,
    pub step: Step,
    pub effects: Effects,
}

impl Engine {
    pub(crate) fn new(w: Wiring) -> Self {
        let holder = Holder { owner: w.options.replica_id.clone(), lease: w.options.lease };
        Self {
            holder,
            handle: w.handle,
            store: w.store,
            options: w.options,
            flows: w.flows,
            health: w.health,
            intake: w.intake,
            step: w.step,
            effects: w.effects,
            watch: Default::default(),
            past_alerted: Default::default(),
            waited: Default::default(),
        }
    }

    /// Runs until `cancel` fires: recovers unfinished runs first, then loops.
    /// In-process attempts in flight at the stop are aborted (a later start
    /// retries them); sidecar attempts are left running (a later start adopts them).
    pub async fn run(self, cancel: CancellationToken) {
        self.run_until(cancel.clone(), cancel).await
    }

    /// As `run`, shutting down in two steps: at `drain` no new attempt starts and no
    /// timer fires while results are still committed (so in-process attempts can
    /// finish; `EngineStats::wait_in_process_idle` tells when they have); at `stop`
    /// the loop ends.
    pub async fn run_until(mut self, drain: CancellationToken, cancel: CancellationToken) {
        self.reconcile().await;
        let retention = retention::spawn(self.store.clone(), self.options.clone(), cancel.clone());
        let partitions = crate::partitions::spawn(self.store.clone(), cancel.clone());
        let archiver = self.options.archive_after.map(|after| {
            let folded = self.effects.stats.folded_counter();
            crate::archiver::spawn(
                self.store.clone(),
                after,
                self.options.archive_every,
                folded,
                cancel.clone(),
            )
        });
        let missed = crate::missed::spawn(
            self.store.clone(),
            self.flows.clone(),
            self.effects.observers.clone(),
            cancel.clone(),
        );
        if !self.options.shared_store {
            // Before the creator starts: it adds to what this read.
            self.waited.load(self.store.as_ref()).await;
        }
        let ctx = SourceCtx {
            store: &self.store,
            health: &self.health,
            handle: &self.handle,
            holder: &self.holder,
            options: &self.options,
            waited: &self.waited,
        };
        let sources = self.intake.sources(ctx, &cancel).await;
        if let Some(creator) = sources.creator {
            self.effects.tasks.spawn(creator);
        }
        loop {
            self.watch_if_due();
            let wait = Wait {
                drain: &drain,
                cancel: &cancel,
                live: !self.step.draining,
                timers: &mut self.effects.timers,
                hosts_due: self.effects.hosts.due,
                store_up: &self.health.came_up,
                offer: self.step.gate.has_parked(),
                shared: self.options.shared_store,
                batch_max: self.options.batch_max,
            };
            match self.intake.next(wait).await {
                Input::Batch(batch) => self.process(batch).await,
                Input::Reconcile => self.reconcile().await,
                Input::Offer => self.offer_waiting().await,
                Input::PermitPoll => self.poll_waiting_permits(),
                Input::Drain => self.start_drain(),
                Input::Again => {}
                Input::Stop => break,
            }
        }
        self.stop().await;
        let _ = retention.await;
        let _ = partitions.await;
        if let Some(archiver) = archiver {
            let _ = archiver.await;
        }
        let _ = missed.await;
        for helper in sources.helpers {
            let _ = helper.await;
        }
        info!("engine stopped");
    }

    /// Every `(flow, node)` with runs waiting for a global permit asks the store again.
    fn poll_waiting_permits(&mut self) {
        for (flow, node) in self.step.throttle.waiting_keys() {
            self.intake.pending.push_back(Envelope::PermitPoll { flow, node });
        }
    }

    /// Applies `batch`, commits it and acts on it, then publishes how many
    /// in-process attempts run (once per batch: counting them is linear).
    async fn process(&mut self, batch: Vec<Envelope>) {
        self.process_batch(batch).await;
        self.publish_in_process();
    }

    async fn process_batch(&mut self, batch: Vec<Envelope>) {
        let placements_only =
            !batch.is_empty() && batch.iter().all(|e| matches!(e, Envelope::AttemptPlaced { .. }));
        let mut work = Work::default();
        for envelope in batch {
            self.apply_envelope(envelope, &mut work).await;
        }
        if placements_only {
            // They ride in the next commit (the attempt's end, usually).
            self.effects.hosts.defer(std::mem::take(&mut work.batch.attempt_hosts));
            return;
        }
        self.effects.hosts.ride(&mut work.batch);
        work.finish(&self.step.runs);
        if self.options.shared_store {
            self.outbox(&mut work);
        }
        work.batch.owner = Some(self.holder.owner.clone());
        let transitions = work.batch.transitions.len();
        match self.commit_held(&mut work).await {
            Ok(()) => {
                self.health.wrote();
                self.effects.stats.committed(transitions);
                self.after_commit(work).await;
            }
            Err(e) => {
                self.health.failed("group commit", &e);
                self.commit_failed(work, e)
            }
        }
    }

    /// The batch is durable: the effects perform it, then what only the engine can
    /// do follows (promotions, holds, wake-ups, backfills).
    async fn after_commit(&mut self, mut work: Work) {
        self.effects.notify(&work, &self.step, self.options.tracing);
        let successes = self.successes(&work.events);
        let finished_runs = after::finished_runs(&work.events);
        for (flow, node) in work.permit_wanted.iter().chain(&work.permits_freed) {
            self.intake.pending.push_back(Envelope::PermitPoll { flow: flow.clone(), node: *node });
        }
        for run_id in std::mem::take(&mut work.after_held) {
            self.intake.pending.push_back(Envelope::NodeAfter { run_id });
        }
        for (flow, node) in &work.permits_freed {
            self.handle.wake.permit_freed(flow, *node);
        }
        let (events, replies) = (std::mem::take(&mut work.events), std::mem::take(&mut work.replies));
        let actions = std::mem::take(&mut work.actions);
        let perform = Perform { handle: &self.handle };
        let performed = self.effects.perform(&self.step, &work, actions, perform);
        // Published once the attempts' tasks are spawned: a subscriber woken first
        // (the fleet's acknowledgements) ran ahead of the next attempt's placement.
        self.effects.publish(events, replies);
        self.intake.pending.extend(performed.results);
        let mut finished_flows = Vec::new();
        for (run_id, state) in performed.finished {
            self.handle.children.ended(&run_id);
            let snap = self.step.forget_run(&run_id);
            self.effects.run_finished(&run_id, state, snap.as_ref(), self.options.tracing);
            let Some(snap) = snap else { continue };
            self.tell_holds(&run_id, state, &snap);
            if snap.flow.concurrency.max_active_runs > 0 || snap.flow.concurrency.depends_on_past {
                finished_flows.push(snap.flow.name.clone());
            }
        }
        finished_flows.sort();
        finished_flows.dedup();
        for flow in finished_flows {
            self.promote(&flow).await;
        }
        if !successes.is_empty() {
            self.wake_after(successes);
        }
        self.advance_backfills(finished_runs);
    }

    /// The commit failed: nothing of the batch happened. Drop the touched runs'
    /// snapshots, give permits back, tell callers, and resume the runs from the
    /// store shortly (in-flight results lost here are retried by recovery).
    fn commit_failed(&mut self, work: Work, e: madeira_store::StoreError) {
        error!(error = %e, "group commit failed; resuming affected runs from the store");
        let mut touched: Vec<String> = work.batch.transitions.iter().map(|t| t.run_id.clone()).collect();
        touched.extend(work.batch.attempts.iter().map(|a| a.run_id.clone()));
        touched.sort();
        touched.dedup();
        for (flow, node, run_id) in work.acquired {
            if let Some(waiter) = self.step.throttle.release(&flow, node, &run_id) {
                // It was handed the permit in a batch that never happened: put it back.
                self.step.throttle.release(&flow, node, &waiter.run_id);
                self.step.throttle.enqueue(&flow, waiter);
            }
        }
        for run_id in &touched {
            self.step.runs.remove(run_id);
        }
        if let madeira_store::StoreError::LeaseLost { runs, .. } = &e {
            self.lost(runs);
        }
        let unavailable = e.is_unavailable();
        for (reply, _, _) in work.replies {
            let message = format!("not saved: {e}");
            let e = match unavailable {
                true => madeira_store::StoreError::Unavailable(message),
                false => madeira_store::StoreError::Refused(message),
            };
            let _ = reply.send(Err(EngineError::Store(e)));
        }
        let tx = self.intake.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            for run_id in touched {
                let _ = tx.send(Envelope::Resume { run_id }).await;
            }
        });
    }

    /// Routes one envelope to the step (its run loaded or claimed first), or to
    /// the engine's own handling (permits, holds, promotions).
    async fn apply_envelope(&mut self, envelope: Envelope, work: &mut Work) {
        match envelope {
            Envelope::Start { run_id, fresh } => self.start(run_id, fresh, work).await,
            Envelope::Resume { run_id } => self.resume(run_id, work).await,
            Envelope::Adopt { run_id, from } => self.adopt(&run_id, &from, work).await,
            Envelope::Command { run_id, cmd, actor, audit, answer_to, reply } => {
                // People's actions may take an idle run from its holder; the
                // engine's own timers only act on runs this replica holds.
                let steal_idle = actor != "engine";
                let result = match self.ensure_loaded(&run_id, steal_idle).await {
                    Ok(()) => self.step.apply(&run_id, cmd.clone(), &actor, work),
                    Err(e) => Err(e),
                };
                if result.is_ok()
                    && let Some(id) = answer_to
                {
                    let answer = r#"{"ok":true}"#.to_string();
                    work.batch.answers.push(CommandAnswer { id, answer, at: now_ms() });
                    work.answered.push((id, run_id.clone()));
                }
                if result.is_ok()
                    && let Some((action, reason)) = audit
                {
                    let node = cmd.node().and_then(|i| self.step.node_name(&run_id, i));
                    work.audit(AuditRecord {
                        at: now_ms(),
                        actor: actor.clone(),
                        action,
                        run_id: Some(run_id.clone()),
                        node,
                        reason,
                        details: None,
                    });
                }
                match reply {
                    Some(reply) => work.replies.push((reply, result, run_id)),
                    None => {
                        if let Err(e) = result {
                            debug!(run_id = %run_id, error = %e, "internal command not applied");
                        }
                    }
                }
            }
            Envelope::AttemptPlaced { run_id, node, attempt, host } => {
                self.placed(&run_id, &node, attempt, host, work)
            }
            Envelope::AttemptDone { run_id, node, attempt, result } => {
                // Only the task recorded for the node is removed (a stale task's
                // end leaves its successor's entry); the task a resumed run's new
                // attempt adopted answers for that attempt.
                let key = (run_id.clone(), node);
                let ran = match self.effects.running.get(&key) {
                    Some(r) if r.task_attempt == attempt => self.effects.running.remove(&key),
                    _ => None,
                };
                let attempt = ran.as_ref().map_or(attempt, |r| r.attempt);
                if let Some(name) = self.step.node_name(&run_id, node) {
                    self.handle.live_logs().finish(&(run_id.clone(), name, attempt));
                }
                if let Err(e) = self.ensure_loaded(&run_id, false).await {
                    warn!(run_id = %run_id, error = %e, "result for a run this replica does not hold dropped");
                    return;
                }
                let host = self.done_host(ran);
                self.step.attempt_done(&run_id, node, attempt, result, host, work);
            }
            Envelope::ConfirmOverdue { run_id, node } => self.confirm_overdue(&run_id, node, work).await,
            Envelope::ExecutorsChanged => self.recheck_waiting(work).await,
            Envelope::ObservedDone { run_id, node, result, reply } => {
                let outcome = self.observed_done(&run_id, node, result, work).await;
                if let Some(reply) = reply {
                    work.replies.push((reply, outcome, run_id));
                }
            }
            Envelope::PermitPoll { flow, node } => self.poll_permits(&flow, node, work).await,
            Envelope::CheckHeld => self.check_held().await,
            Envelope::Promote { flow } => self.promote(&flow).await,
            Envelope::Held { run_id } => self.tell_held(run_id),
            Envelope::NodeAfter { run_id } => self.check_node_after(&run_id, work).await,
        }
    }
}
