//! The engine's effects: what a committed batch says is done. Owns the attempts in
//! flight (in-process tasks and sidecar ones), the timers, the placements waiting
//! for a commit and the runs' traces; starts attempts, arms timers, tells
//! observers and viewers. Nothing here changes a run's state: an attempt's end
//! comes back through the intake as `Envelope::AttemptDone`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use std::time::Duration;

use madeira_core::model::NodeAction;
use madeira_core::{Action, ExecutorDef, RunSnapshot, RunState};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, info};

use super::Step;
use super::drain::Running;
use super::hosts::{self, DeferredHosts};
use crate::clock::now_ms;
use crate::envelope::Envelope;
use crate::executor::{Executors, Job};
use crate::observer::{AttemptOutcome, EngineObserver};
use crate::record::Work;
use crate::stats::EngineStats;
use crate::timers::{Timer, TimerKind, Timers};
use crate::trace::{self, RunTrace, TraceContext};
use crate::{EngineError, EngineHandle, RunEvent};

pub(crate) struct Effects {
    pub(super) running: HashMap<(String, usize), Running>,
    /// In-process attempts (awaited, then aborted, at shutdown).
    pub(super) tasks: TaskTracker,
    /// Sidecar attempts: never awaited at shutdown (their sidecars keep them).
    pub(super) remote: TaskTracker,
    /// Nodes RUNNING when their run was resumed: their next attempt is `Job::resumed`.
    pub(super) resumed: HashSet<(String, usize)>,
    pub(super) timers: Timers,
    /// Placements waiting for the next commit (`hosts.rs`).
    pub(super) hosts: DeferredHosts,
    pub(super) traces: HashMap<String, RunTrace>,
    pub(super) executors: Arc<Executors>,
    pub(super) observers: Vec<Arc<dyn EngineObserver>>,
    pub(super) events: broadcast::Sender<Arc<RunEvent>>,
    pub(super) stats: Arc<EngineStats>,
    pub(super) throttle_view: crate::throttle::ThrottleView,
    /// Where attempts report their end (the intake's channel).
    pub(super) done: mpsc::Sender<Envelope>,
}

/// What effects are performed with.
pub(crate) struct EffectsOptions {
    pub executors: Arc<Executors>,
    pub observers: Vec<Arc<dyn EngineObserver>>,
    pub events: broadcast::Sender<Arc<RunEvent>>,
    pub stats: Arc<EngineStats>,
    pub throttle_view: crate::throttle::ThrottleView,
    pub done: mpsc::Sender<Envelope>,
}

impl Effects {
    pub fn new(o: EffectsOptions) -> Self {
        Self {
            running: HashMap::new(),
            tasks: TaskTracker::new(),
            remote: TaskTracker::new(),
            resumed: HashSet::new(),
            timers: Timers::default(),
            hosts: DeferredHosts::default(),
            traces: HashMap::new(),
            executors: o.executors,
            observers: o.observers,
            events: o.events,
            stats: o.stats,
            throttle_view: o.throttle_view,
            done: o.done,
        }
    }
}

/// What performing a batch's actions needs besides the effects.
pub(crate) struct Perform<'a> {
    pub handle: &'a EngineHandle,
}

/// What performing left to the engine.
#[derive(Default)]
pub(crate) struct Performed {
    /// Runs that ended.
    pub finished: Vec<(String, RunState)>,
    /// Results known without running anything, for the next batch.
    pub results: Vec<Envelope>,
}

