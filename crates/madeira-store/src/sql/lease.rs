//! Run ownership by lease: claims lock the rows they read and skip rows another
//! replica is claiming (`D::FOR_UPDATE`, `D::SKIP_LOCKED`; SQLite's one writer
//! needs neither), so each run is taken by one replica only; commits lock the rows
//! they touch and check the owner (the fence).

use sqlx::QueryBuilder;

use super::{CHUNK, D, Db, Pool, Tx, push_list, sql};
use crate::admission::ACTIVE;
use crate::dialect::{Dialect, Val};
use crate::lease::{UNCLAIMED_GRACE_MS, check_fence, claimable};
use crate::{Claim, Lease, Result};

pub(super) async fn claim_run(
    pool: &Pool,
    run_id: &str,
    lease: &Lease,
    steal_idle: bool,
    only_from: Option<&str>,
) -> Result<Claim> {
    let mut tx = pool.begin().await?;
    let row: Option<(Option<String>, Option<i64>)> =
        sqlx::query_as(&sql(&format!("SELECT owner, lease_until FROM runs WHERE id = $1{}", D::FOR_UPDATE)))
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
    sqlx::query(&sql("UPDATE runs SET owner = $1, lease_until = $2 WHERE id = $3"))
        .bind(&lease.owner)
        .bind(lease.until_ms)
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
           AND COALESCE(lease_until, COALESCE(started_at, admitted_at, created_at) + $2) < $3 \
         ORDER BY id LIMIT $4{}",
        D::is_distinct("owner", "$1"),
        D::SKIP_LOCKED
    )))
    .bind(&lease.owner)
    .bind(UNCLAIMED_GRACE_MS)
    .bind(lease.now_ms)
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    let mut ids: Vec<String> = rows.into_iter().map(|(id,)| id).collect();
    ids.sort();
    for chunk in ids.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new("UPDATE runs SET owner = ");
        q.push_bind(&lease.owner).push(", lease_until = ").push_bind(lease.until_ms).push(" WHERE id IN ");
        push_list(&mut q, chunk);
        q.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(ids)
}

pub(super) async fn renew_leases(pool: &Pool, lease: &Lease) -> Result<u64> {
    let done = sqlx::query(&sql(
        "UPDATE runs SET lease_until = $1 WHERE owner = $2 AND state IN ('QUEUED', 'RUNNING')",
    ))
    .bind(lease.until_ms)
    .bind(&lease.owner)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// The fence as statements of a script (`commit_script`; SQLite, whose one writer
/// needs no row locks): each fails on the key of `transition_seq`'s one row when
/// a touched run is not held by `owner`, failing the script's transaction.
pub(super) async fn fence_statements<'a>(
    c: &mut super::Conn,
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
