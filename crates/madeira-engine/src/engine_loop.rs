//! The engine loop: drain a batch of envelopes, plan each with the core planner,
//! group-commit, then act. Single writer of run state for this process.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use madeira_core::{Action, Command, PlanCtx, RunSnapshot};
use madeira_store::{AttemptRecord, AuditRecord, CommandAnswer, LogRecord, Store};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, error, info, warn};

mod after;
mod drain;
mod fence;
mod hosts;
mod manual;
mod node_after;
mod waiting;

use crate::envelope::Envelope;
use crate::executor::{AttemptResult, Executors, Job};
use crate::gate::Gate;
use crate::lease::Holder;
use crate::observer::{AttemptOutcome, EngineObserver};
use crate::record::{FinishedAttempt, Work};
use crate::stats::EngineStats;
use crate::throttle::{Throttle, Waiter};
use crate::timers::{Timer, TimerKind, Timers};
use crate::trace::{self, RunTrace};
use crate::{EngineError, EngineOptions, FlowCache, RunEvent, clock::now_ms, retention};

mod handover;
mod outbox;
mod ownership;
mod permits;
mod starts;
mod watch;

pub(crate) use starts::Fresh;

/// Logs are kept to their last 64 KiB per attempt.
const LOG_TAIL_BYTES: usize = 64 * 1024;

pub(crate) struct Parts {
    /// This engine's own handle (the inbox of forwarded actions acts through it).
    pub handle: crate::EngineHandle,
    /// Taken by `run` to start the Redis publisher.
    pub publisher: Option<crate::wake::Publisher>,
    /// Taken by `run` to start the group-committing run creator.
    pub creator: Option<mpsc::Receiver<crate::creator::CreateRequest>>,
    pub store: Arc<dyn Store>,
    pub executors: Arc<Executors>,
    pub observers: Vec<Arc<dyn EngineObserver>>,
    pub throttle_view: crate::throttle::ThrottleView,
    pub options: EngineOptions,
    pub rx: mpsc::Receiver<Envelope>,
    pub tx: mpsc::Sender<Envelope>,
    pub flows: FlowCache,
    pub events: broadcast::Sender<Arc<RunEvent>>,
    pub stats: Arc<EngineStats>,
    pub waiting: crate::gate::WaitingNodes,
    pub health: Arc<crate::health::StoreHealth>,
}

pub struct Engine {
    p: Parts,
    runs: HashMap<String, RunSnapshot>,
    traces: HashMap<String, RunTrace>,
    throttle: Throttle,
    timers: Timers,
    running: HashMap<(String, usize), drain::Running>,
    pending: VecDeque<Envelope>,
    tasks: TaskTracker,
    /// Sidecar attempts: never awaited at shutdown (their sidecars keep them).
    remote: TaskTracker,
    /// Shutting down: no new attempts, no timers; results are still committed.
    draining: bool,
    /// Nodes RUNNING when their run was resumed: their next attempt is `Job::resumed`.
    resumed: std::collections::HashSet<(String, usize)>,
    gate: Gate,
    holder: Holder,
    watch: watch::Watch,
    /// Placements waiting for the next commit (`hosts.rs`).
    hosts: hosts::DeferredHosts,
    /// `depends_on_past` runs held by a FAILED previous date already alerted.
    past_alerted: std::collections::HashSet<String>,
}