impl Effects {
    /// Performs the actions of a committed batch, in order: attempts start, timers
    /// are armed, aborted attempts are cancelled; the runs that finished are
    /// returned (the engine lets them go: `Engine::after_commit`).
    pub(super) fn perform(
        &mut self,
        step: &Step,
        work: &Work,
        actions: Vec<(String, Action)>,
        p: Perform<'_>,
    ) -> Performed {
        let mut out = Performed::default();
        for (run_id, action) in actions {
            match action {
                Action::Execute { node, attempt, fallback } => {
                    if let Some(ready_at) = work.ready_at.get(&(run_id.clone(), node)) {
                        let latency = ready_at.elapsed();
                        self.stats.dispatched(latency);
                        if let Some(snap) = step.runs.get(&run_id) {
                            let name = &snap.flow.nodes[node].id;
                            self.observers.iter().for_each(|o| o.dispatched(&snap.flow.name, name, latency));
                        }
                    }
                    let Some(snap) = step.runs.get(&run_id) else { continue };
                    out.results.extend(self.execute(snap, node, attempt, fallback, step.draining, p.handle));
                }
                Action::ScheduleRetry { node, at_ms } => {
                    self.timers.at(at_ms, Timer { run_id, node, kind: TimerKind::RetryDue });
                }
                Action::AwaitConfirm { node } => {
                    if let Some(snap) = step.runs.get(&run_id) {
                        self.arm_confirm_timers(snap, node);
                    }
                }
                Action::Abort { node, .. } => {
                    if let Some(running) = self.running.remove(&(run_id, node)) {
                        running.token.cancel();
                    }
                }
                Action::RunFinished { state } => out.finished.push((run_id, state)),
                Action::Ready { .. } | Action::ReleasePermit { .. } => {}
            }
        }
        out
    }

    /// A run ended (`snap`: as the step last held it): nothing of it is kept
    /// here any more; it is logged, its span reported, observers told.
    pub(super) fn run_finished(
        &mut self,
        run_id: &str,
        state: RunState,
        snap: Option<&RunSnapshot>,
        tracing: bool,
    ) {
        self.resumed.retain(|(run, _)| run != run_id);
        let run_trace = self.traces.remove(run_id);
        let Some(snap) = snap else { return };
        let trace_id = run_trace.as_ref().map(|t| t.context.trace_id_hex()).unwrap_or_default();
        info!(run_id = %run_id, flow = %snap.flow.name, state = %state, trace_id = %trace_id, "run finished");
        if let (true, Some(t)) = (tracing, &run_trace) {
            trace::run_span(&self.observers, t, snap, now_ms());
        }
        self.observers.iter().for_each(|o| o.run_finished(snap));
    }

    /// Sends the batch's events to live viewers and answers its callers.
    pub(super) fn publish(
        &self,
        events: Vec<RunEvent>,
        replies: Vec<(crate::envelope::Reply, Result<(), EngineError>, String)>,
    ) {
        for event in events {
            let _ = self.events.send(Arc::new(event));
        }
        for (reply, result, _) in replies {
            let _ = reply.send(result);
        }
    }

