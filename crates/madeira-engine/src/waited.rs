//! Which flows anything may wait on (a run's or a node's `after:`), so that the
//! SUCCESS of a node of a flow nobody waits on skips the wake's two reads of the
//! store (`engine_loop/after.rs`): in a chain that was two queries on the reader
//! pool per node, answered "none", and ~0.09 ms of a `/bin/true` node's 1.7 on
//! this 2-CPU machine (`madeira bench --scenarios sidecar-chain`, issue 39).
//!
//! Known only where this engine's run creator writes every run of the store (an
//! embedded store, not shared by replicas): loaded from the store's waits when
//! the engine starts, then grown by the creator before it writes a run's waits,
//! never shrunk. Unknown (a shared store, or the load failed): every success is
//! read, as before. A run's own SUCCESS is always read (its `flow_succeeded`
//! triggers fire from there).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use madeira_store::{AfterWait, NewRun, Store};
use tracing::warn;

/// The flows waited on; `None` while unknown. Clones share it.
#[derive(Clone, Default)]
pub(crate) struct Waited(Arc<Mutex<Option<HashSet<String>>>>);

impl Waited {
    fn inner(&self) -> std::sync::MutexGuard<'_, Option<HashSet<String>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Learns the flows the store's waits name. Only for a store this engine
    /// alone creates runs in; on a failure it stays unknown.
    pub(crate) async fn load(&self, store: &dyn Store) {
        match store.waited_upstreams().await {
            Ok(flows) => *self.inner() = Some(flows.into_iter().collect()),
            Err(e) => {
                warn!(error = %e, "cannot read which flows runs wait on; every success wakes a look-up of its waiters")
            }
        }
    }

    /// Adds the flows `runs` wait on (before their waits are written).
    pub(crate) fn add(&self, runs: &[NewRun]) {
        self.add_waits(runs.iter().flat_map(|r| r.after.iter().chain(r.node_after.iter().map(|n| &n.wait))));
    }

    fn add_waits<'a>(&self, waits: impl Iterator<Item = &'a AfterWait>) {
        let mut inner = self.inner();
        let Some(flows) = inner.as_mut() else { return };
        for wait in waits {
            if !flows.contains(&wait.flow) {
                flows.insert(wait.flow.clone());
            }
        }
    }

    /// Whether a run or node may wait on `flow` (true while unknown).
    pub(crate) fn may_wait_on(&self, flow: &str) -> bool {
        self.inner().as_ref().is_none_or(|flows| flows.contains(flow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(flow: &str) -> AfterWait {
        AfterWait { flow: flow.into(), node: None, date: "2026-12-04".into() }
    }

    #[test]
    fn unknown_says_yes_and_known_grows_with_the_runs_written() {
        let waited = Waited::default();
        assert!(waited.may_wait_on("anything"), "unknown: every success is read");
        *waited.inner() = Some(HashSet::from(["fx".to_string()]));
        assert!(waited.may_wait_on("fx"));
        assert!(!waited.may_wait_on("pull"));
        waited.clone().add_waits([wait("pull"), wait("ledger")].iter());
        assert!(waited.may_wait_on("pull"), "added through a clone");
        assert!(waited.may_wait_on("ledger"));
        assert!(!waited.may_wait_on("other"));
    }
}
