//! Graceful shutdown of the engine loop (SPEC §4.1, "Shutdown"). While draining no
//! node is dispatched and no timer fires, but results still arrive and are
//! committed, so in-process attempts (http, builtin) can finish within the
//! server's `shutdown_grace`. Sidecar attempts are never cancelled: their sidecars
//! keep running them, spool the results and deliver them to the next control
//! plane, whose recovery adopts the attempt (or takes the delivered result). At
//! the stop, results already queued are committed; in-process attempts still
//! running are cancelled and their aborts discarded, so recovery retries them.
//! The stop waits 5 s for the cancelled attempts to end, plus the longest `grace`
//! of a SQL attempt among them: its cancel is only over once the database shows
//! its session gone (killed after `grace`).

use std::time::Duration;

use madeira_core::{ExecutorDef, NodeAction};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::Engine;

/// How long the stop waits for cancelled in-process attempts to end (more for SQL).
const STOP_WAIT: Duration = Duration::from_secs(5);

/// An attempt in flight.
pub(crate) struct Running {
    pub token: CancellationToken,
    /// Runs in this process (http, builtin); false for a sidecar attempt.
    pub in_process: bool,
    pub attempt: u32,
    /// The attempt the task was started for (its `AttemptDone` names it): less
    /// than `attempt` when a resumed run's new attempt adopted the task still
    /// running here instead of placing the job again.
    pub task_attempt: u32,
    /// Sidecars the attempt was placed on so far (`hosts.rs`).
    pub hosts: Vec<String>,
}

impl Engine {
    /// Stops starting attempts and arming timers; results are still committed.
    pub(super) fn start_drain(&mut self) {
        if self.step.draining {
            return;
        }
        self.step.draining = true;
        let in_process = self.effects.running.values().filter(|r| r.in_process).count();
        let sidecar = self.effects.running.len() - in_process;
        info!(
            in_process,
            sidecar, "draining: no new attempts; sidecar attempts are left running for recovery"
        );
    }

    /// Publishes how many in-process attempts run (what a graceful shutdown waits for).
    pub(super) fn publish_in_process(&self) {
        self.effects.stats.set_in_process(self.effects.running.values().filter(|r| r.in_process).count());
    }

    /// After the loop: takes no more envelopes, commits the results already queued,
    /// cancels the in-process attempts left and waits briefly for them to stop.
    pub(super) async fn stop(&mut self) {
        self.step.draining = true;
        let results = self.intake.close();
        if !results.is_empty() || !self.effects.hosts.is_empty() {
            // Placements still waiting for a commit ride in this one.
            self.process(results).await;
        }
        let mut aborted = 0;
        let mut settle = Duration::ZERO;
        for ((run_id, node), running) in self.effects.running.iter().filter(|(_, r)| r.in_process) {
            running.token.cancel();
            aborted += 1;
            settle = settle.max(self.sql_grace(run_id, *node).unwrap_or_default());
        }
        let left = self.effects.running.len() - aborted;
        if aborted > 0 || left > 0 {
            info!(
                aborted,
                sidecar = left,
                "engine stopping: in-process attempts aborted, sidecar attempts left to their sidecars"
            );
        }
        self.effects.tasks.close();
        let _ = tokio::time::timeout(STOP_WAIT + settle, self.effects.tasks.wait()).await;
    }

    /// The `grace` of node `node` of run `run_id` when it runs SQL (itself or as
    /// a manual node's fallback).
    fn sql_grace(&self, run_id: &str, node: usize) -> Option<Duration> {
        let def = self.step.runs.get(run_id)?.flow.nodes.get(node)?;
        let exec = match &def.action {
            NodeAction::Run(exec) => Some(exec),
            NodeAction::Manual(manual) => manual.fallback.as_ref(),
        };
        match exec? {
            ExecutorDef::Sql(sql) => Some(sql.grace),
            _ => None,
        }
    }
}
