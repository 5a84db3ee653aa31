//! Console sessions (`console_sessions`): written at sign-in, read on every
//! console request, deleted at sign-out or once expired. Only the SHA-256 of a
//! session cookie is stored, so a copy of the database signs nobody in.

use sqlx::Row as _;

use super::{Pool, sql};
use crate::{Result, SessionRecord};

/// Stores `s` after deleting the expired sessions and, when `max_live` live ones
/// remain, the ones that expire soonest (so the table stays bounded).
pub(super) async fn put(pool: &Pool, s: &SessionRecord, max_live: u32, now_ms: i64) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query(&sql("DELETE FROM console_sessions WHERE expires_at <= $1"))
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
    let (live,): (i64,) =
        sqlx::query_as(&sql("SELECT COUNT(*) FROM console_sessions")).fetch_one(&mut *tx).await?;
    let over = live - i64::from(max_live) + 1;
    if over > 0 {
        sqlx::query(&sql(
            "DELETE FROM console_sessions WHERE id_hash IN (SELECT id_hash FROM (SELECT id_hash FROM \
             console_sessions ORDER BY expires_at, id_hash LIMIT $1) AS oldest)",
        ))
        .bind(over)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(&sql(
        "INSERT INTO console_sessions (id_hash, name, role, scope, csrf, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    ))
    .bind(&s.id_hash)
    .bind(&s.name)
    .bind(&s.role)
    .bind(&s.scope)
    .bind(&s.csrf)
    .bind(s.created_at)
    .bind(s.expires_at)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The session whose cookie hashes to `id_hash`, unless it expired by `now_ms`.
pub(super) async fn get(pool: &Pool, id_hash: &str, now_ms: i64) -> Result<Option<SessionRecord>> {
    let row = sqlx::query(&sql(
        "SELECT id_hash, name, role, scope, csrf, created_at, expires_at FROM console_sessions \
         WHERE id_hash = $1 AND expires_at > $2",
    ))
    .bind(id_hash)
    .bind(now_ms)
    .fetch_optional(pool)
    .await?;
    row.map(|r| {
        Ok(SessionRecord {
            id_hash: r.try_get("id_hash")?,
            name: r.try_get("name")?,
            role: r.try_get("role")?,
            scope: r.try_get("scope")?,
            csrf: r.try_get("csrf")?,
            created_at: r.try_get("created_at")?,
            expires_at: r.try_get("expires_at")?,
        })
    })
    .transpose()
}

/// Deletes the session; false when there was none.
pub(super) async fn delete(pool: &Pool, id_hash: &str) -> Result<bool> {
    let done = sqlx::query(&sql("DELETE FROM console_sessions WHERE id_hash = $1"))
        .bind(id_hash)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

/// Live sessions (not expired at `now_ms`).
pub(super) async fn count(pool: &Pool, now_ms: i64) -> Result<u64> {
    let (n,): (i64,) = sqlx::query_as(&sql("SELECT COUNT(*) FROM console_sessions WHERE expires_at > $1"))
        .bind(now_ms)
        .fetch_one(pool)
        .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}
