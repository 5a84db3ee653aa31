//! Run ownership by lease, shared by every backend: who may plan, commit and
//! dispatch for a run when several replicas share one store.

/// A replica's claim: `owner` holds what it claims for `until_ms - now_ms`
/// (the lease's length), measured by the database's clock: the store writes
/// `lease_until` as the database's now plus that length and judges expiry by the
/// database's now too, so a replica's own clock (`now_ms`, however skewed) never
/// decides who holds a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    pub now_ms: i64,
    pub until_ms: i64,
}

impl Lease {
    /// How long the lease lasts without renewal (negative: already lapsed).
    pub fn length_ms(&self) -> i64 {
        self.until_ms.saturating_sub(self.now_ms)
    }
}

/// The answer to `Store::claim_run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This replica holds the run now.
    Held,
    /// Another replica holds it (and, when stealing idle runs, has attempts in flight).
    Other {
        owner: String,
    },
    Missing,
}

/// Grace before a RUNNING run that nobody claimed yet (its creator died between
/// creating and claiming it) may be taken by another replica.
pub const UNCLAIMED_GRACE_MS: i64 = 2_000;

/// Whether `owner`'s hold on a run (with `lease_until`) lets `lease.owner` take
/// it at the database's time `db_now_ms`.
pub(crate) fn claimable(
    owner: Option<&str>,
    lease_until: Option<i64>,
    lease: &Lease,
    db_now_ms: i64,
) -> bool {
    match owner {
        None => true,
        Some(o) if o == lease.owner => true,
        Some(_) => lease_until.is_none_or(|until| until < db_now_ms),
    }
}

/// The distinct run ids a batch writes to, sorted (rows are locked in this order).
pub(crate) fn touched_runs(batch: &crate::Batch) -> Vec<String> {
    let mut ids: Vec<String> = batch
        .runs
        .iter()
        .map(|r| r.run_id.clone())
        .chain(batch.nodes.iter().map(|n| n.run_id.clone()))
        .chain(batch.transitions.iter().map(|t| t.run_id.clone()))
        .chain(batch.attempts.iter().map(|a| a.run_id.clone()))
        .chain(batch.attempt_hosts.iter().map(|a| a.run_id.clone()))
        .chain(batch.outputs.iter().map(|o| o.run_id.clone()))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The fencing check of a commit: every touched run must be held by `owner`.
pub(crate) fn check_fence(owner: &str, rows: &[(String, Option<String>)]) -> crate::Result<()> {
    let lost: Vec<String> =
        rows.iter().filter(|(_, o)| o.as_deref() != Some(owner)).map(|(id, _)| id.clone()).collect();
    if lost.is_empty() {
        Ok(())
    } else {
        Err(crate::StoreError::LeaseLost { owner: owner.to_string(), runs: lost })
    }
}
