//! A fenced group commit that costs only the runs really lost. When the store
//! refuses a batch because this replica no longer holds some of its runs
//! (`StoreError::LeaseLost`, which names them), those runs are dropped from the
//! batch and from memory (their attempts here stopped: another replica resumes
//! them) and the rest is committed again: the other runs' attempts, already
//! running on sidecars, are neither reloaded nor placed anew. A replica that may
//! have lost runs while it could not renew (frozen, cut off) checks every run it
//! has in memory (`Envelope::CheckHeld`) and drops those another replica holds.

use std::collections::HashSet;

use madeira_store::{Claim, StoreError};
use tracing::{debug, warn};

use super::Engine;
use crate::EngineError;
use crate::record::Work;

/// Commits tried per batch: each refusal removes at least one run.
const TRIES: usize = 4;

impl Engine {
    /// Commits `work`, leaving out (and forgetting) the runs the store says this
    /// replica no longer holds. An error is a refusal of the whole batch.
    pub(super) async fn commit_held(&mut self, work: &mut Work) -> Result<(), StoreError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.store.commit(&work.batch).await {
                Err(StoreError::LeaseLost { owner, runs }) if tries < TRIES && !runs.is_empty() => {
                    warn!(
                        runs = %runs.join(", "),
                        "another replica holds these runs now; they are dropped here and the rest of the group commit is committed without them"
                    );
                    let lost: HashSet<String> = runs.into_iter().collect();
                    let why = format!("not saved: replica {owner} no longer holds the run");
                    self.forget_lost(&lost, work, &why);
                    // Alert events are derived from what is left of the batch.
                    work.batch.alert_events.clear();
                    if self.options.shared_store {
                        self.outbox(work);
                    }
                }
                other => return other,
            }
        }
    }

    /// Claims every run in memory again and forgets those another replica holds now.
    pub(super) async fn check_held(&mut self) {
        let ids: Vec<String> = self.step.runs.keys().cloned().collect();
        let mut lost = HashSet::new();
        for run_id in ids {
            match self.store.claim_run(&run_id, &self.holder.lease_now(), false).await {
                Ok(Claim::Held) => {}
                Ok(Claim::Other { owner }) => {
                    warn!(run_id = %run_id, owner = %owner, "another replica took this run over; dropped here");
                    lost.insert(run_id);
                }
                Ok(Claim::Missing) => {
                    lost.insert(run_id);
                }
                // Unknown: the next commit's fence decides.
                Err(e) => debug!(run_id = %run_id, error = %e, "cannot check a run's lease"),
            }
        }
        if !lost.is_empty() {
            self.forget_lost(&lost, &mut Work::default(), "");
        }
    }

    /// Drops `lost` runs from `work` (answering their callers with `why`) and from
    /// memory, stopping their attempts here.
    fn forget_lost(&mut self, lost: &HashSet<String>, work: &mut Work, why: &str) {
        for (reply, _, _) in work.drop_runs(lost) {
            let e = StoreError::Refused(why.to_string());
            let _ = reply.send(Err(EngineError::Store(e)));
        }
        let runs: Vec<String> = lost.iter().cloned().collect();
        self.lost(&runs);
        for run_id in &runs {
            self.forget(run_id);
        }
        self.effects.resumed.retain(|(run, _)| !lost.contains(run));
    }
}

impl Work {
    /// Removes every row, action, event and answer of `lost` runs; returns their
    /// callers' replies.
    pub(crate) fn drop_runs(
        &mut self,
        lost: &HashSet<String>,
    ) -> Vec<(crate::envelope::Reply, Result<(), EngineError>, String)> {
        let kept = |run_id: &String| !lost.contains(run_id);
        let b = &mut self.batch;
        b.runs.retain(|r| kept(&r.run_id));
        b.nodes.retain(|r| kept(&r.run_id));
        b.transitions.retain(|r| kept(&r.run_id));
        b.outputs.retain(|r| kept(&r.run_id));
        b.attempts.retain(|r| kept(&r.run_id));
        b.attempt_hosts.retain(|r| kept(&r.run_id));
        b.audit.retain(|r| r.run_id.as_ref().is_none_or(kept));
        b.logs.retain(|r| kept(&r.run_id));
        b.permit_releases.retain(|r| kept(&r.run_id));
        let answered: HashSet<i64> =
            self.answered.iter().filter(|(_, run)| !kept(run)).map(|(id, _)| *id).collect();
        b.answers.retain(|a| !answered.contains(&a.id));
        self.dirty.retain(|(run, _)| kept(run));
        self.events.retain(|e| kept(&e.run_id));
        self.actions.retain(|(run, _)| kept(run));
        self.finished.retain(|f| kept(&f.run_id));
        self.resumed.retain(kept);
        self.overdue.retain(|(run, _)| kept(run));
        self.ready_at.retain(|(run, _), _| kept(run));
        let (gone, replies) =
            std::mem::take(&mut self.replies).into_iter().partition(|(_, _, run)| !kept(run));
        self.replies = replies;
        gone
    }
}

#[cfg(test)]
mod tests {
    use madeira_core::{Action, RunState};
    use madeira_store::{CommandAnswer, LogRecord, RunWrite};

    use super::*;

    #[test]
    fn a_lost_run_leaves_nothing_of_itself_in_the_batch_and_the_others_stay_whole() {
        let mut work = Work::default();
        let mut answers = Vec::new();
        for (id, run) in [(1, "kept"), (2, "lost")] {
            let write = RunWrite {
                run_id: run.into(),
                state: RunState::Running,
                started_at: None,
                finished_at: None,
            };
            work.batch.runs.push(write);
            let log = LogRecord { run_id: run.into(), node: "n".into(), attempt: 1, content: "x".into() };
            work.batch.logs.push(log);
            work.batch.answers.push(CommandAnswer { id, answer: "{}".into(), at: 1 });
            work.answered.push((id, run.into()));
            work.actions.push((run.into(), Action::Ready { node: 0 }));
            let (tx, rx) = tokio::sync::oneshot::channel();
            work.replies.push((tx, Ok(()), run.into()));
            answers.push(rx);
        }
        let lost: HashSet<String> = HashSet::from(["lost".to_string()]);
        let gone = work.drop_runs(&lost);
        assert_eq!(gone.iter().map(|(_, _, run)| run.as_str()).collect::<Vec<_>>(), ["lost"]);
        assert_eq!(work.batch.runs.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["kept"]);
        assert_eq!(work.batch.logs.iter().map(|r| r.run_id.as_str()).collect::<Vec<_>>(), ["kept"]);
        assert_eq!(
            work.batch.answers.iter().map(|a| a.id).collect::<Vec<_>>(),
            [1],
            "the lost run's answer goes"
        );
        assert_eq!(work.actions.iter().map(|(r, _)| r.as_str()).collect::<Vec<_>>(), ["kept"]);
        assert_eq!(work.replies.iter().map(|(_, _, r)| r.as_str()).collect::<Vec<_>>(), ["kept"]);
    }
}
