//! Node-level `after:` (one node waits for another flow by business date). The run
//! starts as usual; a node whose `after` is not met stays INIT when it becomes
//! ready — no permit taken, no attempt spent — while its run's other nodes go on.
//! What it waits for is in the store (`node_waits`, written with the run), and
//! whether it is met is read from the upstream's rows, so the commit that makes the
//! upstream SUCCESS is what makes the node startable.
//!
//! The replica that commits an upstream SUCCESS asks the store which RUNNING runs
//! have a node waiting on it and tells each run's holder right after that commit:
//! its own engine directly, another replica through its inbox (`run_commands`
//! action `after_met`, woken over Redis, or found at its inbox poll). The holder
//! reads the waits again and dispatches the node once all are met. A wake lost to a
//! crash is made up by recovery (INIT nodes are evaluated again) and by the
//! reconcile sweep, which looks at every held node again.
//!
//! `after_policy` applies to a held node as to a held run, by the run's holder,
//! counted from the run's creation: `fail` → the node FAILED (`after_expired`),
//! `skip` → SKIPPED (`after_skipped`), `run` → its waits are dropped and it starts
//! (audited `after_policy_run`). Its waits are dropped after `fail`/`skip` too,
//! so a rerun of the node runs it.
//!
//! The reason shown on a held node (API node view, console run page) is made here
//! from the store: "waiting for fx-rates.publish 2026-12-03, RUNNING since 01:05".

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use madeira_core::model::AfterThen;
use madeira_core::{Command, FlowDef};
use madeira_store::{AuditRecord, HeldNode, NodeWaitState, RunCommand, RunReader};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::envelope::Envelope;
use crate::executor::humanize;
use crate::{EngineHandle, now_ms};

/// The inbox action that tells a replica a node of a run it holds may be released.
pub(crate) const AFTER_MET: &str = "after_met";
const ACTOR: &str = "after_policy";

/// The engine loop's held nodes: `(run, node index)` → when it became ready, and
/// the nodes released once (their `after` is not checked again in this run).
#[derive(Default)]
pub(crate) struct AfterHolds {
    held: HashMap<(String, usize), Instant>,
    released: HashSet<(String, usize)>,
}

impl AfterHolds {
    /// Holds a node; true when it was not held already.
    pub fn hold(&mut self, run_id: &str, node: usize, ready_at: Instant) -> bool {
        self.held.insert((run_id.to_string(), node), ready_at).is_none()
    }

    pub fn is_released(&self, run_id: &str, node: usize) -> bool {
        self.released.contains(&(run_id.to_string(), node))
    }

    pub fn release(&mut self, run_id: &str, node: usize) {
        self.released.insert((run_id.to_string(), node));
    }

    /// The held nodes of `run_id`, no longer held (the caller holds again those
    /// still waiting).
    pub fn take_run(&mut self, run_id: &str) -> Vec<(usize, Instant)> {
        let keys: Vec<(String, usize)> = self.held.keys().filter(|(r, _)| r == run_id).cloned().collect();
        keys.into_iter().filter_map(|k| self.held.remove(&k).map(|at| (k.1, at))).collect()
    }

    /// Runs with a held node.
    pub fn runs(&self) -> Vec<String> {
        let mut runs: Vec<String> = self.held.keys().map(|(r, _)| r.clone()).collect();
        runs.sort();
        runs.dedup();
        runs
    }

    pub fn forget_run(&mut self, run_id: &str) {
        self.held.retain(|(r, _), _| r != run_id);
        self.released.retain(|(r, _)| r != run_id);
    }
}

/// Why a node waits, from its unmet waits: "waiting for fx-rates.publish
/// 2026-12-03, RUNNING since 01:05" (times in the waiting flow's timezone),
/// joined by "; ".
pub fn reason(unmet: &[&NodeWaitState], def: &FlowDef) -> String {
    let tz = &def.business.timezone;
    let one = |w: &&NodeWaitState| {
        let state = match (w.upstream_state.as_deref(), w.upstream_since) {
            (None, _) => "no run yet".to_string(),
            (Some(s @ ("RUNNING" | "RETRYING")), Some(at)) => {
                let since = Utc.timestamp_millis_opt(at).single().map(|t| t.with_timezone(tz));
                match since {
                    Some(t) => format!("{s} since {}", t.format("%H:%M")),
                    None => s.to_string(),
                }
            }
            (Some(s), _) => s.to_string(),
        };
        format!("waiting for {}, {state}", w.wait.label())
    };
    unmet.iter().map(one).collect::<Vec<_>>().join("; ")
}

/// The reason of every node of `run_id` (a run of `def`) with an unmet `after`
/// now, by node name.
pub async fn node_reasons(store: &dyn RunReader, run_id: &str, def: &FlowDef) -> BTreeMap<String, String> {
    if !def.nodes.iter().any(|n| !n.after.is_empty()) {
        return BTreeMap::new();
    }
    let waits = match store.node_waits(run_id).await {
        Ok(waits) => waits,
        Err(e) => {
            debug!(run_id = %run_id, error = %e, "cannot read the node waits of the run");
            return BTreeMap::new();
        }
    };
    let mut by_node: BTreeMap<String, Vec<&NodeWaitState>> = BTreeMap::new();
    for w in waits.iter().filter(|w| !w.met) {
        by_node.entry(w.node.clone()).or_default().push(w);
    }
    by_node.into_iter().map(|(node, unmet)| (node, reason(&unmet, def))).collect()
}

