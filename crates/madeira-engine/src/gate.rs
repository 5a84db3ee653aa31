//! Nodes whose needs are met but whose executor cannot take them yet (no live
//! sidecar of the group declares the job). They wait in INIT — nothing is written,
//! no attempt is spent — with the reason visible through `WaitingNodes`, and are
//! dispatched when the executor reports a change (`EngineHandle::executors_changed`).
//! It also keeps the nodes held by their own `after` (`crate::node_after`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// `(run_id, node) → reason` of every node waiting for its executor; shared with
/// the API (shown as the node's reason) and cheap to clone.
#[derive(Clone, Default)]
pub struct WaitingNodes {
    inner: Arc<Mutex<HashMap<(String, String), String>>>,
}

impl WaitingNodes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why `node` of `run_id` waits in INIT, if it does.
    pub fn reason(&self, run_id: &str, node: &str) -> Option<String> {
        self.lock().get(&(run_id.to_string(), node.to_string())).cloned()
    }

    /// How many nodes wait now.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Every waiting node: `(run_id, node, reason)`.
    pub fn list(&self) -> Vec<(String, String, String)> {
        self.lock().iter().map(|((r, n), why)| (r.clone(), n.clone(), why.clone())).collect()
    }
}

/// The engine loop's side: which `(run, node index)` are parked since when.
#[derive(Default)]
pub(crate) struct Gate {
    parked: HashMap<(String, usize), (String, Instant)>,
    pub waiting: WaitingNodes,
    /// Nodes held by their own `after` (`crate::node_after`).
    pub after: crate::node_after::AfterHolds,
}

impl Gate {
    pub fn new(waiting: WaitingNodes) -> Self {
        Self { parked: HashMap::new(), waiting, after: Default::default() }
    }

    /// Parks a node; true when it was not parked already.
    pub fn park(&mut self, run_id: &str, node: usize, name: &str, ready_at: Instant, reason: String) -> bool {
        self.waiting.lock().insert((run_id.to_string(), name.to_string()), reason);
        self.parked.insert((run_id.to_string(), node), (name.to_string(), ready_at)).is_none()
    }

    /// Every parked node, to be looked at again; their reasons stay until `clear`.
    pub fn take_all(&mut self) -> Vec<(String, usize, String, Instant)> {
        self.parked.drain().map(|((run, node), (name, at))| (run, node, name, at)).collect()
    }

    /// Whether any node is parked.
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Every parked node with when it became ready and why it waits.
    pub fn parked_since(&self) -> Vec<(String, usize, Instant, Option<String>)> {
        let waiting = self.waiting.lock();
        self.parked
            .iter()
            .map(|((run, node), (name, at))| {
                (run.clone(), *node, *at, waiting.get(&(run.clone(), name.clone())).cloned())
            })
            .collect()
    }

    /// Every parked node: `(run, node index, node name)`.
    pub fn parked(&self) -> Vec<(String, usize, String)> {
        self.parked.iter().map(|((run, node), (name, _))| (run.clone(), *node, name.clone())).collect()
    }

    pub fn clear(&mut self, run_id: &str, name: &str) {
        self.waiting.lock().remove(&(run_id.to_string(), name.to_string()));
    }

    pub fn forget_run(&mut self, run_id: &str) {
        self.after.forget_run(run_id);
        self.parked.retain(|(run, _), _| run != run_id);
        self.waiting.lock().retain(|(run, _), _| run != run_id);
    }
}
