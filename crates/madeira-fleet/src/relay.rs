//! An attempt's result handed from the replica its sidecar reported to, to the
//! replica that holds its run now, through the store (SPEC §4.1, issue #34).
//!
//! A replica cut off from the store loses its runs to another replica when their
//! leases expire, while its sidecars go on running their attempts and report to
//! it. It cannot commit those results; the replica that took the runs over
//! resumes their attempts and must not place them again while they may still be
//! alive. So:
//!
//! - the old replica does not kill the attempts of runs it lost (the engine
//!   leaves remote attempts running) and, once a result has waited `RELAY_AFTER`
//!   for a commit that never comes, writes it to `shard_results` marked
//!   `relayed:<attempt>:<outcome>` (a failure as its error and exit code) and
//!   only then acknowledges it to the sidecar;
//! - the new holder's resumed dispatch takes a relayed result instead of placing
//!   the attempt (a relayed failure goes through the node's retry policy), and
//!   waits for one (or for a sidecar's claim) at least `sidecar_lost_after`; on a
//!   shared store, while another replica that had sidecars of the attempt's
//!   group is silent (cut off, frozen, or killed) and `RELAY_WINDOW` after it
//!   speaks again, up to when the attempt can no longer be alive: its start plus
//!   its timeout (which the sidecar enforces itself) plus `KILL_GRACE`.
//!
//! A replica stopped cleanly takes its presence rows with it, so a rolling
//! restart waits no longer than before. What this cannot prevent: a replica
//! killed for good while its sidecar's attempt finished and that sidecar never
//! reconnects; the attempt is placed again after its timeout, and the
//! idempotency key (the same for the new placement) is what lets the job see a
//! repeat.

use std::time::{Duration, Instant};

use madeira_engine::Job;
use madeira_proto::v1::{AttemptResult as Reported, Outcome};
use madeira_store::ShardResult;
use tracing::{debug, info, warn};

use crate::Fleet;
use crate::acks::Unacked;

/// After its timeout, how long a sidecar may take to kill an attempt and exit.
const KILL_GRACE: Duration = Duration::from_secs(60);
/// How often a resumed attempt looks for a relayed result.
pub(crate) const RELAY_POLL: Duration = Duration::from_secs(1);
/// A replica whose presence is older than this is silent (it publishes every 2 s).
const SILENT: Duration = Duration::from_secs(6);
/// After a silent replica speaks again, how long its relay is waited for: its
/// sweep relays a result kept `RELAY_AFTER` within a few seconds.
const RELAY_WINDOW: Duration = Duration::from_secs(30);
const PREFIX: &str = "relayed:";

/// The node's idempotency key of a result's (shard) key.
fn node_key(result: &Reported) -> &str {
    let suffix = format!(":s{}", result.shard_index);
    result.idempotency_key.strip_suffix(suffix.as_str()).unwrap_or(&result.idempotency_key)
}

impl Fleet {
    /// Writes `u`'s successful result where the run's holder finds it; true once
    /// it is durable there (already kept counts), so the sidecar may drop it.
    pub(crate) async fn relay(&self, u: &Unacked) -> bool {
        let Some(engine) = self.inner.engine.get() else {
            return false;
        };
        let r = &u.result;
        let key = node_key(r);
        let store = &engine.runs;
        match store.shard_results(&r.run_id, &r.node, key).await {
            Ok(rows) if rows.iter().any(|row| row.shard == r.shard_index) => return true,
            Ok(_) => {}
            Err(e) => {
                debug!(run_id = %r.run_id, error = %e, "cannot read kept results; relaying later");
                return false;
            }
        }
        let row = ShardResult {
            run_id: r.run_id.clone(),
            node: r.node.clone(),
            key: key.to_string(),
            shard: r.shard_index,
            input_hash: format!("{PREFIX}{}:{}", r.attempt, r.outcome),
            outputs: match Outcome::try_from(r.outcome) {
                Ok(Outcome::Success) => r.outputs_json.clone(),
                // A failure: its error, and the exit code the retry policy reads.
                _ => serde_json::json!({"error": r.error, "exit_code": r.exit_code}).to_string(),
            },
            at_ms: madeira_engine::now_ms(),
        };
        match store.put_shard_result(&row).await {
            Ok(()) => {
                info!(
                    run_id = %r.run_id, node = %r.node, attempt = r.attempt, sidecar = %u.sidecar,
                    "result of an attempt whose run this replica no longer commits relayed through the store for its holder"
                );
                true
            }
            Err(e) => {
                warn!(run_id = %r.run_id, node = %r.node, error = %e, "cannot relay a result; kept and tried again");
                false
            }
        }
    }

