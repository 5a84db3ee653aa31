//! Run ownership by lease, with the same rules as on PostgreSQL. The single
//! writer connection serialises claims and commits, so no row locks are needed.

use sqlx::{QueryBuilder, Sqlite, SqlitePool, Transaction};

use crate::lease::{UNCLAIMED_GRACE_MS, check_fence, claimable};
use crate::{Claim, Lease, Result};

pub(super) async fn claim_run(
    pool: &SqlitePool,
    run_id: &str,
    lease: &Lease,
    steal_idle: bool,
    only_from: Option<&str>,
) -> Result<Claim> {
    let mut tx = pool.begin().await?;
    let row: Option<(Option<String>, Option<i64>)> =
        sqlx::query_as("SELECT owner, lease_until FROM runs WHERE id = ?")
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((owner, lease_until)) = row else {
        return Ok(Claim::Missing);
    };
    if let Some(from) = only_from
        && owner.as_deref() != Some(from)
        && owner.as_deref() != Some(lease.owner.as_str())
    {
        return Ok(Claim::Other { owner: owner.unwrap_or_default() });
    }
    if !claimable(owner.as_deref(), lease_until, lease) {
        let (busy,): (bool,) =
            sqlx::query_as("SELECT EXISTS (SELECT 1 FROM nodes WHERE run_id = ? AND state = 'RUNNING')")
                .bind(run_id)
                .fetch_one(&mut *tx)
                .await?;
        if !steal_idle || busy {
            return Ok(Claim::Other { owner: owner.unwrap_or_default() });
        }
    }
    sqlx::query("UPDATE runs SET owner = ?, lease_until = ? WHERE id = ?")
        .bind(&lease.owner)
        .bind(lease.until_ms)
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Claim::Held)
}

pub(super) async fn claim_expired(pool: &SqlitePool, lease: &Lease, limit: u32) -> Result<Vec<String>> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "UPDATE runs SET owner = ?1, lease_until = ?2 WHERE id IN ( \
           SELECT id FROM runs WHERE state = 'RUNNING' AND owner IS NOT ?1 \
             AND COALESCE(lease_until, COALESCE(started_at, created_at) + ?3) < ?4 \
           ORDER BY id LIMIT ?5) \
         RETURNING id",
    )
    .bind(&lease.owner)
    .bind(lease.until_ms)
    .bind(UNCLAIMED_GRACE_MS)
    .bind(lease.now_ms)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    let mut ids: Vec<String> = rows.into_iter().map(|(id,)| id).collect();
    ids.sort();
    Ok(ids)
}

pub(super) async fn renew_leases(pool: &SqlitePool, lease: &Lease) -> Result<u64> {
    let done =
        sqlx::query("UPDATE runs SET lease_until = ? WHERE owner = ? AND state IN ('QUEUED', 'RUNNING')")
            .bind(lease.until_ms)
            .bind(&lease.owner)
            .execute(pool)
            .await?;
    Ok(done.rows_affected())
}

/// Checks `owner` holds every touched run (inside the commit's transaction).
pub(super) async fn fence(tx: &mut Transaction<'_, Sqlite>, owner: &str, runs: &[String]) -> Result<()> {
    for chunk in runs.chunks(super::runs::CHUNK) {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new("SELECT id, owner FROM runs WHERE id IN (");
        let mut sep = q.separated(", ");
        for id in chunk {
            sep.push_bind(id);
        }
        sep.push_unseparated(")");
        let rows: Vec<(String, Option<String>)> = q.build_query_as().fetch_all(&mut **tx).await?;
        check_fence(owner, &rows)?;
    }
    Ok(())
}
