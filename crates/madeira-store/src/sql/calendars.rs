//! Calendars applied through the API, versioned like flows
//! (`calendar_versions`): a new version only when the content changed.

use super::{Pool, sql};
use crate::{CalendarVersion, PutFlow, Result};

/// Stores `source` as a new version of calendar `name` unless its hash equals
/// the latest version's.
pub(super) async fn put_calendar(
    pool: &Pool,
    name: &str,
    source: &str,
    hash: &str,
    now_ms: i64,
) -> Result<PutFlow> {
    let mut tx = pool.begin().await?;
    super::runs::lock_flow(&mut tx, &format!("calendar:{name}")).await?;
    let latest: Option<(i64, String)> = sqlx::query_as(&sql(
        "SELECT version, content_hash FROM calendar_versions WHERE name = $1 ORDER BY version DESC LIMIT 1",
    ))
    .bind(name)
    .fetch_optional(&mut *tx)
    .await?;
    let version = match latest {
        Some((version, latest_hash)) if latest_hash == hash => {
            return Ok(PutFlow { version: version as u32, created: false });
        }
        Some((version, _)) => version + 1,
        None => 1,
    };
    sqlx::query(&sql("INSERT INTO calendar_versions (name, version, source, content_hash, created_at) \
         VALUES ($1, $2, $3, $4, $5)"))
    .bind(name)
    .bind(version)
    .bind(source)
    .bind(hash)
    .bind(now_ms)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(PutFlow { version: version as u32, created: true })
}

/// The latest version of every applied calendar, by name.
pub(super) async fn calendars(pool: &Pool) -> Result<Vec<CalendarVersion>> {
    let rows: Vec<(String, i64, String, String, i64)> = sqlx::query_as(&sql(
        "SELECT c.name, c.version, c.source, c.content_hash, c.created_at FROM calendar_versions c \
         WHERE c.version = (SELECT MAX(l.version) FROM calendar_versions l WHERE l.name = c.name) \
         ORDER BY c.name",
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(name, version, source, content_hash, created_at)| CalendarVersion {
            name,
            version: version as u32,
            source,
            content_hash,
            created_at,
        })
        .collect())
}
