//! Runs waiting for sidecars this replica has none of. Sidecars connect to any
//! replica, so in a cluster a run's ready node may wait here for a group whose
//! sidecars are connected elsewhere. Every `OFFER_EVERY` this replica looks up, in
//! the store's presence table, a replica whose live sidecars declare the job,
//! queues an `adopt` command for it (woken through Redis, or found by its inbox
//! poll) and forgets the run; the adopter claims it like an idle run (no node
//! RUNNING: the claim checks) and dispatches. Nothing waits on the adopter: this
//! replica keeps the lease until the claim, and its reconcile sweep resumes (and
//! offers again) a run nobody adopted.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use madeira_core::model::NodeAction;
use madeira_core::{Command, ExecutorDef};
use madeira_store::{Claim, RunCommand};
use tracing::{debug, info, warn};

use super::Engine;
use crate::clock::now_ms;
use crate::record::Work;

pub(super) const OFFER_EVERY: Duration = Duration::from_secs(1);
/// How recent a replica's report of its sidecars must be to send it work.
const FRESH_MS: i64 = 10_000;

impl Engine {
    /// Offers each run whose parked sidecar node another replica can run.
    pub(super) async fn offer_waiting(&mut self) {
        let mut candidates: Vec<(String, String, String)> = Vec::new();
        for (run_id, node, _) in self.step.gate.parked() {
            if self.effects.running.keys().any(|(run, _)| *run == run_id) {
                continue;
            }
            let Some(snap) = self.step.runs.get(&run_id) else { continue };
            if let NodeAction::Run(ExecutorDef::Sidecar(def)) = &snap.flow.nodes[node].action {
                candidates.push((run_id, def.group.clone(), def.job.clone()));
            }
        }
        candidates.sort();
        candidates.dedup();
        // A run with several parked nodes goes to the first that has a host.
        let mut offered: HashSet<String> = HashSet::new();
        let mut hosts_of: HashMap<(String, String), Vec<String>> = HashMap::new();
        for (run_id, group, job) in candidates {
            if offered.contains(&run_id) {
                continue;
            }
            let key = (group.clone(), job.clone());
            if !hosts_of.contains_key(&key) {
                let hosts = match self.store.sidecar_hosts(&group, &job, now_ms() - FRESH_MS).await {
                    Ok(hosts) => hosts,
                    Err(e) => {
                        warn!(error = %e, "cannot read where sidecars are connected");
                        return;
                    }
                };
                let others = hosts.into_iter().filter(|h| *h != self.holder.owner).collect();
                hosts_of.insert(key.clone(), others);
            }
            // Spread runs over the replicas that have the sidecars, stably per run.
            let others = hosts_of.get(&key).map(Vec::as_slice).unwrap_or_default();
            let spread = run_id.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b)));
            let Some(target) = others.get(spread % others.len().max(1)).cloned() else { continue };
            let cmd = RunCommand {
                id: 0,
                run_id: run_id.clone(),
                target: target.clone(),
                action: "adopt".into(),
                node: None,
                // The offering replica: the adopter claims the run only from it.
                actor: self.holder.owner.clone(),
                reason: Some(format!("waits for a sidecar of group {group} declaring job {job}")),
                created_at: now_ms(),
            };
            match self.store.send_command(&cmd).await {
                Ok(_) => {
                    self.handle.wake.notify(&target);
                    info!(run_id = %run_id, group = %group, job = %job, to = %target,
                        "run offered to the replica whose sidecars it waits for");
                    self.forget(&run_id);
                    offered.insert(run_id);
                }
                Err(e) => warn!(run_id = %run_id, error = %e, "cannot offer a waiting run"),
            }
        }
    }

    /// Drops a run from memory; its lease stays until another replica claims it.
    pub(super) fn forget(&mut self, run_id: &str) {
        let flow = self.step.runs.remove(run_id).map(|snap| snap.flow.name.clone()).unwrap_or_default();
        self.effects.traces.remove(run_id);
        for (run, _, name) in self.step.gate.parked() {
            if run == run_id {
                self.effects.observers.iter().for_each(|o| o.node_waiting(run_id, &flow, &name, None));
            }
        }
        self.step.gate.forget_run(run_id);
    }

    /// Claims a run `from` offered (only while `from` still holds it and none of
    /// its nodes is RUNNING) and evaluates it.
    pub(super) async fn adopt(&mut self, run_id: &str, from: &str, work: &mut Work) {
        if self.step.runs.contains_key(run_id) {
            return;
        }
        match self.store.adopt_run(run_id, from, &self.holder.lease_now()).await {
            Ok(Claim::Held) => {}
            Ok(other) => {
                debug!(run_id = %run_id, from = %from, outcome = ?other, "offered run not adopted");
                return;
            }
            Err(e) => {
                warn!(run_id = %run_id, error = %e, "cannot adopt an offered run");
                return;
            }
        }
        if let Err(e) = self.ensure_loaded(run_id, false).await {
            warn!(run_id = %run_id, error = %e, "adopted run not loaded; the reconcile sweep resumes it");
            return;
        }
        info!(run_id = %run_id, "adopted a run waiting for this replica's sidecars");
        let _ = self.step.apply(run_id, Command::Recover, "engine", work);
        work.resumed.push(run_id.to_string());
    }
}
