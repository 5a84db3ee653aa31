//! Flow definitions and their versions; a new version is numbered under the
//! flow's lock so two replicas applying at once never collide. A deleted flow
//! (`deleted_at` set, see `lifecycle`) is left out of every read here; applying
//! its name again revives it with the next version number, so cached parsed
//! versions never mean two different sources.

use sqlx::Row as _;

use super::runs::lock_flow;
use super::{Pool, Row, sql, upsert};
use crate::{FlowRecord, FlowVersion, PutFlow, Result};

pub(super) async fn put_flow(
    pool: &Pool,
    name: &str,
    source: &str,
    hash: &str,
    now_ms: i64,
) -> Result<PutFlow> {
    let mut tx = pool.begin().await?;
    lock_flow(&mut tx, name).await?;
    let latest: Option<(i64, Option<String>, Option<i64>)> =
        sqlx::query_as(&sql("SELECT f.latest_version, v.content_hash, f.deleted_at FROM flows f \
         LEFT JOIN flow_versions v ON v.flow = f.name AND v.version = f.latest_version \
         WHERE f.name = $1"))
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    let (version, revive) = match latest {
        Some((version, Some(latest_hash), None)) if latest_hash == hash => {
            return Ok(PutFlow { version: version as u32, created: false });
        }
        Some((version, _, deleted_at)) => (version + 1, deleted_at.is_some()),
        None => (1, false),
    };
    sqlx::query(&sql(&format!(
        "INSERT INTO flows (name, latest_version, paused, created_at, updated_at) \
         VALUES ($1, $2, FALSE, $3, $4) \
         {}",
        upsert("name", "latest_version, updated_at")
    )))
    .bind(name)
    .bind(version)
    .bind(now_ms)
    .bind(now_ms)
    .execute(&mut *tx)
    .await?;
    if revive {
        sqlx::query(&sql(
            "UPDATE flows SET deleted_at = NULL, paused = FALSE, created_at = $1 WHERE name = $2",
        ))
        .bind(now_ms)
        .bind(name)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(&sql("INSERT INTO flow_versions (flow, version, source, content_hash, created_at) \
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

/// Every flow not deleted (append ` AND …` to narrow).
const FLOW_SELECT: &str = "SELECT f.name, f.latest_version, f.paused, v.source, f.created_at, \
    f.updated_at FROM flows f JOIN flow_versions v ON v.flow = f.name AND v.version = f.latest_version \
    WHERE f.deleted_at IS NULL";

/// Deleted flows whose history was kept (a purged flow has no versions left).
pub(super) async fn deleted_flows(pool: &Pool) -> Result<Vec<FlowRecord>> {
    let select = FLOW_SELECT.replace("f.deleted_at IS NULL", "f.deleted_at IS NOT NULL");
    let rows = sqlx::query(&format!("{select} ORDER BY f.name")).fetch_all(pool).await?;
    Ok(rows.iter().map(flow_record).collect::<std::result::Result<_, _>>()?)
}

fn flow_record(row: &Row) -> std::result::Result<FlowRecord, sqlx::Error> {
    Ok(FlowRecord {
        name: row.try_get("name")?,
        latest_version: row.try_get::<i64, _>("latest_version")? as u32,
        paused: row.try_get("paused")?,
        source: row.try_get("source")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub(super) async fn get_flow(pool: &Pool, name: &str) -> Result<Option<FlowRecord>> {
    let row =
        sqlx::query(&sql(&format!("{FLOW_SELECT} AND f.name = $1"))).bind(name).fetch_optional(pool).await?;
    Ok(row.as_ref().map(flow_record).transpose()?)
}

pub(super) async fn list_flows(pool: &Pool) -> Result<Vec<FlowRecord>> {
    let rows = sqlx::query(&sql(&format!("{FLOW_SELECT} ORDER BY f.name"))).fetch_all(pool).await?;
    Ok(rows.iter().map(flow_record).collect::<std::result::Result<_, _>>()?)
}

pub(super) async fn flow_version(pool: &Pool, name: &str, version: u32) -> Result<Option<FlowVersion>> {
    let row: Option<(String, i64, String, String, i64)> =
        sqlx::query_as(&sql("SELECT flow, version, source, content_hash, created_at FROM flow_versions \
         WHERE flow = $1 AND version = $2"))
        .bind(name)
        .bind(i64::from(version))
        .fetch_optional(pool)
        .await?;
    Ok(row.map(|(flow, version, source, content_hash, created_at)| FlowVersion {
        flow,
        version: version as u32,
        source,
        content_hash,
        created_at,
    }))
}

/// Under the flow's lock, so an event queued for a paused flow (`lifecycle`)
/// commits either before a resume (which then starts it) or after it (and is
/// not queued at all).
pub(super) async fn set_paused(pool: &Pool, name: &str, paused: bool, now_ms: i64) -> Result<bool> {
    let mut tx = pool.begin().await?;
    lock_flow(&mut tx, name).await?;
    let done = sqlx::query(&sql(
        "UPDATE flows SET paused = $1, updated_at = $2 WHERE name = $3 AND deleted_at IS NULL",
    ))
    .bind(paused)
    .bind(now_ms)
    .bind(name)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}

pub(super) async fn flow_versions(pool: &Pool, name: &str) -> Result<Vec<FlowVersion>> {
    let rows: Vec<(String, i64, String, String, i64)> =
        sqlx::query_as(&sql("SELECT flow, version, source, content_hash, created_at FROM flow_versions \
         WHERE flow = $1 ORDER BY version"))
        .bind(name)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(flow, version, source, content_hash, created_at)| FlowVersion {
            flow,
            version: version as u32,
            source,
            content_hash,
            created_at,
        })
        .collect())
}