    /// Starts attempt `attempt` of `node` (or, when its result is known without
    /// running anything, answers it: the caller queues that envelope).
    pub(super) fn execute(
        &mut self,
        snap: &RunSnapshot,
        node: usize,
        attempt: u32,
        fallback: bool,
        draining: bool,
        handle: &EngineHandle,
    ) -> Option<Envelope> {
        let run_id = snap.run_id.as_str();
        if snap.flow.observe {
            // Observe-only: `madeira exec` reports how the attempt ends.
            return None;
        }
        if draining {
            info!(run_id = %run_id, node = %snap.flow.nodes[node].id, "shutting down: attempt left to recovery");
            return None;
        }
        let def = &snap.flow.nodes[node];
        let executor = hosts::executor_of(def, fallback)?;
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
            return None;
        }
        let immediate =
            def.foreach.is_none().then(|| crate::executor::immediate(executor, attempt)).flatten();
        if let Some(result) = immediate {
            // Known without running anything (a noop): the result joins the next
            // batch directly, with no task and no trip through the channel.
            let running = Running {
                token: CancellationToken::new(),
                in_process: true,
                attempt,
                task_attempt: attempt,
                hosts: Vec::new(),
            };
            self.running.insert((run_id.to_string(), node), running);
            let run_id = run_id.to_string();
            self.resumed.remove(&(run_id.clone(), node));
            return Some(Envelope::AttemptDone { run_id, node, attempt, result });
        }
        let started_at = snap.nodes[node].started_at_ms.unwrap_or(0);
        let context = self.traces.get(run_id).map(|t| t.context.attempt(&def.id, attempt, started_at));
        let resumed = self.resumed.remove(&(run_id.to_string(), node));
        let job = job(snap, node, attempt, executor, context, resumed);
        let span = context.map_or_else(tracing::Span::none, |c| trace::attempt_log_span(&job, &c));
        let token = CancellationToken::new();
        let in_process = self.executors.in_process(&job.executor);
        let running =
            Running { token: token.clone(), in_process, attempt, task_attempt: attempt, hosts: Vec::new() };
        self.running.insert((run_id.to_string(), node), running);
        let executors = self.executors.clone();
        let tx = self.done.clone();
        let run_id = run_id.to_string();
        let tracker = if in_process { &self.tasks } else { &self.remote };
        let work = crate::subflow::attempt_work(handle, executors, def, fallback, job, token);
        tracker.spawn(
            async move {
                let result = work.await;
                let _ = tx.send(Envelope::AttemptDone { run_id, node, attempt, result }).await;
            }
            .instrument(span),
        );
        None
    }

    /// Tells observers (and the throttle view) what the committed batch changed.
    pub(super) fn notify(&self, work: &Work, step: &Step, tracing: bool) {
        for ((flow, node), name) in &work.throttled {
            let state = crate::throttle::ThrottleState {
                in_use: step.throttle.in_use(flow, *node),
                waiting: step.throttle.waiting_runs(flow, *node),
            };
            self.throttle_view.set(flow, name, state);
        }
        if self.observers.is_empty() {
            return;
        }
        for o in &self.observers {
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
            self.observers.iter().for_each(|o| o.attempt_finished(&outcome));
        }
        if tracing {
            trace::attempt_spans(&self.observers, &self.traces, &work.finished);
        }
        for run_id in &work.resumed {
            if let Some(snap) = step.runs.get(run_id) {
                self.observers.iter().for_each(|o| o.run_resumed(snap));
            }
        }
        for ((flow, node), name) in &work.throttled {
            let (in_use, waiting) = (step.throttle.in_use(flow, *node), step.throttle.depth(flow, *node));
            self.observers.iter().for_each(|o| o.throttle(flow, name, in_use, waiting));
        }
        for (run_id, node) in &work.overdue {
            if let Some(snap) = step.runs.get(run_id) {
                self.observers.iter().for_each(|o| o.confirm_overdue(snap, node));
            }
        }
    }

    /// Arms a manual node's `alert_after` and `fallback_after` timers.
    pub(super) fn arm_confirm_timers(&mut self, snap: &RunSnapshot, node: usize) {
        let run_id = snap.run_id.as_str();
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

/// The job attempt `attempt` of `node` runs: its input (`params`, its upstream
/// nodes' outputs, `biz_date`), idempotency key and W3C trace parent.
fn job(
    snap: &RunSnapshot,
    node: usize,
    attempt: u32,
    executor: &ExecutorDef,
    context: Option<TraceContext>,
    resumed: bool,
) -> Job {
    let def = &snap.flow.nodes[node];
    let upstream = def.needs.iter().map(|need| need.upstream);
    // `{"params", "nodes"}`, built from the values themselves (`json!` would
    // serialize each into a new value again).
    let mut input = serde_json::Map::new();
    input.insert("params".into(), snap.params.clone());
    input.insert("nodes".into(), snap.nodes_json(upstream));
    if let Some(date) = &snap.biz_date {
        input.insert("biz_date".into(), serde_json::Value::from(date.as_str()));
    }
    Job {
        run_id: snap.run_id.clone(),
        flow: snap.flow.name.clone(),
        node: def.id.clone(),
        attempt,
        idempotency_key: snap.idempotency_key(node),
        executor: executor.clone(),
        no_retry_exit_codes: def.retry.no_retry_exit_codes.clone(),
        input: serde_json::Value::Object(input),
        timeout: def.timeout,
        // The run's trace exists whether or not it is exported (SPEC §4).
        traceparent: context.map(|c| c.traceparent()),
        resumed,
    }
}
