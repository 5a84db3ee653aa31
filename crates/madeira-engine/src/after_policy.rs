//! `after_policy: {wait, then}` enforced: every second each replica reads the
//! runs held by an unmet `after` from the store, and a run held longer than its
//! flow's `wait` (since it was created) is, by `then`:
//! - `fail`: failed unstarted (`Command::AfterExpired`: its nodes FAILED
//!   `after_expired`, the run QUEUED -> FAILED, edges of the state tables);
//! - `skip`: cancelled (`Command::Cancel`: QUEUED -> CANCELLED, its nodes SKIPPED
//!   `run_cancelled`);
//! - `run`: its waits are dropped in the store (`waive_waits`, once across
//!   replicas) and it is promoted like any run waiting for room.
//!
//! Each is audited (`after_policy_fail`, `after_policy_skip`, `after_policy_run`,
//! actor `after_policy`) with a reason naming whom it waited for and how long.
//! Two replicas may both see it due: the state tables refuse the second command,
//! and `waive_waits` answers true once.

use std::time::Duration;

use madeira_core::Command;
use madeira_core::model::AfterThen;
use madeira_store::{AuditRecord, HeldRun};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::envelope::Envelope;
use crate::executor::humanize;
use crate::{EngineHandle, now_ms};

/// How often held runs are looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);
const ACTOR: &str = "after_policy";

pub(crate) fn spawn(handle: EngineHandle, cancel: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CHECK_EVERY);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {
                    handle.enforce_after_policy().await;
                    handle.enforce_node_after_policy().await;
                }
            }
        }
    })
}

impl EngineHandle {
    /// Applies `after_policy` to every held run whose `wait` is over.
    pub(crate) async fn enforce_after_policy(&self) {
        let held = match self.store.held_by_after().await {
            Ok(held) => held,
            Err(e) => return debug!(error = %e, "after_policy: cannot read held runs"),
        };
        let now = now_ms();
        for run in held {
            let Ok(def) = self.flows.get(self.store.as_ref(), &run.flow, run.version).await else { continue };
            let Some(wait) = def.after_policy.wait else { continue };
            if now - run.created_at < i64::try_from(wait.as_millis()).unwrap_or(i64::MAX) {
                continue;
            }
            self.expire_held(&run, wait, def.after_policy.then).await;
        }
    }

    async fn expire_held(&self, run: &HeldRun, wait: Duration, then: AfterThen) {
        let upstream = run
            .wait_reason
            .as_deref()
            .and_then(|r| r.strip_prefix("waiting for "))
            .unwrap_or("its upstream")
            .to_string();
        let waited = humanize(wait);
        match then {
            AfterThen::Fail => {
                let reason =
                    format!("after_policy: fail; waited {waited} for {upstream}, which is not SUCCESS");
                self.held_command(run, Command::AfterExpired, "after_policy_fail", reason).await;
            }
            AfterThen::Skip => {
                let reason =
                    format!("after_policy: skip; waited {waited} for {upstream}, which is not SUCCESS");
                self.held_command(run, Command::Cancel, "after_policy_skip", reason).await;
            }
            AfterThen::Run => match self.store.waive_waits(&run.run_id).await {
                Ok(true) => {
                    let reason =
                        format!("after_policy: run; started without {upstream} after waiting {waited}");
                    info!(run_id = %run.run_id, flow = %run.flow, "{reason}");
                    let audit = AuditRecord {
                        at: now_ms(),
                        actor: ACTOR.into(),
                        action: "after_policy_run".into(),
                        run_id: Some(run.run_id.clone()),
                        node: None,
                        reason: Some(reason),
                        details: Some(serde_json::json!({"after_policy": "run", "waited_for": upstream})),
                    };
                    if let Err(e) = self.audit(audit).await {
                        warn!(run_id = %run.run_id, error = %e, "after_policy: audit entry not written");
                    }
                    let _ = self.send_envelope(Envelope::Promote { flow: run.flow.clone() }).await;
                }
                Ok(false) => {}
                Err(e) => {
                    warn!(run_id = %run.run_id, error = %e, "after_policy: cannot waive the run's waits")
                }
            },
        }
    }

    async fn held_command(&self, run: &HeldRun, cmd: Command, action: &str, reason: String) {
        let (reply, answer) = oneshot::channel();
        let envelope = Envelope::Command {
            run_id: run.run_id.clone(),
            cmd,
            actor: ACTOR.into(),
            audit: Some((action.to_string(), Some(reason.clone()))),
            answer_to: None,
            reply: Some(reply),
        };
        if self.send_envelope(envelope).await.is_err() {
            return;
        }
        match answer.await {
            Ok(Ok(())) => info!(run_id = %run.run_id, flow = %run.flow, "{reason}"),
            // Released, or another replica applied the policy first.
            Ok(Err(e)) => debug!(run_id = %run.run_id, error = %e, "after_policy: not applied"),
            Err(_) => {}
        }
    }
}