    /// A result another replica relayed for `job`'s attempt (`shard` of it).
    pub(crate) async fn relayed(&self, job: &Job, shard: u32) -> Option<Reported> {
        let engine = self.inner.engine.get()?;
        let rows = match engine.runs.shard_results(&job.run_id, &job.node, &job.idempotency_key).await {
            Ok(rows) => rows,
            Err(e) => {
                debug!(run_id = %job.run_id, error = %e, "cannot look for a relayed result");
                return None;
            }
        };
        let (row, outcome) = rows.into_iter().find_map(|row| {
            let (attempt, outcome) = row.input_hash.strip_prefix(PREFIX)?.split_once(':')?;
            let (attempt, outcome) = (attempt.parse::<u32>().ok()?, outcome.parse::<i32>().ok()?);
            (row.shard == shard && attempt <= job.attempt).then_some((row, outcome))
        })?;
        info!(run_id = %job.run_id, node = %job.node, shard, outcome, "using the result another replica relayed through the store");
        let mut reported = Reported {
            run_id: job.run_id.clone(),
            node: job.node.clone(),
            attempt: job.attempt,
            idempotency_key: job.idempotency_key.clone(),
            shard_index: shard,
            outcome,
            log_tail: b"[madeira] result relayed by the replica this attempt's sidecar reported to\n"
                .to_vec(),
            ..Default::default()
        };
        if Outcome::try_from(outcome) == Ok(Outcome::Success) {
            reported.outputs_json = row.outputs;
        } else {
            let failure: serde_json::Value = serde_json::from_str(&row.outputs).unwrap_or_default();
            reported.error = failure["error"].as_str().unwrap_or("failed (relayed)").to_string();
            reported.exit_code = failure["exit_code"].as_i64().and_then(|c| i32::try_from(c).ok());
            reported.outputs_json = "{}".into();
        }
        Some(reported)
    }

    /// Where a resumed attempt of `job` stands: when it may be placed anew at the
    /// earliest (`sidecar_lost_after` from now) and at the latest (its start plus
    /// its timeout plus `KILL_GRACE`: it cannot be alive after that).
    pub(crate) async fn resume_watch(&self, job: &Job) -> ResumeWatch {
        let now = Instant::now();
        let started_at = match self.inner.engine.get() {
            Some(engine) => match engine.runs.load_run(&job.run_id).await {
                Ok(Some(stored)) => stored
                    .attempts
                    .iter()
                    .filter(|a| a.node == job.node && a.finished_at.is_none())
                    .map(|a| a.started_at)
                    .chain(stored.nodes.iter().filter(|n| n.node == job.node).filter_map(|n| n.started_at))
                    .max(),
                _ => None,
            },
            None => None,
        };
        // Unknown start: as if it started now (the longest wait).
        let started_at_ms = started_at.unwrap_or_else(madeira_engine::now_ms);
        let alive_until_ms = started_at_ms
            .saturating_add(i64::try_from((job.timeout + KILL_GRACE).as_millis()).unwrap_or(i64::MAX));
        let left = u64::try_from(alive_until_ms.saturating_sub(madeira_engine::now_ms())).unwrap_or(0);
        let earliest = now + self.inner.options.lost_after;
        ResumeWatch {
            started_at_ms,
            earliest,
            latest: earliest.max(now + Duration::from_millis(left)),
            hold_until: earliest,
            suspects: Vec::new(),
        }
    }

    /// Whether the attempt may be placed anew now: past `earliest` on a store of
    /// one replica; on a shared store only when no other replica that had
    /// sidecars of `group` since the attempt started has gone silent (a replica
    /// cut off from the store keeps running its sidecars' attempts and relays
    /// their results when it is back: `RELAY_WINDOW` is left for that after it
    /// speaks again), or at `latest` whatever the others do.
    pub(crate) async fn may_place_anew(&self, watch: &mut ResumeWatch, group: &str) -> bool {
        let now = Instant::now();
        if now < watch.earliest {
            return false;
        }
        if now >= watch.latest {
            return true;
        }
        let Some(engine) = self.inner.engine.get().filter(|_| self.inner.options.shared_store) else {
            return true;
        };
        let since = watch.started_at_ms.saturating_sub(i64::try_from(SILENT.as_millis()).unwrap_or(0));
        let rows = match engine.presence.sidecar_presence(since).await {
            Ok(rows) => rows,
            // The store is out of reach: nothing to decide by; keep waiting.
            Err(_) => return false,
        };
        let silent_before = madeira_engine::now_ms() - i64::try_from(SILENT.as_millis()).unwrap_or(0);
        let suspects: Vec<String> = rows
            .into_iter()
            .filter(|(replica, p, seen_at)| {
                replica != engine.replica_id() && p.group == group && *seen_at < silent_before
            })
            .map(|(replica, _, _)| replica)
            .collect();
        if !suspects.is_empty() {
            if suspects != watch.suspects {
                info!(replicas = %suspects.join(", "), "a replica with sidecars of the resumed attempt's group is silent; not placing the attempt again while it may still run there");
            }
            watch.hold_until = now + RELAY_WINDOW;
        }
        watch.suspects = suspects;
        now >= watch.hold_until
    }
}

/// A resumed attempt's wait (`Fleet::resume_watch`).
pub(crate) struct ResumeWatch {
    started_at_ms: i64,
    earliest: Instant,
    latest: Instant,
    hold_until: Instant,
    suspects: Vec<String>,
}

impl ResumeWatch {
    /// The next moment the answer of `may_place_anew` can change by time alone.
    pub(crate) fn next_decision(&self) -> Instant {
        let now = Instant::now();
        [self.earliest, self.hold_until, self.latest].into_iter().filter(|t| *t > now).min().unwrap_or(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_key_relays_under_its_node_key_and_a_plain_key_as_it_is() {
        let mut r = Reported {
            idempotency_key: "cron:f:2026-12-04:n:s3".into(),
            shard_index: 3,
            ..Default::default()
        };
        assert_eq!(node_key(&r), "cron:f:2026-12-04:n");
        r.shard_index = 0;
        assert_eq!(node_key(&r), "cron:f:2026-12-04:n:s3");
    }
}
