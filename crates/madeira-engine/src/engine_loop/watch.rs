//! Stall and slow-node watch (SPEC §4): about once a second the engine looks at
//! the nodes it holds that wait in INIT for their executor (the gate) and at its
//! attempts in flight. A node parked longer than its `stall_after`, or RUNNING
//! longer than its `warn_after`, is reported to the observers once (`node_stalled`
//! / `node_slow`, which raise `MadeiraNodeStalled` / `MadeiraNodeSlow` warnings and
//! move the `madeira_nodes_stalled` / `madeira_nodes_slow` gauges); once it moved
//! on — dispatched, finished, cancelled, handed to another replica — the same
//! hook says so with `active: false`. Nothing is stopped.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use madeira_core::NodeState;
use tracing::{info, warn};

use super::Engine;
use crate::clock::now_ms;
use crate::observer::NodeWatch;

/// How often the watch looks.
pub(super) const WATCH_EVERY: Duration = Duration::from_secs(1);

/// A node reported stalled or slow, as the clearing report repeats it.
struct Reported {
    flow: String,
    node: String,
    labels: BTreeMap<String, String>,
    after: Duration,
    attempt: u32,
}

#[derive(Default)]
pub(super) struct Watch {
    last: Option<Instant>,
    stalled: HashMap<(String, usize), Reported>,
    slow: HashMap<(String, usize), Reported>,
}

impl Reported {
    fn event<'a>(&'a self, run_id: &'a str, reason: Option<&'a str>, active: bool) -> NodeWatch<'a> {
        NodeWatch {
            run_id,
            flow: &self.flow,
            node: &self.node,
            labels: &self.labels,
            after: self.after,
            reason,
            attempt: self.attempt,
            active,
        }
    }
}

impl Engine {
    /// Looks when `WATCH_EVERY` passed since the last look (not while draining).
    pub(super) fn watch_if_due(&mut self) {
        if self.step.draining || self.watch.last.is_some_and(|at| at.elapsed() < WATCH_EVERY) {
            return;
        }
        self.watch.last = Some(Instant::now());
        self.watch_nodes();
    }

    /// One look: reports nodes that passed their threshold and those that moved on.
    fn watch_nodes(&mut self) {
        let now = Instant::now();
        let mut parked = HashMap::new();
        for (run_id, node, since, reason) in self.step.gate.parked_since() {
            parked.insert((run_id.clone(), node), ());
            let key = (run_id, node);
            if self.watch.stalled.contains_key(&key) {
                continue;
            }
            let Some(snap) = self.step.runs.get(&key.0) else { continue };
            let def = &snap.flow.nodes[node];
            if now.duration_since(since) < def.stall_after {
                continue;
            }
            let reported = Reported {
                flow: snap.flow.name.clone(),
                node: def.id.clone(),
                labels: snap.flow.labels.clone(),
                after: def.stall_after,
                attempt: snap.nodes[node].attempt,
            };
            warn!(run_id = %key.0, flow = %reported.flow, node = %reported.node, reason = ?reason, "node stalled in INIT past its stall_after");
            let event = reported.event(&key.0, reason.as_deref(), true);
            self.effects.observers.iter().for_each(|o| o.node_stalled(&event));
            self.watch.stalled.insert(key, reported);
        }
        let gone: Vec<_> = self.watch.stalled.keys().filter(|k| !parked.contains_key(*k)).cloned().collect();
        for key in gone {
            if let Some(r) = self.watch.stalled.remove(&key) {
                info!(run_id = %key.0, flow = %r.flow, node = %r.node, "stalled node moved on");
                let event = r.event(&key.0, None, false);
                self.effects.observers.iter().for_each(|o| o.node_stalled(&event));
            }
        }
        self.watch_slow();
    }

    fn watch_slow(&mut self) {
        let now = now_ms();
        // `(run, node) → attempt` of every attempt in flight that is RUNNING.
        let mut running = HashMap::new();
        for (run_id, node) in self.effects.running.keys() {
            let Some(snap) = self.step.runs.get(run_id) else { continue };
            let n = &snap.nodes[*node];
            if n.state != NodeState::Running {
                continue;
            }
            running.insert((run_id.clone(), *node), n.attempt);
            let key = (run_id.clone(), *node);
            let def = &snap.flow.nodes[*node];
            let Some(after) = def.warn_after else { continue };
            let since = n.started_at_ms.unwrap_or(now);
            let ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
            if self.watch.slow.contains_key(&key) || now.saturating_sub(since) < ms {
                continue;
            }
            let reported = Reported {
                flow: snap.flow.name.clone(),
                node: def.id.clone(),
                labels: snap.flow.labels.clone(),
                after,
                attempt: n.attempt,
            };
            warn!(run_id = %run_id, flow = %reported.flow, node = %reported.node, attempt = n.attempt, "node running past its warn_after");
            let event = reported.event(run_id, None, true);
            self.effects.observers.iter().for_each(|o| o.node_slow(&event));
            self.watch.slow.insert(key, reported);
        }
        let gone: Vec<_> = self
            .watch
            .slow
            .iter()
            .filter(|(k, r)| running.get(*k) != Some(&r.attempt))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            if let Some(r) = self.watch.slow.remove(&key) {
                info!(run_id = %key.0, flow = %r.flow, node = %r.node, "slow node moved on");
                let event = r.event(&key.0, None, false);
                self.effects.observers.iter().for_each(|o| o.node_slow(&event));
            }
        }
    }
}