impl EngineHandle {
    /// Tells `owner` that a node of `run_id`, which it holds, may be released.
    pub(crate) async fn tell_node_after(&self, run_id: String, owner: String) {
        let cmd = RunCommand {
            id: 0,
            run_id,
            target: owner.clone(),
            action: AFTER_MET.into(),
            node: None,
            actor: "engine".into(),
            reason: None,
            created_at: now_ms(),
        };
        match self.store.send_command(&cmd).await {
            Ok(_) => self.wake.notify(&owner),
            Err(e) => {
                warn!(run_id = %cmd.run_id, owner = %owner, error = %e, "cannot tell the holder its node's `after` is met; its reconcile sweep finds it")
            }
        }
    }

    /// The inbox's side of `tell_node_after`: look at the run's held nodes now.
    pub(crate) async fn node_after_met(&self, cmd: RunCommand) {
        let _ = self.send_envelope(Envelope::NodeAfter { run_id: cmd.run_id }).await;
        let answer = r#"{"ok":true}"#;
        if let Err(e) = self.store.answer_command(cmd.id, answer, now_ms()).await {
            debug!(command = cmd.id, error = %e, "cannot answer an after_met notice");
        }
    }

    /// Applies `after_policy` to every node held by its `after` longer than the
    /// flow's `wait` in a run this replica holds.
    pub(crate) async fn enforce_node_after_policy(&self) {
        let held = match self.store.held_nodes().await {
            Ok(held) => held,
            Err(e) => return debug!(error = %e, "after_policy: cannot read held nodes"),
        };
        let now = now_ms();
        for node in held.into_iter().filter(|h| h.owner.as_deref() == Some(self.holder.owner.as_str())) {
            let Ok(def) = self.flows.get(self.store.as_ref(), &node.flow, node.version).await else {
                continue;
            };
            let Some(wait) = def.after_policy.wait else { continue };
            if now - node.created_at < i64::try_from(wait.as_millis()).unwrap_or(i64::MAX) {
                continue;
            }
            let Some(index) = def.node_index(&node.node) else { continue };
            self.expire_node(&node, index, wait, def.after_policy.then).await;
        }
    }

    async fn expire_node(&self, node: &HeldNode, index: usize, wait: Duration, then: AfterThen) {
        let waited = humanize(wait);
        let (skip, action) = match then {
            AfterThen::Fail => (false, "after_policy_fail"),
            AfterThen::Skip => (true, "after_policy_skip"),
            AfterThen::Run => return self.run_node_anyway(node, &waited).await,
        };
        let reason = format!(
            "after_policy: {}; node {} waited {waited} for its upstream, which is not SUCCESS",
            then.as_str(),
            node.node
        );
        let (reply, answer) = oneshot::channel();
        let envelope = Envelope::Command {
            run_id: node.run_id.clone(),
            cmd: Command::NodeAfterExpired { node: index, skip },
            actor: "engine".into(),
            audit: Some((action.to_string(), Some(reason.clone()))),
            answer_to: None,
            reply: Some(reply),
        };
        if self.send_envelope(envelope).await.is_err() {
            return;
        }
        match answer.await {
            Ok(Ok(())) => {
                info!(run_id = %node.run_id, flow = %node.flow, node = %node.node, "{reason}");
                // A rerun of the node later runs it.
                let _ = self.store.waive_node_waits(&node.run_id, &node.node).await;
            }
            Ok(Err(e)) => debug!(run_id = %node.run_id, error = %e, "after_policy: not applied to the node"),
            Err(_) => {}
        }
    }

    async fn run_node_anyway(&self, node: &HeldNode, waited: &str) {
        match self.store.waive_node_waits(&node.run_id, &node.node).await {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                return warn!(run_id = %node.run_id, error = %e, "after_policy: cannot waive the node's waits");
            }
        }
        let reason = format!(
            "after_policy: run; node {} started without its upstream after waiting {waited}",
            node.node
        );
        info!(run_id = %node.run_id, flow = %node.flow, "{reason}");
        let audit = AuditRecord {
            at: now_ms(),
            actor: ACTOR.into(),
            action: "after_policy_run".into(),
            run_id: Some(node.run_id.clone()),
            node: Some(node.node.clone()),
            reason: Some(reason),
            details: Some(serde_json::json!({"after_policy": "run", "node": node.node})),
        };
        if let Err(e) = self.audit(audit).await {
            warn!(run_id = %node.run_id, error = %e, "after_policy: audit entry not written");
        }
        let _ = self.send_envelope(Envelope::NodeAfter { run_id: node.run_id.clone() }).await;
    }
}
