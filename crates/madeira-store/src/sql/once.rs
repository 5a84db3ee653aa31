//! Warnings raised once (`fired_once`: deadline at risk, `max_duration`
//! exceeded) and the durations of a flow's recent successful attempts, which
//! the deadline-at-risk estimate takes its usual durations from.

use super::{Pool, sql};
use crate::Result;

/// Records that the alert `key` of `flow` fired; true only for the first
/// caller (the one that raises it), on any replica.
pub(super) async fn record_once(pool: &Pool, flow: &str, key: &str, now_ms: i64) -> Result<bool> {
    let mut tx = pool.begin().await?;
    super::runs::lock_flow(&mut tx, flow).await?;
    let seen: Option<(i64,)> = sqlx::query_as(&sql("SELECT fired_at FROM fired_once WHERE alert_key = $1"))
        .bind(key)
        .fetch_optional(&mut *tx)
        .await?;
    if seen.is_some() {
        return Ok(false);
    }
    sqlx::query(&sql("INSERT INTO fired_once (alert_key, flow, fired_at) VALUES ($1, $2, $3)"))
        .bind(key)
        .bind(flow)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// `(node, milliseconds)` of the SUCCESS attempts among `flow`'s latest `runs`
/// runs, newest run first.
pub(super) async fn node_durations(pool: &Pool, flow: &str, runs: u32) -> Result<Vec<(String, i64)>> {
    // A derived table, not `IN (… LIMIT)`: MySQL/MariaDB refuse LIMIT in IN.
    let rows: Vec<(String, i64, i64)> =
        sqlx::query_as(&sql("SELECT a.node, a.started_at, a.finished_at FROM attempts a \
         JOIN (SELECT id FROM runs WHERE flow = $1 ORDER BY id DESC LIMIT $2) r ON r.id = a.run_id \
         WHERE a.outcome = 'SUCCESS' AND a.finished_at IS NOT NULL \
         ORDER BY r.id DESC, a.attempt DESC"))
        .bind(flow)
        .bind(i64::from(runs))
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(|(node, start, end)| (node, end.saturating_sub(start).max(0))).collect())
}
