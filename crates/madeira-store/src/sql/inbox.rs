//! The cluster's alert inbox and leader rows: events appended by
//! any replica, read in order by the leader, deleted in the leader's fenced write.

use serde_json::Value as Json;
use sqlx::QueryBuilder;
use sqlx::Row as _;

use super::{D, Db, Pool, Tx, push_list, sql};
use crate::dialect::Dialect;
use crate::{AlertBatch, InboxEvent, Result, StoreError};

pub(super) async fn push(pool: &Pool, bodies: &[Json], now_ms: i64) -> Result<()> {
    if bodies.is_empty() {
        return Ok(());
    }
    let mut q: QueryBuilder<Db> = QueryBuilder::new("INSERT INTO alert_inbox (body, created_at) ");
    q.push_values(bodies, |mut row, body| {
        row.push_bind(body.to_string()).push_bind(now_ms);
    });
    q.build().execute(pool).await?;
    Ok(())
}

pub(super) async fn read(pool: &Pool, limit: u32) -> Result<Vec<InboxEvent>> {
    let rows = sqlx::query(&sql("SELECT seq, body FROM alert_inbox ORDER BY seq LIMIT $1"))
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    rows.iter()
        .map(|row| {
            let body: String = row.try_get("body")?;
            // An unreadable row must not block the rows behind it: the reader
            // gets the raw text and reports it.
            let body = serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body));
            Ok(InboxEvent { seq: row.try_get("seq")?, body })
        })
        .collect()
}

/// `holder` leads `role` for `lease_ms` more when nobody does, it already does,
/// or the leader's lease ran out. Judged and written by the database's clock
/// (`Dialect::NOW_MS`): `now_ms`, the caller's clock, is not trusted (a replica
/// whose clock runs ahead must not depose a live leader).
pub(super) async fn lead(pool: &Pool, role: &str, holder: &str, _now_ms: i64, lease_ms: i64) -> Result<bool> {
    // The row is locked, the decision taken here and written in the same
    // transaction. Of two replicas creating the row at once, the second is
    // refused by the primary key and does not lead.
    let mut tx = pool.begin().await?;
    let current: Option<(String, i64, i64)> = sqlx::query_as(&sql(&format!(
        "SELECT holder, lease_until, {} FROM leaders WHERE role = $1{}",
        D::NOW_MS,
        D::FOR_UPDATE
    )))
    .bind(role)
    .fetch_optional(&mut *tx)
    .await?;
    match current {
        None => {
            let inserted = sqlx::query(&sql(&format!(
                "INSERT INTO leaders (role, holder, lease_until) VALUES ($1, $2, {} + $3)",
                D::NOW_MS
            )))
            .bind(role)
            .bind(holder)
            .bind(lease_ms)
            .execute(&mut *tx)
            .await;
            match inserted {
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(false),
                other => other?,
            };
        }
        Some((current, lease_until, db_now)) if current == holder || lease_until < db_now => {
            sqlx::query(&sql(&format!(
                "UPDATE leaders SET holder = $1, lease_until = {} + $2 WHERE role = $3",
                D::NOW_MS
            )))
            .bind(holder)
            .bind(lease_ms)
            .bind(role)
            .execute(&mut *tx)
            .await?;
        }
        Some(_) => return Ok(false),
    }
    tx.commit().await?;
    Ok(true)
}

/// Inside a batch's transaction: refuses it unless the fence's holder leads (the
/// row lock orders it against a takeover), and deletes the consumed events.
pub(super) async fn fence_and_consume(tx: &mut Tx<'_>, batch: &AlertBatch) -> Result<()> {
    if let Some(fence) = &batch.fence {
        let holder: Option<String> =
            sqlx::query_scalar(&sql(&format!("SELECT holder FROM leaders WHERE role = $1{}", D::FOR_UPDATE)))
                .bind(&fence.role)
                .fetch_optional(&mut **tx)
                .await?;
        if holder.as_deref() != Some(fence.holder.as_str()) {
            return Err(StoreError::NotLeader { role: fence.role.clone(), holder: fence.holder.clone() });
        }
    }
    for chunk in batch.consumed.chunks(super::CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new("DELETE FROM alert_inbox WHERE seq IN ");
        push_list(&mut q, chunk);
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}
