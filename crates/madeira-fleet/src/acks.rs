//! Acknowledging a result only after the engine's commit that records it. A
//! result taken from a sidecar is kept here (`State::unacked`, by idempotency key
//! and shard) until the engine commits the end of its attempt: the engine
//! broadcasts that transition (from RUNNING to another state, not a recovery:
//! `ends_attempt`) after the commit, and this task then sends the `Ack` to the sidecar, which only then removes the result from
//! its spool. Until then:
//!
//! - a commit that fails (the store refuses or is unreachable) makes the engine
//!   resume the run from the store and start the attempt again (same
//!   idempotency key); that resumed dispatch takes the kept result instead of
//!   running the job again (`take_kept`);
//! - a control plane that stops or crashes leaves the result in the sidecar's
//!   spool, delivered to the next start;
//! - the same report delivered again is not acknowledged early.
//!
//! A commit this replica's broadcast did not show (missed events, a cancel that
//! ended the attempt before its result came) is found by `sweep_store`: results
//! kept longer than `RECHECK_AFTER` are checked against the stored node.

use std::time::{Duration, Instant};

use madeira_core::state::{Cause, NodeState};
use madeira_engine::RunEvent;
use madeira_proto::ControlMsg;
use madeira_proto::v1::{Ack, AttemptResult};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::Fleet;

/// A result kept this long without a commit is relayed (`crate::relay`).
pub(crate) const RELAY_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// A result kept past this is checked against the store on the next sweep.
pub(crate) const RECHECK_AFTER: Duration = Duration::from_secs(5);
/// Results checked against the store per sweep.
const RECHECK_MAX: usize = 256;

/// A result taken but not yet acknowledged.
pub(crate) struct Unacked {
    pub report_id: String,
    pub sidecar: String,
    pub result: AttemptResult,
    pub since: Instant,
}

