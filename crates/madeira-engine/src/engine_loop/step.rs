//! The engine's step, its pure part: a command on a run's snapshot goes through the
//! core's `plan::apply`, and what it decides (transitions, rows, actions) is
//! recorded in the batch being built (`Work`). A node made ready is dispatched in
//! the same step when its permit and executor allow, or queued (throttle) or parked
//! (gate). No I/O: what needs the store (loading a run, a global permit) happens
//! before the step (`intake`, `starts.rs`) or after the commit (`effects`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use madeira_core::model::NodeAction;
use madeira_core::{Action, Command, FlowDef, PlanCtx, RunSnapshot};
use madeira_store::{AttemptRecord, LogRecord, PermitKey};
use tracing::{debug, info};

use super::hosts::executor_of;
use crate::EngineError;
use crate::clock::Clock;
use crate::executor::{AttemptResult, Executors, tail};
use crate::gate::Gate;
use crate::observer::EngineObserver;
use crate::record::Work;
use crate::throttle::{Throttle, Waiter};
use crate::trace::FinishedAttempt;

/// Logs are kept to their last 64 KiB per attempt.
const LOG_TAIL_BYTES: usize = 64 * 1024;

/// The runs this engine drives, with what planning reads and changes besides
/// their snapshots: node permits (throttle) and nodes parked for their executor
/// (gate).
pub(crate) struct Step {
    pub(super) runs: HashMap<String, RunSnapshot>,
    pub(super) throttle: Throttle,
    pub(super) gate: Gate,
    /// Shutting down: a ready node stays INIT (the next start's recovery dispatches it).
    pub(super) draining: bool,
    executors: Arc<Executors>,
    observers: Vec<Arc<dyn EngineObserver>>,
    /// This replica's name (the host of its in-process attempts).
    owner: String,
    /// Permits are counted in the store across replicas (`permits.rs`).
    shared_store: bool,
    max_output_bytes: usize,
    /// Wall time, instants and jitter: the step's only view of the outside world.
    clock: Arc<dyn Clock>,
}

/// What a step reads besides its state.
pub(crate) struct StepOptions {
    pub executors: Arc<Executors>,
    pub observers: Vec<Arc<dyn EngineObserver>>,
    pub waiting: crate::gate::WaitingNodes,
    pub owner: String,
    pub shared_store: bool,
    pub max_output_bytes: usize,
    pub clock: Arc<dyn Clock>,
}

impl Step {
    pub fn new(o: StepOptions) -> Self {
        Self {
            runs: HashMap::new(),
            throttle: Throttle::default(),
            gate: Gate::new(o.waiting),
            draining: false,
            executors: o.executors,
            observers: o.observers,
            owner: o.owner,
            shared_store: o.shared_store,
            max_output_bytes: o.max_output_bytes,
            clock: o.clock,
        }
    }

    /// A run ended: the step lets it go (its snapshot, its parked nodes).
    pub(super) fn forget_run(&mut self, run_id: &str) -> Option<RunSnapshot> {
        self.gate.forget_run(run_id);
        self.runs.remove(run_id)
    }

    pub(super) fn node_name(&self, run_id: &str, node: usize) -> Option<String> {
        self.runs.get(run_id).and_then(|s| s.flow.nodes.get(node)).map(|n| n.id.clone())
    }

