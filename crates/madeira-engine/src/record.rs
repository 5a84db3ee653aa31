//! Turning plans into what one group commit writes (rows, transition records,
//! outputs, attempts, audit) and what happens after it is durable (events, actions,
//! replies).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use madeira_core::{Action, Cause, Plan, RunSnapshot};
use madeira_store::{
    AttemptRecord, AuditRecord, Batch, Edge, LogRecord, OutputWrite, RunWrite, TransitionRecord,
};

use crate::envelope::Reply;
use crate::trace::FinishedAttempt;
use crate::{EngineError, RunEvent, snapshot};

/// Everything one engine batch accumulates before its commit.
#[derive(Default)]
pub(crate) struct Work {
    pub batch: Batch,
    /// Nodes whose rows must be written: `(run_id, index)`.
    pub dirty: BTreeSet<(String, usize)>,
    pub events: Vec<RunEvent>,
    /// `(run_id, action)` to perform once durable.
    pub actions: Vec<(String, Action)>,
    /// Callers to answer once durable, with the run each is about.
    pub replies: Vec<(Reply, Result<(), EngineError>, String)>,
    /// Forwarded actions answered in `batch.answers`: `(answer id, run_id)`.
    pub answered: Vec<(i64, String)>,
    /// When each node became ready, for the dispatch-latency measure.
    pub ready_at: HashMap<(String, usize), Instant>,
    /// Permits taken in this batch, given back if the commit fails.
    pub acquired: Vec<(String, usize, String)>,
    /// Throttled `(flow, node)` whose permits or queue changed.
    pub throttled: BTreeMap<(String, usize), String>,
    /// Finished attempts: `(run_id, flow, node, attempt, outcome, error, duration)`.
    pub finished: Vec<FinishedAttempt>,
    /// Runs the engine took charge of in this batch.
    pub resumed: Vec<String>,
    /// `(run_id, node)` whose confirmation is overdue.
    pub overdue: Vec<(String, String)>,
    /// Global permits: `(flow, node)` with new waiters, and with permits given back.
    pub permit_wanted: BTreeSet<(String, usize)>,
    pub permits_freed: BTreeSet<(String, usize)>,
    /// Runs with a node newly held by its own `after`: looked at after the commit
    /// (`engine_loop/node_after.rs`).
    pub after_held: BTreeSet<String>,
}

impl Work {
    /// Records the plan's transitions and state writes for `snap`.
    pub fn record(&mut self, snap: &RunSnapshot, plan: &Plan, actor: &str, now_ms: i64) {
        let flow = &snap.flow;
        for node in &plan.touched {
            self.dirty.insert((snap.run_id.clone(), *node));
        }
        for change in &plan.nodes {
            let node = flow.nodes[change.node].id.clone();
            self.dirty.insert((snap.run_id.clone(), change.node));
            self.batch.transitions.push(TransitionRecord {
                run_id: snap.run_id.clone(),
                node: Some(node.clone()),
                edge: Edge::Node { from: change.from, to: change.to, cause: change.cause },
                actor: actor.into(),
                attempt: change.attempt,
                reason: change.reason.clone(),
                at: now_ms,
            });
            if matches!(change.cause, Cause::Succeeded) {
                let n = &snap.nodes[change.node];
                self.batch.outputs.extend(n.outputs.iter().map(|(key, value)| OutputWrite {
                    run_id: snap.run_id.clone(),
                    node: node.clone(),
                    data_version: n.data_version,
                    key: key.clone(),
                    value: value.clone(),
                }));
            }
            self.events.push(RunEvent {
                run_id: snap.run_id.clone(),
                flow: flow.name.clone(),
                node: Some(node),
                from: change.from.as_str().into(),
                to: change.to.as_str().into(),
                cause: change.cause.as_str().into(),
                attempt: change.attempt,
                reason: change.reason.clone(),
                at_ms: now_ms,
            });
        }
        for change in &plan.runs {
            let finished = change.to.is_terminal().then_some(now_ms);
            let started = (change.cause == madeira_core::RunCause::Started).then_some(now_ms);
            self.batch.runs.push(RunWrite {
                run_id: snap.run_id.clone(),
                state: change.to,
                started_at: started,
                finished_at: finished,
            });
            self.batch.transitions.push(TransitionRecord {
                run_id: snap.run_id.clone(),
                node: None,
                edge: Edge::run(Some(change.from), change.cause, change.to),
                actor: actor.into(),
                attempt: 0,
                reason: None,
                at: now_ms,
            });
            self.events.push(RunEvent {
                run_id: snap.run_id.clone(),
                flow: flow.name.clone(),
                node: None,
                from: change.from.as_str().into(),
                to: change.to.as_str().into(),
                cause: change.cause.as_str().into(),
                attempt: 0,
                reason: None,
                at_ms: now_ms,
            });
        }
    }

    pub fn attempt_started(
        &mut self,
        snap: &RunSnapshot,
        node: usize,
        attempt: u32,
        now_ms: i64,
        host: Option<String>,
    ) {
        self.batch.attempts.push(AttemptRecord {
            run_id: snap.run_id.clone(),
            node: snap.flow.nodes[node].id.clone(),
            attempt,
            started_at: now_ms,
            finished_at: None,
            outcome: None,
            error: None,
            host,
        });
    }

    pub fn attempt_finished(&mut self, record: AttemptRecord, log: Option<LogRecord>) {
        self.batch.attempts.push(record);
        if let Some(log) = log {
            self.batch.logs.push(log);
        }
    }

    pub fn audit(&mut self, record: AuditRecord) {
        self.batch.audit.push(record);
    }

    /// Fills in the node rows of every dirty node from the snapshots.
    pub fn finish(&mut self, runs: &HashMap<String, RunSnapshot>) {
        for (run_id, idx) in std::mem::take(&mut self.dirty) {
            if let Some(snap) = runs.get(&run_id) {
                self.batch.nodes.push(snapshot::node_row(snap, idx));
            }
        }
    }
}
