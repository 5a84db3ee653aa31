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
//!   leaves remote attempts running) and, once a successful result has waited
//!   `RELAY_AFTER` for a commit that never comes, writes it to `shard_results`
//!   marked `relayed:<attempt>` and only then acknowledges it to the sidecar;
//! - the new holder's resumed dispatch takes a relayed result instead of placing
//!   the attempt, and on a shared store waits for one (or for a sidecar's claim)
//!   until the attempt can no longer be alive: its start plus its timeout (which
//!   the sidecar enforces itself) plus `KILL_GRACE`, never less than
//!   `sidecar_lost_after`.
//!
//! A failed result is not relayed: after that wait the attempt is placed again,
//! as a retry would run it. What this cannot prevent: a replica cut off for
//! longer than the attempt's timeout that never comes back; the idempotency key
//! (the same for the new placement) is then what lets the job see a repeat.

use std::time::{Duration, Instant};

use madeira_engine::Job;
use madeira_proto::v1::{AttemptResult as Reported, Outcome};
use madeira_store::ShardResult;
use tracing::{debug, info, warn};

use crate::Fleet;
use crate::acks::Unacked;

/// A successful result kept this long without a commit is relayed.
pub(crate) const RELAY_AFTER: Duration = Duration::from_secs(10);
/// After its timeout, how long a sidecar may take to kill an attempt and exit.
const KILL_GRACE: Duration = Duration::from_secs(60);
/// How often a resumed attempt looks for a relayed result.
pub(crate) const RELAY_POLL: Duration = Duration::from_secs(1);
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
        if Outcome::try_from(r.outcome) != Ok(Outcome::Success) {
            return false;
        }
        let key = node_key(r);
        let store = engine.store();
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
            input_hash: format!("{PREFIX}{}", r.attempt),
            outputs: r.outputs_json.clone(),
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
        let rows = match engine.store().shard_results(&job.run_id, &job.node, &job.idempotency_key).await {
            Ok(rows) => rows,
            Err(e) => {
                debug!(run_id = %job.run_id, error = %e, "cannot look for a relayed result");
                return None;
            }
        };
        let row = rows.into_iter().find(|row| {
            row.shard == shard
                && row
                    .input_hash
                    .strip_prefix(PREFIX)
                    .and_then(|a| a.parse::<u32>().ok())
                    .is_some_and(|attempt| attempt <= job.attempt)
        })?;
        info!(run_id = %job.run_id, node = %job.node, shard, "using the result another replica relayed through the store");
        Some(Reported {
            run_id: job.run_id.clone(),
            node: job.node.clone(),
            attempt: job.attempt,
            idempotency_key: job.idempotency_key.clone(),
            shard_index: shard,
            outcome: Outcome::Success as i32,
            outputs_json: row.outputs,
            log_tail: b"[madeira] result relayed by the replica this attempt's sidecar reported to\n".to_vec(),
            ..Default::default()
        })
    }

    /// Until when a resumed attempt may still be alive on a sidecar this replica
    /// does not see: `sidecar_lost_after` from now on a store of one replica; on a
    /// shared store also until its start plus its timeout plus `KILL_GRACE`.
    pub(crate) async fn resume_deadline(&self, job: &Job) -> Instant {
        let lost_after = Instant::now() + self.inner.options.lost_after;
        let Some(engine) = self.inner.engine.get().filter(|_| self.inner.options.shared_store) else {
            return lost_after;
        };
        let started_at = match engine.store().load_run(&job.run_id).await {
            Ok(Some(stored)) => stored
                .attempts
                .iter()
                .filter(|a| a.node == job.node && a.finished_at.is_none())
                .map(|a| a.started_at)
                .chain(stored.nodes.iter().filter(|n| n.node == job.node).filter_map(|n| n.started_at))
                .max(),
            _ => None,
        };
        // Unknown start: as if it started now (the longest wait).
        let started_at = started_at.unwrap_or_else(madeira_engine::now_ms);
        let alive_until_ms = started_at
            .saturating_add(i64::try_from((job.timeout + KILL_GRACE).as_millis()).unwrap_or(i64::MAX));
        let left = u64::try_from(alive_until_ms.saturating_sub(madeira_engine::now_ms())).unwrap_or(0);
        lost_after.max(Instant::now() + Duration::from_millis(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_key_relays_under_its_node_key_and_a_plain_key_as_it_is() {
        let mut r = Reported { idempotency_key: "cron:f:2026-12-04:n:s3".into(), shard_index: 3, ..Default::default() };
        assert_eq!(node_key(&r), "cron:f:2026-12-04:n");
        r.shard_index = 0;
        assert_eq!(node_key(&r), "cron:f:2026-12-04:n:s3");
    }
}
