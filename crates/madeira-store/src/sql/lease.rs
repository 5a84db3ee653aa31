//! Run ownership by lease: claims lock the rows they read and skip rows another
//! replica is claiming (`D::FOR_UPDATE`, `D::SKIP_LOCKED`; SQLite's one writer
//! needs neither), so each run is taken by one replica only; commits lock the rows
//! they touch and check the owner (the fence). Every lease is written and judged
//! by the database's clock (`Dialect::NOW_MS`), never a replica's: a replica whose
//! clock is skewed neither takes live runs nor keeps dead ones.

use sqlx::QueryBuilder;

use super::{CHUNK, D, Db, Pool, Tx, push_list, sql};
use crate::admission::{ACTIVE, UNFINISHED};
use crate::dialect::{Dialect, Val};
use crate::lease::{UNCLAIMED_GRACE_MS, check_fence, claimable};
use crate::{Claim, Lease, Result};

/// A run's row as a claim reads it: owner, lease, state, the database's now, folded.
type ClaimRow = (Option<String>, Option<i64>, String, i64, bool);

pub(super) async fn claim_run(
    pool: &Pool,
    run_id: &str,
    lease: &Lease,
    steal_idle: bool,
    only_from: Option<&str>,
) -> Result<Claim> {
    let mut tx = pool.begin().await?;
    let row: Option<ClaimRow> = sqlx::query_as(&sql(&format!(
        "SELECT owner, lease_until, state, {}, folded FROM runs WHERE id = $1{}",
        D::NOW_MS,
        D::FOR_UPDATE
    )))
    .bind(run_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((owner, lease_until, state, db_now, folded)) = row else {
        return Ok(Claim::Missing);
    };
    if let Some(from) = only_from
        && owner.as_deref() != Some(from)
        && owner.as_deref() != Some(lease.owner.as_str())
    {
        return Ok(Claim::Other { owner: owner.unwrap_or_default() });
    }
    // A finished run keeps the owner that finished it: the engine's own work
    // (a resume, a late result, a timer) never takes it; only a person's action
    // (`steal_idle`) may reopen it.
    let finished = !matches!(state.as_str(), "QUEUED" | "ADMITTED" | "RUNNING");
    if finished
        && !steal_idle
        && let Some(holder) = owner.as_deref().filter(|o| *o != lease.owner)
    {
        return Ok(Claim::Other { owner: holder.to_string() });
    }
    if !claimable(owner.as_deref(), lease_until, lease, db_now) {
        // A fresh statement: it sees whatever the holder committed before our lock.
        let busy: (bool,) = sqlx::query_as(&sql(
            "SELECT EXISTS (SELECT 1 FROM nodes WHERE run_id = $1 AND state = 'RUNNING')",
        ))
        .bind(run_id)
        .fetch_one(&mut *tx)
        .await?;
        if !steal_idle || busy.0 {
            return Ok(Claim::Other { owner: owner.unwrap_or_default() });
        }
    }
    if folded {
        // Held from here on, its rows back: the archiver leaves a held run alone,
        // and the claimant's commits find the rows they update.
        super::archive::unfold(&mut tx, run_id).await?;
    }
    sqlx::query(&sql(&format!("UPDATE runs SET owner = $1, lease_until = {} + $2 WHERE id = $3", D::NOW_MS)))
        .bind(&lease.owner)
        .bind(lease.length_ms())
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Claim::Held)
}

pub(super) async fn adopt_run(pool: &Pool, run_id: &str, from: &str, lease: &Lease) -> Result<Claim> {
    claim_run(pool, run_id, lease, true, Some(from)).await
}

/// The expired runs (RUNNING, or admitted to start and not started yet) are
/// selected and locked (skipping rows another replica is claiming), then taken,
/// in one transaction.
pub(super) async fn claim_expired(pool: &Pool, lease: &Lease, limit: u32) -> Result<Vec<String>> {
    let mut tx = pool.begin().await?;
    let rows: Vec<(String,)> = sqlx::query_as(&sql(&format!(
        "SELECT id FROM runs WHERE {ACTIVE} AND {} \
           AND COALESCE(lease_until, COALESCE(started_at, admitted_at, created_at) + $2) < {} \
         ORDER BY id LIMIT $3{}",
        D::is_distinct("owner", "$1"),
        D::NOW_MS,
        D::SKIP_LOCKED
    )))
    .bind(&lease.owner)
    .bind(UNCLAIMED_GRACE_MS)
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    let mut ids: Vec<String> = rows.into_iter().map(|(id,)| id).collect();
    ids.sort();
    for chunk in ids.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new("UPDATE runs SET owner = ");
        q.push_bind(&lease.owner).push(format!(", lease_until = {} + ", D::NOW_MS));
        q.push_bind(lease.length_ms()).push(" WHERE id IN ");
        push_list(&mut q, chunk);
        q.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(ids)
}

pub(super) async fn renew_leases(pool: &Pool, lease: &Lease) -> Result<u64> {
    let done = sqlx::query(&sql(&format!(
        "UPDATE runs SET lease_until = {} + $1 WHERE owner = $2 AND state IN {UNFINISHED}",
        D::NOW_MS
    )))
    .bind(lease.length_ms())
    .bind(&lease.owner)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// The fence as statements of a script (`commit_script`; SQLite, whose one writer
/// needs no row locks): each fails on the key of `transition_seq`'s one row when
/// a touched run is not held by `owner`, failing the script's transaction.
pub(super) async fn fence_statements<'a>(
    c: &mut super::To,
    s: &mut super::Script<'a>,
    owner: &'a str,
    runs: &'a [String],
) -> Result<()> {
    for chunk in runs.chunks(CHUNK) {
        let mut values: Vec<Val<'a>> = chunk.iter().map(|id| Val::text(id)).collect();
        values.push(Val::text(owner));
        s.one(c, values, |q, v| {
            q.push(
                "INSERT INTO transition_seq (id, seq) SELECT 1, 0 WHERE EXISTS (SELECT 1 FROM runs WHERE id IN (",
            );
            let (owner, ids) = v.split_last().expect("the owner is last");
            let mut list = q.separated(", ");
            for id in ids {
                super::bind_separated(&mut list, id.clone());
            }
            q.push(") AND (owner IS NULL OR owner <> ");
            super::bind(q, owner).push("))");
        })
        .await?;
    }
    Ok(())
}

/// Locks the touched runs' rows (in id order) and checks `owner` holds them all.
pub(super) async fn fence(tx: &mut Tx<'_>, owner: &str, runs: &[String]) -> Result<()> {
    let mut sorted: Vec<&String> = runs.iter().collect();
    sorted.sort_unstable();
    for chunk in sorted.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new("SELECT id, owner FROM runs WHERE id IN ");
        push_list(&mut q, chunk.iter().copied());
        q.push(" ORDER BY id").push(D::FOR_UPDATE);
        let rows: Vec<(String, Option<String>)> = q.build_query_as().fetch_all(&mut **tx).await?;
        check_fence(owner, &rows)?;
    }
    Ok(())
}
