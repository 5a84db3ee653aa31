//! Where each attempt runs (`attempts.host`): the replica id for an attempt in
//! this process (builtin, http, sql), the reporting host for `madeira exec`, and
//! for a sidecar attempt the sidecar(s) the fleet placed it on, learned after its
//! start was committed (`EngineHandle::attempt_placed`) and written by the next
//! commit. A moved or sharded attempt lists each sidecar once, in placement order.
//!
//! A batch of placements alone is not committed on its own (that cost a store
//! commit per sidecar attempt): its host updates wait, at most `HOSTS_WAIT`, for
//! the next commit, usually the one that records the attempt's end. They are
//! written before the loop stops; a crash in between loses only the host.

use madeira_core::ExecutorDef;
use madeira_core::model::{NodeAction, NodeDef};
use madeira_store::AttemptHost;

use super::Engine;
use crate::envelope::Envelope;
use crate::record::Work;
use crate::{EngineError, EngineHandle};

/// Longest wait of a placement for another commit to carry it.
pub(super) const HOSTS_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Host updates waiting for the next commit.
#[derive(Default)]
pub(crate) struct DeferredHosts {
    hosts: Vec<AttemptHost>,
    /// When they are committed on their own, if nothing else is by then.
    pub due: Option<tokio::time::Instant>,
}

impl DeferredHosts {
    /// Keeps placements for the next commit.
    pub fn defer(&mut self, hosts: Vec<AttemptHost>) {
        self.hosts.extend(hosts);
        self.due.get_or_insert_with(|| tokio::time::Instant::now() + HOSTS_WAIT);
    }

    /// Puts the waiting placements into `batch`, ahead of its own (the latest wins).
    pub fn ride(&mut self, batch: &mut madeira_store::Batch) {
        if !self.hosts.is_empty() {
            let mut hosts = std::mem::take(&mut self.hosts);
            hosts.append(&mut batch.attempt_hosts);
            batch.attempt_hosts = hosts;
        }
        self.due = None;
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
}

/// Sleeps until `due`; never without one.
pub(super) async fn until(due: Option<tokio::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Longest host list kept for one attempt (a broadcast over many sidecars).
const MAX_HOSTS_LEN: usize = 512;

/// What an attempt of `def` runs (`fallback`: a manual node's fallback executor);
/// `None` when nothing is executed (a manual node waiting for its answer).
pub(super) fn executor_of(def: &NodeDef, fallback: bool) -> Option<&ExecutorDef> {
    match (&def.action, fallback) {
        (NodeAction::Run(executor), _) => Some(executor),
        (NodeAction::Manual(manual), true) => manual.fallback.as_ref(),
        (NodeAction::Manual(_), false) => None,
    }
}

impl Engine {
    /// The host an ended attempt's record carries (inserted only when its start
    /// was not written, i.e. both are in one batch): this replica's for an
    /// in-process attempt; a sidecar attempt's comes from its placements.
    pub(super) fn done_host(&self, ran: Option<super::drain::Running>) -> Option<String> {
        ran.filter(|r| r.in_process).map(|_| self.holder.owner.clone())
    }

    /// The fleet placed attempt `attempt` of `node` on sidecar `host`: recorded
    /// when that attempt is still the one running here.
    pub(super) fn placed(&mut self, run_id: &str, node: &str, attempt: u32, host: String, work: &mut Work) {
        let Some(idx) = self.step.runs.get(run_id).and_then(|s| s.flow.node_index(node)) else {
            return;
        };
        let Some(running) = self.effects.running.get_mut(&(run_id.to_string(), idx)) else {
            return;
        };
        if running.attempt != attempt || running.hosts.contains(&host) {
            return;
        }
        running.hosts.push(host);
        let mut joined = running.hosts.join(", ");
        if joined.len() > MAX_HOSTS_LEN {
            let cut = (0..=MAX_HOSTS_LEN - 3).rev().find(|&i| joined.is_char_boundary(i)).unwrap_or(0);
            joined.truncate(cut);
            joined.push_str("...");
        }
        work.batch.attempt_hosts.push(AttemptHost {
            run_id: run_id.to_string(),
            node: node.to_string(),
            attempt,
            host: joined,
        });
    }
}

impl EngineHandle {
    /// Tells the engine that attempt `attempt` of `run_id`'s `node` was placed on
    /// sidecar `host` (the fleet calls it for every placement, a move included).
    pub async fn attempt_placed(
        &self,
        run_id: &str,
        node: &str,
        attempt: u32,
        host: &str,
    ) -> Result<(), EngineError> {
        self.send_envelope(Envelope::AttemptPlaced {
            run_id: run_id.to_string(),
            node: node.to_string(),
            attempt,
            host: host.to_string(),
        })
        .await
    }
}
