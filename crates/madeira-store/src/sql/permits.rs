//! Throttle permits shared by the replicas: taken under the lock of their
//! (flow, node), counted over runs not finished (QUEUED too: a run's first
//! permits may be taken before the commit that records its start), freed in
//! the group commit (`commit.rs`).

use super::{D, Pool, sql};
use crate::admission::UNFINISHED;
use crate::dialect::{Dialect, LockSpace};
use crate::{PermitKey, Result};

pub(super) async fn try_permit(
    pool: &Pool,
    key: &PermitKey,
    owner: &str,
    max: u32,
    now_ms: i64,
) -> Result<bool> {
    let mut tx = pool.begin().await?;
    D::lock(&mut tx, LockSpace::Permit, &format!("{}\n{}", key.flow, key.node)).await?;
    let held =
        sqlx::query(&sql("UPDATE permits SET owner = $1 WHERE flow = $2 AND node = $3 AND run_id = $4"))
            .bind(owner)
            .bind(&key.flow)
            .bind(&key.node)
            .bind(&key.run_id)
            .execute(&mut *tx)
            .await?;
    if held.rows_affected() > 0 {
        tx.commit().await?;
        return Ok(true);
    }
    let (used,): (i64,) = sqlx::query_as(&sql(&format!(
        "SELECT COUNT(*) FROM permits p JOIN runs r ON r.id = p.run_id \
         WHERE p.flow = $1 AND p.node = $2 AND r.state IN {UNFINISHED}"
    )))
    .bind(&key.flow)
    .bind(&key.node)
    .fetch_one(&mut *tx)
    .await?;
    if used >= i64::from(max) {
        return Ok(false);
    }
    sqlx::query(&sql(
        "INSERT INTO permits (flow, node, run_id, owner, acquired_at) VALUES ($1, $2, $3, $4, $5)",
    ))
    .bind(&key.flow)
    .bind(&key.node)
    .bind(&key.run_id)
    .bind(owner)
    .bind(now_ms)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}
