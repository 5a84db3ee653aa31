//! The engine loop's side of node-level `after` (`crate::node_after`): a ready
//! node with `after` is held in INIT and its waits are read from the store in the
//! next batch; it is dispatched once they are all met. After a commit with
//! successes, the runs whose nodes wait on them are told (here directly, on
//! another replica through its inbox); the reconcile sweep looks at every held
//! node again.

use std::time::Instant;

use madeira_core::{NodeState, RunState};
use tracing::{Instrument, error, info, info_span};

use super::after::Success;
use super::{Engine, Step};
use crate::EngineHandle;
use crate::envelope::Envelope;
use crate::record::Work;
use madeira_store::Store;
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

impl Step {
    /// A node became ready: true when its `after` holds it (its run is looked at
    /// after the batch's commit), false when it may go on (no `after`, or released).
    pub(super) fn hold_for_after(
        &mut self,
        run_id: &str,
        node: usize,
        ready_at: Instant,
        work: &mut Work,
    ) -> bool {
        let Some(snap) = self.runs.get(run_id) else { return false };
        if snap.flow.observe
            || snap.flow.nodes[node].after.is_empty()
            || self.gate.after.is_released(run_id, node)
        {
            return false;
        }
        if self.gate.after.hold(run_id, node, ready_at) {
            work.after_held.insert(run_id.to_string());
        }
        true
    }
}

impl Engine {
    /// Reads the waits of `run_id`'s held nodes: dispatches those whose waits are
    /// all met, holds the others again.
    pub(super) async fn check_node_after(&mut self, run_id: &str, work: &mut Work) {
        let held = self.step.gate.after.take_run(run_id);
        if held.is_empty() {
            return;
        }
        let waits = match self.store.node_waits(run_id).await {
            Ok(waits) => waits,
            Err(e) => {
                error!(run_id = %run_id, error = %e, "cannot read the node's `after` waits; the reconcile sweep looks again");
                for (node, at) in held {
                    self.step.gate.after.hold(run_id, node, at);
                }
                return;
            }
        };
        for (node, ready_at) in held {
            let Some(snap) = self.step.runs.get(run_id) else { return };
            if snap.state != RunState::Running || snap.nodes[node].state != NodeState::Init {
                continue;
            }
            let name = &snap.flow.nodes[node].id;
            if waits.iter().any(|w| &w.node == name && !w.met) {
                self.step.gate.after.hold(run_id, node, ready_at);
                continue;
            }
            info!(run_id = %run_id, flow = %snap.flow.name, node = %name, "the node's `after` is met: it starts");
            self.step.gate.after.release(run_id, node);
            self.step.on_ready(run_id, node, ready_at, work);
        }
    }

    /// The reconcile sweep's safety net: every run with a held node is looked at.
    pub(super) fn recheck_node_after(&mut self) {
        for run_id in self.step.gate.after.runs() {
            self.intake.pending.push_back(Envelope::NodeAfter { run_id });
        }
    }
}

/// What the wake task (`Engine::wake_after`) tells held nodes through.
pub(super) struct Tell<'a> {
    pub store: &'a dyn Store,
    pub handle: &'a EngineHandle,
    /// Where the task spawns what it starts (the engine's in-process tasks).
    pub tasks: &'a TaskTracker,
    /// The loop's own channel.
    pub tx: &'a mpsc::Sender<Envelope>,
}

impl Tell<'_> {
    /// Tells the runs with a node waiting on one of `successes` (right after their
    /// commit): those held by `owner` (this replica) through the loop's channel, the
    /// others' holders by their inbox.
    pub(super) async fn node_waits(&self, owner: &str, successes: &[Success]) {
        for (flow, date, _) in successes {
            let waiters = match self.store.node_waiters(flow, date).await {
                Ok(waiters) => waiters,
                Err(e) => {
                    error!(flow = %flow, biz_date = %date, error = %e, "cannot read the nodes waiting on this run; the reconcile sweep releases them");
                    continue;
                }
            };
            for (run_id, holder) in waiters {
                match holder {
                    Some(holder) if holder != owner => {
                        let handle = self.handle.clone();
                        let span = info_span!("node_after", run_id = %run_id, owner = %holder);
                        self.tasks.spawn(
                            async move { handle.tell_node_after(run_id, holder).await }.instrument(span),
                        );
                    }
                    _ => {
                        let _ = self.tx.send(Envelope::NodeAfter { run_id }).await;
                    }
                }
            }
        }
    }
}