impl Fleet {
    /// Sends `Ack`s for kept results whose attempts the engine has committed,
    /// until `cancel`. Without an engine attached results are acknowledged when
    /// taken (`service::handle`).
    pub(crate) async fn acknowledge_commits(self, cancel: CancellationToken) {
        let Some(engine) = self.inner.engine.get().cloned() else {
            return;
        };
        let mut events = engine.subscribe();
        loop {
            let event = tokio::select! {
                _ = cancel.cancelled() => return,
                event = events.recv() => event,
            };
            match event {
                Ok(e) => self.committed_event(&e).await,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    debug!(missed = n, "engine events missed; checking kept results against the store");
                    self.sweep_store(Duration::ZERO).await;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    async fn committed_event(&self, e: &RunEvent) {
        let Some(node) = e.node.as_deref() else {
            return;
        };
        if !ends_attempt(e) {
            return;
        }
        let done = self.take_unacked(|u| {
            u.result.run_id == e.run_id && u.result.node == node && u.result.attempt <= e.attempt
        });
        self.send_acks(done).await;
    }

    /// Acknowledges kept results older than `age` whose attempt the store shows
    /// ended: that attempt has an outcome, or the node is neither RUNNING nor INIT
    /// (INIT after a recovery: the resumed dispatch still needs the kept result).
    pub(crate) async fn sweep_store(&self, age: Duration) {
        let Some(engine) = self.inner.engine.get().cloned() else {
            return;
        };
        let old: Vec<(String, String, u32)> = {
            let state = self.state();
            let mut old: Vec<_> = state
                .unacked
                .values()
                .filter(|u| u.since.elapsed() >= age)
                .map(|u| (u.result.run_id.clone(), u.result.node.clone(), u.result.attempt))
                .collect();
            old.sort();
            old.dedup();
            old.truncate(RECHECK_MAX);
            old
        };
        for (run_id, node, attempt) in old {
            let ended = match engine.runs.load_run(&run_id).await {
                Ok(Some(stored)) => {
                    let recorded = stored
                        .attempts
                        .iter()
                        .any(|a| a.node == node && a.attempt == attempt && a.outcome.is_some());
                    recorded
                        || stored
                            .nodes
                            .iter()
                            .find(|n| n.node == node)
                            .is_none_or(|n| !matches!(n.state, NodeState::Running | NodeState::Init))
                }
                // A run that is gone will record nothing.
                Ok(None) => true,
                Err(e) => {
                    debug!(run_id = %run_id, error = %e, "cannot check a kept result against the store");
                    false
                }
            };
            if ended {
                let done = self.take_unacked(|u| {
                    u.result.run_id == run_id && u.result.node == node && u.result.attempt == attempt
                });
                self.send_acks(done).await;
            } else {
                self.relay_waiting(&run_id, &node, attempt).await;
            }
        }
    }

    /// Relays (`relay`) the results of an attempt whose end has waited past
    /// `RELAY_AFTER` for a commit (this replica lost its run, or cannot write),
    /// acknowledging each once it is durable in the store.
    async fn relay_waiting(&self, run_id: &str, node: &str, attempt: u32) {
        let waiting: Vec<((String, u32), Unacked)> = {
            let state = self.state();
            state
                .unacked
                .iter()
                .filter(|(_, u)| {
                    u.result.run_id == run_id
                        && u.result.node == node
                        && u.result.attempt == attempt
                        && u.since.elapsed() >= RELAY_AFTER
                })
                .map(|(k, u)| {
                    let copy = Unacked {
                        report_id: u.report_id.clone(),
                        sidecar: u.sidecar.clone(),
                        result: u.result.clone(),
                        since: u.since,
                    };
                    (k.clone(), copy)
                })
                .collect()
        };
        for (key, u) in waiting {
            if self.relay(&u).await {
                let taken = self.state().unacked.remove(&key);
                self.send_acks(taken.into_iter().collect()).await;
            }
        }
    }

    fn take_unacked(&self, matches: impl Fn(&Unacked) -> bool) -> Vec<Unacked> {
        let mut state = self.state();
        let keys: Vec<(String, u32)> =
            state.unacked.iter().filter(|(_, u)| matches(u)).map(|(k, _)| k.clone()).collect();
        keys.into_iter().filter_map(|k| state.unacked.remove(&k)).collect()
    }

    /// Sends each `Ack` on its sidecar's current connection; a sidecar that is
    /// not connected delivers the report again on its return and is acknowledged
    /// then (its report id was seen and nothing is kept for it any more).
    pub(crate) async fn send_acks(&self, done: Vec<Unacked>) {
        for u in done {
            let tx = self.state().sidecars.get(&u.sidecar).and_then(|s| s.tx.clone());
            debug!(sidecar = %u.sidecar, report = %u.report_id, "result committed; acknowledged");
            if let Some(tx) = tx {
                let ack = ControlMsg::Ack(Ack { report_id: u.report_id, refused: String::new() });
                if tx.send(Ok(madeira_proto::ControlMessage { msg: Some(ack) })).await.is_err() {
                    warn!(sidecar = %u.sidecar, "sidecar gone before its result was acknowledged; it delivers it again");
                }
            }
        }
    }

    /// A result a sidecar delivered while nobody waited for it (the inbox: a
    /// spooled report after a control-plane restart), taken by `job`'s dispatch
    /// only when `job` resumes that node's attempt (the engine numbers a resumed
    /// attempt anew, so the report may name a lower one). Any other dispatch under
    /// the same key is a later attempt whose predecessor's end is committed: the
    /// late report of that predecessor is dropped here, never applied to it.
    pub(crate) fn take_delivered(
        &self,
        key: &(String, u32),
        job: &madeira_engine::Job,
    ) -> Option<AttemptResult> {
        let (result, _) = self.state().inbox.remove(key)?;
        if job.resumed
            && result.run_id == job.run_id
            && result.node == job.node
            && result.attempt <= job.attempt
        {
            return Some(result);
        }
        warn!(
            run_id = %job.run_id, node = %job.node, attempt = job.attempt, reported_attempt = result.attempt,
            report = %result.report_id, "a late result of an earlier attempt dropped; the attempt runs"
        );
        None
    }

    /// The result kept for `job`'s attempt when `job` resumes it (its end was not
    /// committed: the commit failed and the engine resumed the run from the store,
    /// which starts the attempt again under the same idempotency key), to use
    /// instead of running the job again.
    pub(crate) fn take_kept(&self, key: &(String, u32), job: &madeira_engine::Job) -> Option<AttemptResult> {
        if !job.resumed {
            return None;
        }
        let state = self.state();
        state
            .unacked
            .get(key)
            .filter(|u| {
                u.result.run_id == job.run_id && u.result.node == job.node && u.result.attempt <= job.attempt
            })
            .map(|u| u.result.clone())
    }
}

/// Whether a committed transition ends the attempt it leaves: one from RUNNING
/// that is not a recovery. A recovery (RUNNING → INIT, cause `recovered`, when a
/// failed commit or a restart resumes the run from the store) starts the same
/// attempt again under its idempotency key, and that resumed dispatch takes the
/// kept result (`take_kept`): acknowledging it here would drop it from the
/// sidecar's spool before its end is committed, and the resumed dispatch, finding
/// nothing kept, would wait for a claim that never comes.
fn ends_attempt(e: &RunEvent) -> bool {
    e.from == NodeState::Running.as_str()
        && e.to != NodeState::Running.as_str()
        && e.cause != Cause::Recovered.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(from: NodeState, to: NodeState, cause: Cause) -> RunEvent {
        RunEvent {
            run_id: "r".into(),
            flow: "f".into(),
            node: Some("n".into()),
            from: from.as_str().into(),
            to: to.as_str().into(),
            cause: cause.as_str().into(),
            attempt: 1,
            reason: None,
            at_ms: 0,
        }
    }

    #[test]
    fn a_recovery_does_not_end_the_attempt_but_its_real_ends_do() {
        use NodeState as S;
        assert!(!ends_attempt(&event(S::Running, S::Init, Cause::Recovered)));
        assert!(!ends_attempt(&event(S::Init, S::Running, Cause::Dispatch)));
        assert!(ends_attempt(&event(S::Running, S::Success, Cause::Succeeded)));
        assert!(ends_attempt(&event(S::Running, S::Failed, Cause::AttemptFailed)));
        assert!(ends_attempt(&event(S::Running, S::Retrying, Cause::RetryScheduled)));
        assert!(ends_attempt(&event(S::Running, S::Failed, Cause::RunCancelled)));
    }

    fn job(attempt: u32, resumed: bool) -> madeira_engine::Job {
        madeira_engine::Job {
            run_id: "r".into(),
            flow: "f".into(),
            node: "n".into(),
            attempt,
            idempotency_key: "r:n".into(),
            executor: madeira_core::ExecutorDef::Builtin(madeira_core::model::BuiltinDef {
                kind: madeira_core::model::BuiltinKind::Noop,
                outputs: Default::default(),
            }),
            no_retry_exit_codes: Vec::new(),
            input: serde_json::json!({}),
            timeout: Duration::from_secs(1),
            traceparent: None,
            resumed,
        }
    }

    #[test]
    fn a_delivered_result_is_taken_only_by_the_dispatch_that_resumes_its_attempt() {
        let mut registry = prometheus_client::registry::Registry::default();
        let fleet = Fleet::new(crate::FleetOptions::with_lost_after(Duration::from_secs(20)), &mut registry);
        let key = ("r:n".to_string(), 0);
        let deliver = |attempt: u32| {
            let result = AttemptResult {
                report_id: format!("rep-{attempt}"),
                run_id: "r".into(),
                node: "n".into(),
                attempt,
                idempotency_key: "r:n".into(),
                ..Default::default()
            };
            fleet.state().inbox.insert(key.clone(), (result, Instant::now()));
        };
        // Attempt 1's report came late, after its end was committed: attempt 2
        // (a retry, not a resumption) runs instead of taking it, and it is gone.
        deliver(1);
        assert_eq!(fleet.take_delivered(&key, &job(2, false)), None);
        assert!(fleet.state().inbox.is_empty(), "the stale report is dropped");
        // After a restart the resumed dispatch (numbered anew) takes its attempt's report.
        deliver(1);
        let taken = fleet.take_delivered(&key, &job(2, true)).expect("the resumed attempt takes it");
        assert_eq!(taken.report_id, "rep-1");
        // Never a report of a later attempt, nor another node's.
        deliver(3);
        assert_eq!(fleet.take_delivered(&key, &job(2, true)), None);
        deliver(1);
        assert_eq!(
            fleet.take_delivered(&key, &madeira_engine::Job { node: "m".into(), ..job(2, true) }),
            None
        );
    }
}
