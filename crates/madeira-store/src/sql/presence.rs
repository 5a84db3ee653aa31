//! Sidecar presence: each replica rewrites its own rows (one
//! per group of live sidecars); the others read them to hand runs over.

use sqlx::QueryBuilder;

use super::{Db, Pool, sql};

use crate::{Result, SidecarPresence};

pub(super) async fn publish(
    pool: &Pool,
    replica: &str,
    groups: &[SidecarPresence],
    now_ms: i64,
) -> Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query(&sql("DELETE FROM sidecar_presence WHERE replica = $1"))
        .bind(replica)
        .execute(&mut *tx)
        .await?;
    if !groups.is_empty() {
        let mut q: QueryBuilder<Db> =
            QueryBuilder::new("INSERT INTO sidecar_presence (replica, grp, jobs, seen_at) ");
        q.push_values(groups, |mut row, g| {
            let jobs = serde_json::to_string(&g.jobs).unwrap_or_else(|_| "[]".into());
            row.push_bind(replica).push_bind(&g.group).push_bind(jobs).push_bind(now_ms);
        });
        q.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

pub(super) async fn hosts(pool: &Pool, group: &str, job: &str, since_ms: i64) -> Result<Vec<String>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        &sql("SELECT replica, jobs FROM sidecar_presence WHERE grp = $1 AND seen_at >= $2 ORDER BY seen_at DESC, replica"),
    )
    .bind(group)
    .bind(since_ms)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|(_, jobs)| {
            serde_json::from_str::<Vec<String>>(jobs).is_ok_and(|jobs| jobs.iter().any(|j| j == job))
        })
        .map(|(replica, _)| replica)
        .collect())
}

pub(super) async fn all(pool: &Pool, since_ms: i64) -> Result<Vec<(String, SidecarPresence, i64)>> {
    let rows: Vec<(String, String, String, i64)> = sqlx::query_as(&sql(
        "SELECT replica, grp, jobs, seen_at FROM sidecar_presence WHERE seen_at >= $1 ORDER BY replica, grp",
    ))
    .bind(since_ms)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(replica, group, jobs, seen_at)| {
            let jobs = serde_json::from_str(&jobs).unwrap_or_default();
            (replica, SidecarPresence { group, jobs }, seen_at)
        })
        .collect())
}
