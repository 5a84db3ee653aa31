//! The planner proper: one handler per command, and the cascade that evaluates
//! downstream nodes (strong/weak/conditional rules) after every change.

use std::collections::VecDeque;

use crate::model::{DepKind, ExecutorDef, FallbackThen, NodeAction};
use crate::plan::{Action, Command, NodeChange, Plan, PlanCtx, RunChange, RunSnapshot};
use crate::state::{Cause, NodeState, RunCause, RunState};

pub(super) struct Planner<'a> {
    pub snap: &'a mut RunSnapshot,
    pub ctx: &'a PlanCtx,
    pub plan: Plan,
}

/// How a node whose needs are all terminal proceeds.
enum Readiness {
    Wait,
    Skip(Cause),
    ConditionError(String),
    AwaitConfirm,
    Ready,
}

impl Planner<'_> {
    pub fn run_command(&mut self, cmd: &Command) {
        match cmd {
            Command::Start => self.start(),
            Command::Dispatch { node } => self.dispatch(*node),
            Command::AttemptSucceeded { node, outputs, .. } if self.fallback_skips(*node) => {
                self.fallback_skip(*node, outputs.clone())
            }
            Command::AttemptSucceeded { node, outputs, .. } => {
                self.succeed(*node, Cause::Succeeded, outputs.clone())
            }
            Command::AttemptFailed { node, error, retryable, .. } => {
                self.attempt_failed(*node, error, *retryable)
            }
            Command::RetryDue { node } => {
                self.transition(*node, Cause::RetryDue, None);
                self.evaluate_from([*node]);
            }
            Command::Confirm { node } => self.succeed(*node, Cause::Confirmed, Default::default()),
            Command::Reject { node } => {
                self.transition(*node, Cause::Rejected, Some("rejected by operator".into()));
                self.evaluate_downstream(*node);
            }
            Command::Fallback { node } => self.start_attempt(*node, Cause::FallbackStarted, true),
            Command::Rerun { node, downstream } => self.rerun(*node, *downstream),
            Command::MarkSuccess { node } => self.mark_success(*node),
            Command::Skip { node } => {
                self.transition(*node, Cause::OperatorSkip, Some("skipped by operator".into()));
                self.evaluate_downstream(*node);
            }
            Command::Cancel => self.cancel(),
            Command::AfterExpired => self.after_expired(),
            Command::NodeAfterExpired { node, skip } => {
                let (cause, then) =
                    if *skip { (Cause::AfterSkipped, "skip") } else { (Cause::AfterExpired, "fail") };
                let reason =
                    format!("after_policy: {then}; the node's upstream was not SUCCESS within `wait`");
                self.transition(*node, cause, Some(reason));
                self.evaluate_downstream(*node);
            }
            Command::Recover => self.recover(),
        }
    }

    /// Records a node transition checked against the table. Callers only ask for
    /// transitions that `precheck` or the cascade rules proved valid; anything else
    /// is skipped (never written) so the table is never bypassed.
    fn transition(&mut self, node: usize, cause: Cause, reason: Option<String>) -> bool {
        let n = &mut self.snap.nodes[node];
        let Ok(to) = n.state.apply(cause) else {
            debug_assert!(false, "planner asked for {} from {}", cause, n.state);
            return false;
        };
        if to.is_terminal() {
            n.finished_at_ms = Some(self.ctx.now_ms);
        }
        let from = n.state;
        n.state = to;
        n.reason = reason.clone();
        if from == NodeState::Running {
            self.plan.actions.push(Action::ReleasePermit { node });
        }
        self.plan.nodes.push(NodeChange { node, from, to, cause, attempt: n.attempt, reason });
        true
    }

    fn run_transition(&mut self, cause: RunCause) {
        let from = self.snap.state;
        let Ok(to) = from.apply(cause) else {
            debug_assert!(false, "planner asked for run {cause} from {from}");
            return;
        };
        self.snap.state = to;
        self.plan.runs.push(RunChange { from, to, cause });
        if to.is_terminal() {
            self.plan.actions.push(Action::RunFinished { state: to });
        }
    }

    fn start(&mut self) {
        self.run_transition(RunCause::Started);
        let topo = self.snap.flow.topo.clone();
        self.evaluate_from(topo);
    }

    fn dispatch(&mut self, node: usize) {
        self.start_attempt(node, Cause::Dispatch, false);
    }

    fn start_attempt(&mut self, node: usize, cause: Cause, fallback: bool) {
        let reads: Vec<(usize, u32)> = self.snap.flow.nodes[node]
            .needs
            .iter()
            .map(|need| (need.upstream, self.snap.nodes[need.upstream].data_version))
            .collect();
        let n = &mut self.snap.nodes[node];
        n.attempt += 1;
        n.reads = reads;
        n.stale = false;
        n.fallback = fallback;
        n.next_attempt_at_ms = None;
        n.started_at_ms = Some(self.ctx.now_ms);
        n.finished_at_ms = None;
        let attempt = n.attempt;
        if self.transition(node, cause, None) {
            self.plan.actions.push(Action::Execute { node, attempt, fallback });
        }
    }

    fn succeed(&mut self, node: usize, cause: Cause, outputs: serde_json::Map<String, serde_json::Value>) {
        {
            let n = &mut self.snap.nodes[node];
            n.data_version += 1;
            n.outputs = outputs;
            n.fallback = false;
        }
        self.transition(node, cause, None);
        self.mark_readers_stale(node);
        self.evaluate_downstream(node);
    }

    /// The attempt in flight is a manual node's fallback declared `then: skip`.
    fn fallback_skips(&self, node: usize) -> bool {
        self.snap.nodes[node].fallback
            && matches!(
                &self.snap.flow.nodes[node].action,
                NodeAction::Manual(m) if m.fallback_then == FallbackThen::Skip
            )
    }

    /// The fallback succeeded and the flow says the node ends SKIPPED: its outputs are
    /// kept for reading (no new data version), strong downstream nodes are skipped.
    fn fallback_skip(&mut self, node: usize, outputs: serde_json::Map<String, serde_json::Value>) {
        {
            let n = &mut self.snap.nodes[node];
            n.outputs = outputs;
            n.fallback = false;
        }
        self.transition(node, Cause::FallbackSkipped, Some("fallback_skip".into()));
        self.evaluate_downstream(node);
    }

    fn attempt_failed(&mut self, node: usize, error: &str, retryable: bool) {
        let policy = &self.snap.flow.nodes[node].retry;
        let n = &self.snap.nodes[node];
        let in_series = n.attempt - n.series_start;
        if retryable && !n.fallback && policy.allows_another(in_series) {
            let delay = policy.delay(in_series, self.ctx.jitter_unit);
            let at_ms = self.ctx.now_ms + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2);
            self.snap.nodes[node].next_attempt_at_ms = Some(at_ms);
            if self.transition(node, Cause::RetryScheduled, Some(error.to_string())) {
                self.plan.actions.push(Action::ScheduleRetry { node, at_ms });
            }
            return;
        }
        self.snap.nodes[node].fallback = false;
        self.transition(node, Cause::AttemptFailed, Some(error.to_string()));
        self.evaluate_downstream(node);
    }

    fn rerun(&mut self, node: usize, downstream: bool) {
        let mut targets = vec![node];
        if downstream {
            targets.extend(
                self.descendants(node).into_iter().filter(|d| self.snap.nodes[*d].state.is_terminal()),
            );
        }
        for &t in &targets {
            let n = &mut self.snap.nodes[t];
            n.series_start = n.attempt;
            self.transition(t, Cause::Rerun, None);
        }
        self.reactivate_skipped_downstream(node);
        self.reactivate_run();
        self.evaluate_from([node]);
    }

    fn mark_success(&mut self, node: usize) {
        self.snap.nodes[node].fallback = false;
        self.transition(node, Cause::MarkSuccess, Some("marked success by operator".into()));
        let reactivated = self.reactivate_skipped_downstream(node);
        self.reactivate_run();
        self.evaluate_downstream(node);
        self.evaluate_from(reactivated);
    }

    /// Puts back to INIT every node skipped (transitively) because `node` failed or
    /// was skipped, so the run can be pushed through once `node` recovers.
    fn reactivate_skipped_downstream(&mut self, node: usize) -> Vec<usize> {
        let mut reactivated = Vec::new();
        let mut queue: VecDeque<usize> = VecDeque::from([node]);
        while let Some(u) = queue.pop_front() {
            for (d, _) in self.snap.flow.downstream[u].clone() {
                let n = &self.snap.nodes[d];
                let skipped_by_upstream = n.state == NodeState::Skipped
                    && matches!(n.reason.as_deref(), Some("upstream_failed" | "upstream_skipped"));
                if skipped_by_upstream && self.transition(d, Cause::Reactivated, None) {
                    reactivated.push(d);
                    queue.push_back(d);
                }
            }
        }
        reactivated
    }

    fn cancel(&mut self) {
        for node in 0..self.snap.nodes.len() {
            let n = &self.snap.nodes[node];
            match n.state {
                NodeState::Running => {
                    let attempt = n.attempt;
                    if self.transition(node, Cause::RunCancelled, Some("run_cancelled".into())) {
                        self.plan.actions.push(Action::Abort { node, attempt });
                    }
                }
                s if !s.is_terminal() => {
                    self.transition(node, Cause::RunCancelled, Some("run_cancelled".into()));
                }
                _ => {}
            }
        }
        self.run_transition(RunCause::Cancelled);
    }

    /// Fails a held run that never started: each node FAILED (`after_expired`),
    /// then the run QUEUED -> FAILED.
    fn after_expired(&mut self) {
        let reason = "after_policy: the upstream was not SUCCESS within `wait`";
        for node in 0..self.snap.nodes.len() {
            if !self.snap.nodes[node].state.is_terminal() {
                self.transition(node, Cause::AfterExpired, Some(reason.into()));
            }
        }
        self.run_transition(RunCause::Failed);
    }

    fn recover(&mut self) {
        if self.snap.state != RunState::Running {
            return;
        }
        let mut to_evaluate = Vec::new();
        for node in 0..self.snap.nodes.len() {
            let n = &self.snap.nodes[node];
            match n.state {
                NodeState::Running => {
                    self.transition(node, Cause::Recovered, Some("in flight at restart".into()));
                    if self.outlives_the_control_plane(node) {
                        // Its dispatch adopts the attempt a sidecar may still run (or
                        // takes the result it spooled), so it keeps its number: one
                        // attempt, not a phantom beside a second one.
                        let n = &mut self.snap.nodes[node];
                        n.attempt = n.attempt.saturating_sub(1).max(n.series_start);
                    }
                    to_evaluate.push(node);
                }
                NodeState::Init => to_evaluate.push(node),
                NodeState::Retrying => {
                    let at_ms = n.next_attempt_at_ms.unwrap_or(self.ctx.now_ms);
                    self.plan.actions.push(Action::ScheduleRetry { node, at_ms });
                }
                NodeState::ManualConfirm => self.plan.actions.push(Action::AwaitConfirm { node }),
                _ => {}
            }
        }
        self.evaluate_from(to_evaluate);
    }

    /// Whether the attempt in flight runs on a sidecar or is a child run (not the
    /// manual node's fallback), which goes on running, or keeps its result, while
    /// the control plane restarts: its recovery dispatches the same attempt again
    /// (for a sub-flow: the same child, found by its idempotency key).
    fn outlives_the_control_plane(&self, node: usize) -> bool {
        !self.snap.nodes[node].fallback
            && matches!(
                &self.snap.flow.nodes[node].action,
                NodeAction::Run(ExecutorDef::Sidecar(_) | ExecutorDef::Subflow(_))
            )
    }

    /// Marks direct downstream nodes that read an older version of `node` as stale.
    fn mark_readers_stale(&mut self, node: usize) {
        let version = self.snap.nodes[node].data_version;
        for (d, _) in self.snap.flow.downstream[node].clone() {
            let n = &mut self.snap.nodes[d];
            if !n.stale && n.reads.iter().any(|(u, v)| *u == node && *v < version) {
                n.stale = true;
                self.plan.touched.push(d);
            }
        }
    }

    fn descendants(&self, node: usize) -> Vec<usize> {
        let mut seen = vec![false; self.snap.nodes.len()];
        let mut out = Vec::new();
        let mut queue = VecDeque::from([node]);
        while let Some(u) = queue.pop_front() {
            for (d, _) in &self.snap.flow.downstream[u] {
                if !seen[*d] {
                    seen[*d] = true;
                    out.push(*d);
                    queue.push_back(*d);
                }
            }
        }
        out
    }

    fn evaluate_downstream(&mut self, node: usize) {
        let down: Vec<usize> = self.snap.flow.downstream[node].iter().map(|(d, _)| *d).collect();
        self.evaluate_from(down);
    }

    /// Evaluates each given node, then the downstream of every node that became
    /// terminal on the way (skips cascade in one pass, without recursion).
    fn evaluate_from(&mut self, nodes: impl IntoIterator<Item = usize>) {
        if self.snap.state != RunState::Running {
            return;
        }
        let mut queue: VecDeque<usize> = nodes.into_iter().collect();
        while let Some(node) = queue.pop_front() {
            if self.snap.nodes[node].state != NodeState::Init {
                continue;
            }
            match self.readiness(node) {
                Readiness::Wait => {}
                Readiness::Ready => {
                    let ready = Action::Ready { node };
                    if !self.plan.actions.contains(&ready) {
                        self.plan.actions.push(ready);
                    }
                }
                Readiness::AwaitConfirm => {
                    self.snap.nodes[node].started_at_ms = Some(self.ctx.now_ms);
                    if self.transition(node, Cause::AwaitConfirm, None) {
                        self.plan.actions.push(Action::AwaitConfirm { node });
                    }
                }
                Readiness::Skip(cause) => {
                    self.transition(node, cause, Some(cause.as_str().to_string()));
                    queue.extend(self.snap.flow.downstream[node].iter().map(|(d, _)| *d));
                }
                Readiness::ConditionError(message) => {
                    self.transition(node, Cause::ConditionError, Some(message));
                    queue.extend(self.snap.flow.downstream[node].iter().map(|(d, _)| *d));
                }
            }
        }
    }

    fn readiness(&self, node: usize) -> Readiness {
        let def = &self.snap.flow.nodes[node];
        let mut upstream_failed = false;
        let mut upstream_skipped = false;
        for need in &def.needs {
            let state = self.snap.nodes[need.upstream].state;
            if !state.is_terminal() {
                return Readiness::Wait;
            }
            if need.kind == DepKind::Strong {
                upstream_failed |= state == NodeState::Failed;
                upstream_skipped |= state == NodeState::Skipped;
            }
        }
        if upstream_failed {
            return Readiness::Skip(Cause::UpstreamFailed);
        }
        if upstream_skipped {
            return Readiness::Skip(Cause::UpstreamSkipped);
        }
        if let Some(when) = &def.when {
            let referenced: Vec<usize> =
                when.referenced_nodes().iter().filter_map(|name| self.snap.flow.node_index(name)).collect();
            let nodes = self.snap.nodes_json(referenced);
            match when.eval_dated(&self.snap.params, &nodes, self.snap.biz_date.as_deref()) {
                Ok(true) => {}
                Ok(false) => return Readiness::Skip(Cause::ConditionFalse),
                Err(e) => return Readiness::ConditionError(format!("condition error: {e}")),
            }
        }
        if matches!(def.action, NodeAction::Manual(_)) { Readiness::AwaitConfirm } else { Readiness::Ready }
    }

    /// A finished run that has work again becomes RUNNING.
    fn reactivate_run(&mut self) {
        let has_work = self.snap.nodes.iter().any(|n| !n.state.is_terminal());
        if has_work && matches!(self.snap.state, RunState::Success | RunState::Failed) {
            self.run_transition(RunCause::Reactivated);
        }
    }

    /// Finishes a RUNNING run whose nodes are all terminal, and corrects a finished
    /// run whose outcome an operator changed (FAILED -> RUNNING -> SUCCESS).
    pub fn update_run_state(&mut self) {
        if !self.snap.nodes.iter().all(|n| n.state.is_terminal()) {
            return;
        }
        let outcome = run_outcome(self.snap);
        match self.snap.state {
            RunState::Running => self.run_transition(outcome),
            RunState::Failed if outcome == RunCause::Succeeded => {
                self.run_transition(RunCause::Reactivated);
                self.run_transition(outcome);
            }
            _ => {}
        }
    }
}

/// A run fails if some FAILED node is not tolerated: a failure is tolerated only
/// when the node has downstream nodes and every edge out of it is weak.
pub fn run_outcome(snap: &RunSnapshot) -> RunCause {
    let flow = &snap.flow;
    let untolerated = snap.nodes.iter().enumerate().any(|(i, n)| {
        n.state == NodeState::Failed
            && (flow.downstream[i].is_empty()
                || flow.downstream[i].iter().any(|(_, kind)| *kind == DepKind::Strong))
    });
    if untolerated { RunCause::Failed } else { RunCause::Succeeded }
}