    /// Applies one command to a loaded run and follows its `Ready` and permit
    /// actions within the same batch.
    pub(super) fn apply(
        &mut self,
        run_id: &str,
        cmd: Command,
        actor: &str,
        work: &mut Work,
    ) -> Result<(), EngineError> {
        let Some(snap) = self.runs.get_mut(run_id) else {
            return Err(EngineError::RunNotFound(run_id.to_string()));
        };
        let now = self.clock.now_ms();
        let ctx = PlanCtx { now_ms: now, jitter_unit: self.clock.jitter_unit() };
        let plan = madeira_core::plan::apply(snap, &cmd, &ctx)
            .map_err(|refusal| EngineError::Refused { run: run_id.to_string(), refusal })?;
        work.record(snap, &plan, actor, now);
        let flow = snap.flow.clone();
        for action in plan.actions {
            match action {
                Action::Ready { node } => self.on_ready(run_id, node, self.clock.instant(), work),
                Action::ReleasePermit { node } => {
                    if flow.nodes[node].throttle.is_some() && self.shared_store {
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

    /// `node` of `run_id` may start: dispatched now, or queued for its permit, or
    /// parked until its executor can take it (a draining step leaves it INIT).
    pub(super) fn on_ready(&mut self, run_id: &str, node: usize, ready_at: Instant, work: &mut Work) {
        if self.draining || self.hold_for_after(run_id, node, ready_at, work) {
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
            if self.shared_store {
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
    pub(super) fn release_permit(
        &mut self,
        flow: &str,
        node: usize,
        run_id: &str,
        name: &str,
        work: &mut Work,
    ) {
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

    /// An attempt ended: its outputs are checked (text, size), its log's tail and
    /// its record join the batch, and its result is applied as a command.
    pub(super) fn attempt_done(
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
        let started_at = snap.nodes[node].started_at_ms.unwrap_or_else(|| self.clock.now_ms());
        let max = self.max_output_bytes;
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
        let finished_at = self.clock.now_ms();
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

    /// Why `node` cannot be dispatched now; observe-only flows never wait.
    pub(super) fn waiting_reason(&self, flow: &FlowDef, node: usize) -> Option<String> {
        if flow.observe {
            return None;
        }
        match &flow.nodes[node].action {
            NodeAction::Run(executor) => self.executors.waiting_reason(executor),
            NodeAction::Manual(_) => None,
        }
    }

    /// `node` waits in INIT for its executor (`reason`); observers learn it once.
    pub(super) fn park(&mut self, run_id: &str, node: usize, ready_at: Instant, reason: String) {
        let Some(snap) = self.runs.get(run_id) else {
            return;
        };
        let (flow, name) = (snap.flow.name.clone(), snap.flow.nodes[node].id.clone());
        if self.gate.park(run_id, node, &name, ready_at, reason.clone()) {
            info!(run_id = %run_id, flow = %flow, node = %name, reason = %reason, "node waits in INIT");
            self.observers.iter().for_each(|o| o.node_waiting(run_id, &flow, &name, Some(&reason)));
        }
    }

    /// A throttled node became ready: queue it; the permit is asked for after the commit.
    pub(super) fn wait_for_global_permit(&mut self, flow: &str, waiter: Waiter, name: &str, work: &mut Work) {
        let node = waiter.node;
        self.throttle.enqueue(flow, waiter);
        work.permit_wanted.insert((flow.to_string(), node));
        work.throttled.insert((flow.to_string(), node), name.to_string());
    }

    /// Gives `run_id`'s permit of `node` back with this batch.
    pub(super) fn release_global_permit(
        &mut self,
        run_id: &str,
        flow: &str,
        node: usize,
        name: &str,
        work: &mut Work,
    ) {
        work.batch.permit_releases.push(PermitKey {
            flow: flow.into(),
            node: name.into(),
            run_id: run_id.into(),
        });
        self.throttle.dropped(flow, node, run_id);
        work.permits_freed.insert((flow.to_string(), node));
        work.throttled.insert((flow.to_string(), node), name.to_string());
    }

    /// The host known when an attempt of `node` starts: this replica for an
    /// in-process executor, the exec report's host for an observe-only flow, none
    /// yet for a sidecar attempt (the fleet names it once placed).
    pub(super) fn start_host(&self, snap: &RunSnapshot, node: usize, fallback: bool) -> Option<String> {
        if snap.flow.observe {
            return snap.params.get("host").and_then(|h| h.as_str()).map(str::to_string);
        }
        let executor = executor_of(&snap.flow.nodes[node], fallback)?;
        self.executors.in_process(executor).then(|| self.owner.clone())
    }
}

#[cfg(test)]
mod tests;