impl Engine {
    pub(crate) fn new(p: Parts) -> Self {
        let gate = Gate::new(p.waiting.clone());
        let holder = Holder { owner: p.options.replica_id.clone(), lease: p.options.lease };
        Self {
            holder,
            p,
            runs: HashMap::new(),
            past_alerted: Default::default(),
            traces: HashMap::new(),
            throttle: Throttle::default(),
            timers: Timers::default(),
            running: HashMap::new(),
            pending: VecDeque::new(),
            tasks: TaskTracker::new(),
            remote: TaskTracker::new(),
            draining: false,
            resumed: Default::default(),
            gate,
            watch: Default::default(),
            hosts: Default::default(),
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
        let retention = retention::spawn(self.p.store.clone(), self.p.options.clone(), cancel.clone());
        if let Some(rx) = self.p.creator.take() {
            let creator = crate::creator::run(
                self.p.store.clone(),
                self.p.health.clone(),
                rx,
                self.p.tx.clone(),
                self.holder.clone(),
                cancel.clone(),
            );
            self.tasks.spawn(creator);
        }
        let missed = crate::missed::spawn(
            self.p.store.clone(),
            self.p.flows.clone(),
            self.p.observers.clone(),
            cancel.clone(),
        );
        let leases =
            crate::lease::spawn(self.p.store.clone(), self.holder.clone(), self.p.tx.clone(), cancel.clone());
        let probe = self.p.health.clone().spawn_probe(self.p.store.clone(), cancel.clone());
        let after_policy = crate::after_policy::spawn(self.p.handle.clone(), cancel.clone());
        let inbox = self.p.handle.spawn_inbox(self.p.options.inbox_poll, cancel.clone());
        let mut helpers = vec![leases, probe, after_policy, inbox];
        if let Some(publisher) = self.p.publisher.take() {
            let wake = self.p.handle.wake.clone();
            helpers.extend(wake.spawn(&self.holder.owner, publisher, self.p.tx.clone(), cancel.clone()));
        }
        let mut sweep = tokio::time::interval(self.p.options.sweep_every);
        sweep.tick().await;
        let mut permit_poll = tokio::time::interval(self.p.options.inbox_poll);
        let mut offer = tokio::time::interval(handover::OFFER_EVERY);
        let mut watch = tokio::time::interval(watch::WATCH_EVERY);
        loop {
            if cancel.is_cancelled() {
                break;
            }
            if drain.is_cancelled() {
                self.start_drain();
            }
            self.watch_if_due();
            let mut batch = Vec::new();
            while batch.len() < self.p.options.batch_max {
                match self.pending.pop_front() {
                    Some(envelope) => batch.push(envelope),
                    None => break,
                }
            }
            if batch.is_empty() {
                let live = !self.draining;
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = drain.cancelled(), if live => continue,
                    envelope = self.p.rx.recv() => match envelope {
                        Some(envelope) => batch.push(envelope),
                        None => break,
                    },
                    timer = self.timers.next(), if live => batch.push(timer_envelope(timer)),
                    _ = hosts::until(self.hosts.due), if self.hosts.due.is_some() => {}
                    _ = watch.tick(), if live => continue,
                    _ = sweep.tick(), if live => {
                        self.reconcile().await;
                        continue;
                    }
                    _ = self.p.health.came_up.notified() => {
                        self.reconcile().await;
                        continue;
                    }
                    _ = offer.tick(), if live && self.p.options.shared_store && self.gate.has_parked() => {
                        self.offer_waiting().await;
                        continue;
                    }
                    _ = permit_poll.tick(), if live && self.p.options.shared_store => {
                        for (flow, node) in self.throttle.waiting_keys() {
                            self.pending.push_back(Envelope::PermitPoll { flow, node });
                        }
                        continue;
                    }
                }
            }
            while batch.len() < self.p.options.batch_max {
                match self.p.rx.try_recv() {
                    Ok(envelope) => batch.push(envelope),
                    Err(_) => break,
                }
            }
            self.process(batch).await;
        }
        self.stop().await;
        let _ = retention.await;
        let _ = missed.await;
        for helper in helpers {
            let _ = helper.await;
        }
        info!("engine stopped");
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
            self.hosts.defer(std::mem::take(&mut work.batch.attempt_hosts));
            return;
        }
        self.hosts.ride(&mut work.batch);
        work.finish(&self.runs);
        if self.p.options.shared_store {
            self.outbox(&mut work);
        }
        work.batch.owner = Some(self.holder.owner.clone());
        let transitions = work.batch.transitions.len();
        match self.commit_held(&mut work).await {
            Ok(()) => {
                self.p.health.wrote();
                self.p.stats.committed(transitions);
                self.after_commit(work).await;
            }
            Err(e) => {
                self.p.health.failed("group commit", &e);
                self.commit_failed(work, e)
            }
        }
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
            if let Some(waiter) = self.throttle.release(&flow, node, &run_id) {
                // It was handed the permit in a batch that never happened: put it back.
                self.throttle.release(&flow, node, &waiter.run_id);
                self.throttle.enqueue(&flow, waiter);
            }
        }
        for run_id in &touched {
            self.runs.remove(run_id);
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
        let tx = self.p.tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            for run_id in touched {
                let _ = tx.send(Envelope::Resume { run_id }).await;
            }
        });
    }

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
                    Ok(()) => self.apply(&run_id, cmd.clone(), &actor, work),
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
                    let node = cmd.node().and_then(|i| self.node_name(&run_id, i));
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
                let ran = match self.running.get(&key) {
                    Some(r) if r.task_attempt == attempt => self.running.remove(&key),
                    _ => None,
                };
                let attempt = ran.as_ref().map_or(attempt, |r| r.attempt);
                if let Some(name) = self.node_name(&run_id, node) {
                    self.p.handle.live_logs().finish(&(run_id.clone(), name, attempt));
                }
                if let Err(e) = self.ensure_loaded(&run_id, false).await {
                    warn!(run_id = %run_id, error = %e, "result for a run this replica does not hold dropped");
                    return;
                }
                let host = self.done_host(ran);
                self.attempt_done(&run_id, node, attempt, result, host, work);
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

    fn node_name(&self, run_id: &str, node: usize) -> Option<String> {
        self.runs.get(run_id).and_then(|s| s.flow.nodes.get(node)).map(|n| n.id.clone())
    }

    /// Applies one command to a loaded run and follows its `Ready` and permit
    /// actions within the same batch.
    fn apply(&mut self, run_id: &str, cmd: Command, actor: &str, work: &mut Work) -> Result<(), EngineError> {
        let Some(snap) = self.runs.get_mut(run_id) else {
            return Err(EngineError::RunNotFound(run_id.to_string()));
        };
        let now = now_ms();
        let ctx = PlanCtx { now_ms: now, jitter_unit: rand::random::<f64>() };
        let plan = madeira_core::plan::apply(snap, &cmd, &ctx)
            .map_err(|refusal| EngineError::Refused { run: run_id.to_string(), refusal })?;
        work.record(snap, &plan, actor, now);
        let flow = snap.flow.clone();
        for action in plan.actions {
            match action {
                Action::Ready { node } => self.on_ready(run_id, node, Instant::now(), work),
                Action::ReleasePermit { node } => {
                    if flow.nodes[node].throttle.is_some() && self.p.options.shared_store {
                        self.release_global_permit(run_id, &flow.name, node, &flow.nodes[node].id, work);
                    } else if flow.nodes[node].throttle.is_some() {
                        self.release_permit(&flow.name, node, run_id, &flow.nodes[node].id, work);
                    }
                }
                Action::Execute { node, attempt, fallback } => {
                    if let Some(snap) = self.runs.get(run_id) {
                        let host = self.start_host(snap, node, fallback);
                        work.attempt_started(snap, node, attempt, now, host);
                    }
                    work.actions.push((run_id.to_string(), action));
                }
                other => work.actions.push((run_id.to_string(), other)),
            }
        }
        Ok(())
    }

    fn on_ready(&mut self, run_id: &str, node: usize, ready_at: Instant, work: &mut Work) {
        if self.draining || self.hold_for_after(run_id, node, ready_at) {
            // Stays INIT: the next start's recovery dispatches it (or its `after` is met).
            return;
        }
        let Some(snap) = self.runs.get(run_id) else {
            return;
        };
        let flow = snap.flow.clone();
        if let Some(reason) = self.waiting_reason(&flow, node) {
            self.park(run_id, node, ready_at, reason);
            return;
        }
        if let Some(throttle) = flow.nodes[node].throttle {
            if self.p.options.shared_store {
                let waiter = Waiter { run_id: run_id.to_string(), node, ready_at };
                return self.wait_for_global_permit(&flow.name, waiter, &flow.nodes[node].id, work);
            }
            if !self.throttle.try_acquire(&flow.name, node, run_id, throttle.max_permits) {
                let waiter = Waiter { run_id: run_id.to_string(), node, ready_at };
                self.throttle.enqueue(&flow.name, waiter);
                work.throttled.insert((flow.name.clone(), node), flow.nodes[node].id.clone());
                return;
            }
            work.acquired.push((flow.name.clone(), node, run_id.to_string()));
            work.throttled.insert((flow.name.clone(), node), flow.nodes[node].id.clone());
        }
        work.ready_at.insert((run_id.to_string(), node), ready_at);
        if let Err(e) = self.apply(run_id, Command::Dispatch { node }, "engine", work) {
            debug!(run_id = %run_id, error = %e, "dispatch not applied");
            if flow.nodes[node].throttle.is_some() {
                self.release_permit(&flow.name, node, run_id, &flow.nodes[node].id, work);
            }
        }
    }

    /// `run_id` gives its permit back, which goes straight to the next waiter that
    /// still wants it.
    fn release_permit(&mut self, flow: &str, node: usize, run_id: &str, name: &str, work: &mut Work) {
        work.throttled.insert((flow.to_string(), node), name.to_string());
        let mut holder = run_id.to_string();
        while let Some(waiter) = self.throttle.release(flow, node, &holder) {
            work.ready_at.insert((waiter.run_id.clone(), node), waiter.ready_at);
            if self.apply(&waiter.run_id, Command::Dispatch { node }, "engine", work).is_ok() {
                return;
            }
            holder = waiter.run_id;
        }
    }

    fn attempt_done(
        &mut self,
        run_id: &str,
        node: usize,
        attempt: u32,
        result: AttemptResult,
        host: Option<String>,
        work: &mut Work,
    ) {
        let Some(snap) = self.runs.get(run_id) else {
            return;
        };
        let name = snap.flow.nodes[node].id.clone();
        let started_at = snap.nodes[node].started_at_ms.unwrap_or_else(now_ms);
        let max = self.p.options.max_output_bytes;
        let result = match result {
            AttemptResult::Success { outputs, log } => {
                let size = serde_json::to_string(&outputs).map_or(usize::MAX, |s| s.len());
                if let Err(error) = madeira_core::text::check_map("outputs", &outputs) {
                    AttemptResult::Failure { error, retryable: false, log }
                } else if size > max {
                    AttemptResult::Failure {
                        error: format!(
                            "outputs are {size} bytes, more than the {max} allowed; write large data \
                             elsewhere and output a reference to it"
                        ),
                        retryable: false,
                        log,
                    }
                } else {
                    AttemptResult::Success { outputs, log }
                }
            }
            failure => failure,
        };
        // Logs and error texts are kept, NUL shown as U+FFFD (the store cannot keep NUL).
        let result = match result {
            AttemptResult::Failure { error, retryable, log } => {
                AttemptResult::Failure { error: error.replace('\0', "\u{FFFD}"), retryable, log }
            }
            success => success,
        };
        let (outcome, error, cmd) = match &result {
            AttemptResult::Success { outputs, .. } => {
                ("SUCCESS", None, Command::AttemptSucceeded { node, attempt, outputs: outputs.clone() })
            }
            AttemptResult::Failure { error, retryable, .. } => (
                if *retryable { "RETRYABLE" } else { "FAILED" },
                Some(error.clone()),
                Command::AttemptFailed { node, attempt, error: error.clone(), retryable: *retryable },
            ),
        };
        // An attempt that printed nothing has no log row (the store answers its log
        // as empty).
        let log = (!result.log().is_empty()).then(|| LogRecord {
            run_id: run_id.to_string(),
            node: name.clone(),
            attempt,
            content: tail(result.log(), LOG_TAIL_BYTES).replace('\0', "\u{FFFD}"),
        });
        let finished_at = now_ms();
        work.finished.push(FinishedAttempt {
            run_id: run_id.to_string(),
            flow: snap.flow.name.clone(),
            node: name.clone(),
            attempt,
            outcome,
            error: error.clone(),
            duration: Duration::from_millis(u64::try_from(finished_at - started_at).unwrap_or(0)),
            started_at_ms: started_at,
            finished_at_ms: finished_at,
        });
        work.attempt_finished(
            AttemptRecord {
                run_id: run_id.to_string(),
                node: name,
                attempt,
                started_at,
                finished_at: Some(finished_at),
                outcome: Some(outcome.to_string()),
                error,
                host,
            },
            log,
        );
        if let Err(e) = self.apply(run_id, cmd, "engine", work) {
            debug!(run_id = %run_id, error = %e, "attempt result not applied");
        }
    }

    async fn after_commit(&mut self, work: Work) {
        self.notify_observers(&work);
        let successes = self.successes(&work.events);
        let finished_runs = after::finished_runs(&work.events);
        for (flow, node) in work.permit_wanted.iter().chain(&work.permits_freed) {
            self.pending.push_back(Envelope::PermitPoll { flow: flow.clone(), node: *node });
        }
        for (flow, node) in &work.permits_freed {
            self.p.handle.wake.permit_freed(flow, *node);
        }
        for event in work.events {
            let _ = self.p.events.send(Arc::new(event));
        }
        for (reply, result, _) in work.replies {
            let _ = reply.send(result);
        }
        let mut finished_flows = Vec::new();
        for (run_id, action) in work.actions {
            match action {
                Action::Execute { node, attempt, fallback } => {
                    if let Some(ready_at) = work.ready_at.get(&(run_id.clone(), node)) {
                        let latency = ready_at.elapsed();
                        self.p.stats.dispatched(latency);
                        if let Some(snap) = self.runs.get(&run_id) {
                            let name = &snap.flow.nodes[node].id;
                            self.p
                                .observers
                                .iter()
                                .for_each(|o| o.dispatched(&snap.flow.name, name, latency));
                        }
                    }
                    self.execute(&run_id, node, attempt, fallback);
                }
                Action::ScheduleRetry { node, at_ms } => {
                    self.timers.at(at_ms, Timer { run_id, node, kind: TimerKind::RetryDue });
                }
                Action::AwaitConfirm { node } => self.arm_confirm_timers(&run_id, node),
                Action::Abort { node, .. } => {
                    if let Some(running) = self.running.remove(&(run_id, node)) {
                        running.token.cancel();
                    }
                }
                Action::RunFinished { state } => {
                    self.p.handle.children.ended(&run_id);
                    self.resumed.retain(|(run, _)| *run != run_id);
                    let run_trace = self.traces.remove(&run_id);
                    self.gate.forget_run(&run_id);
                    if let Some(snap) = self.runs.remove(&run_id) {
                        let trace_id =
                            run_trace.as_ref().map(|t| t.context.trace_id_hex()).unwrap_or_default();
                        info!(run_id = %run_id, flow = %snap.flow.name, state = %state, trace_id = %trace_id, "run finished");
                        if let (true, Some(t)) = (self.p.options.tracing, &run_trace) {
                            trace::run_span(&self.p.observers, t, &snap, now_ms());
                        }
                        self.p.observers.iter().for_each(|o| o.run_finished(&snap));
                        self.tell_holds(&run_id, state, &snap);
                        if snap.flow.concurrency.max_active_runs > 0 || snap.flow.concurrency.depends_on_past
                        {
                            finished_flows
                                .push((snap.flow.name.clone(), snap.flow.concurrency.max_active_runs));
                        }
                    }
                }
                Action::Ready { .. } | Action::ReleasePermit { .. } => {}
            }
        }
        finished_flows.sort();
        finished_flows.dedup();
        for (flow, _) in finished_flows {
            self.promote(&flow).await;
        }
        if !successes.is_empty() {
            self.wake_after(successes).await;
        }
        self.advance_backfills(finished_runs);
    }

    fn notify_observers(&self, work: &Work) {
        for ((flow, node), name) in &work.throttled {
            let state = crate::throttle::ThrottleState {
                in_use: self.throttle.in_use(flow, *node),
                waiting: self.throttle.waiting_runs(flow, *node),
            };
            self.p.throttle_view.set(flow, name, state);
        }
        if self.p.observers.is_empty() {
            return;
        }
        for o in &self.p.observers {
            o.transitions(&work.events);
        }
        for f in &work.finished {
            let outcome = AttemptOutcome {
                run_id: &f.run_id,
                flow: &f.flow,
                node: &f.node,
                attempt: f.attempt,
                outcome: f.outcome,
                error: f.error.as_deref(),
                duration: f.duration,
            };
            self.p.observers.iter().for_each(|o| o.attempt_finished(&outcome));
        }
        if self.p.options.tracing {
            trace::attempt_spans(&self.p.observers, &self.traces, &work.finished);
        }
        for run_id in &work.resumed {
            if let Some(snap) = self.runs.get(run_id) {
                self.p.observers.iter().for_each(|o| o.run_resumed(snap));
            }
        }
        for ((flow, node), name) in &work.throttled {
            let (in_use, waiting) = (self.throttle.in_use(flow, *node), self.throttle.depth(flow, *node));
            self.p.observers.iter().for_each(|o| o.throttle(flow, name, in_use, waiting));
        }
        for (run_id, node) in &work.overdue {
            if let Some(snap) = self.runs.get(run_id) {
                self.p.observers.iter().for_each(|o| o.confirm_overdue(snap, node));
            }
        }
    }

    fn execute(&mut self, run_id: &str, node: usize, attempt: u32, fallback: bool) {
        let Some(snap) = self.runs.get(run_id) else {
            return;
        };
        if snap.flow.observe {
            // Observe-only: `madeira exec` reports how the attempt ends.
            return;
        }
        if self.draining {
            info!(run_id = %run_id, node = %snap.flow.nodes[node].id, "shutting down: attempt left to recovery");
            return;
        }
        let def = &snap.flow.nodes[node];
        let Some(executor) = hosts::executor_of(def, fallback) else {
            return;
        };
        if let Some(running) = self.running.get_mut(&(run_id.to_string(), node))
            && !running.token.is_cancelled()
            && !fallback
        {
            // The run was resumed (a commit failed) while its attempt still runs
            // here: the same job under the same idempotency key. Its task answers
            // for the new attempt instead of the job being placed again.
            info!(run_id = %run_id, node = %def.id, attempt, "the resumed attempt is still running here; awaiting its result instead of placing it again");
            running.attempt = attempt;
            self.resumed.remove(&(run_id.to_string(), node));
            return;
        }
        let immediate =
            def.foreach.is_none().then(|| crate::executor::immediate(executor, attempt)).flatten();
        if let Some(result) = immediate {
            // Known without running anything (a noop): the result joins the next
            // batch directly, with no task and no trip through the channel.
            let running = drain::Running {
                token: CancellationToken::new(),
                in_process: true,
                attempt,
                task_attempt: attempt,
                hosts: Vec::new(),
            };
            self.running.insert((run_id.to_string(), node), running);
            let run_id = run_id.to_string();
            self.resumed.remove(&(run_id.clone(), node));
            self.pending.push_back(Envelope::AttemptDone { run_id, node, attempt, result });
            return;
        }
        let upstream = def.needs.iter().map(|need| need.upstream);
        // `{"params", "nodes"}`, built from the values themselves (`json!` would
        // serialize each into a new value again).
        let mut input = serde_json::Map::new();
        input.insert("params".into(), snap.params.clone());
        input.insert("nodes".into(), snap.nodes_json(upstream));
        if let Some(date) = &snap.biz_date {
            input.insert("biz_date".into(), serde_json::Value::from(date.as_str()));
        }
        let input = serde_json::Value::Object(input);
        let started_at = snap.nodes[node].started_at_ms.unwrap_or(0);
        let context = self.traces.get(run_id).map(|t| t.context.attempt(&def.id, attempt, started_at));
        let job = Job {
            run_id: run_id.to_string(),
            flow: snap.flow.name.clone(),
            node: def.id.clone(),
            attempt,
            idempotency_key: snap.idempotency_key(node),
            executor: executor.clone(),
            no_retry_exit_codes: def.retry.no_retry_exit_codes.clone(),
            input,
            timeout: def.timeout,
            // The run's trace exists whether or not it is exported (SPEC §4).
            traceparent: context.map(|c| c.traceparent()),
            resumed: self.resumed.remove(&(run_id.to_string(), node)),
        };
        let span = context.map_or_else(tracing::Span::none, |c| trace::attempt_log_span(&job, &c));
        let token = CancellationToken::new();
        let in_process = self.p.executors.in_process(&job.executor);
        let running = drain::Running {
            token: token.clone(),
            in_process,
            attempt,
            task_attempt: attempt,
            hosts: Vec::new(),
        };
        self.running.insert((run_id.to_string(), node), running);
        let executors = self.p.executors.clone();
        let tx = self.p.tx.clone();
        let run_id = run_id.to_string();
        let tracker = if in_process { &self.tasks } else { &self.remote };
        let work = crate::subflow::attempt_work(&self.p.handle, executors, def, fallback, job, token);
        tracker.spawn(
            async move {
                let result = work.await;
                let _ = tx.send(Envelope::AttemptDone { run_id, node, attempt, result }).await;
            }
            .instrument(span),
        );
    }
}

fn timer_envelope(timer: Timer) -> Envelope {
    let Timer { run_id, node, kind } = timer;
    let cmd = match kind {
        TimerKind::RetryDue => Command::RetryDue { node },
        TimerKind::ConfirmFallback => Command::Fallback { node },
        TimerKind::ConfirmOverdue => return Envelope::ConfirmOverdue { run_id, node },
    };
    let audit = matches!(cmd, Command::Fallback { .. })
        .then(|| ("fallback".to_string(), Some("fallback_after elapsed without an answer".to_string())));
    Envelope::Command { run_id, cmd, actor: "engine".into(), audit, answer_to: None, reply: None }
}

/// The last `max` bytes of `text`, cut at a character boundary.
pub(crate) fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
