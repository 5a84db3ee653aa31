//! Warnings raised once (`fired_once`: deadline at risk, `max_duration`
//! exceeded) and the durations of a flow's recent successful attempts, which
//! the deadline-at-risk estimate takes its usual durations from.

use std::collections::HashMap;

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
/// runs, newest run first (then by attempt, latest first). A run without
/// attempt rows is looked up in the archive (read after the rows: a fold in
/// between is seen there).
pub(super) async fn node_durations(pool: &Pool, flow: &str, runs: u32) -> Result<Vec<(String, i64)>> {
    let ids: Vec<(String,)> =
        sqlx::query_as(&sql("SELECT id FROM runs WHERE flow = $1 ORDER BY id DESC LIMIT $2"))
            .bind(flow)
            .bind(i64::from(runs))
            .fetch_all(pool)
            .await?;
    // A derived table, not `IN (… LIMIT)`: MySQL/MariaDB refuse LIMIT in IN.
    let rows: Vec<(String, String, i64, i64, i64)> = sqlx::query_as(&sql(
        "SELECT a.run_id, a.node, a.attempt, a.started_at, a.finished_at FROM attempts a \
         JOIN (SELECT id FROM runs WHERE flow = $1 ORDER BY id DESC LIMIT $2) r ON r.id = a.run_id \
         WHERE a.outcome = 'SUCCESS' AND a.finished_at IS NOT NULL",
    ))
    .bind(flow)
    .bind(i64::from(runs))
    .fetch_all(pool)
    .await?;
    let mut by_run: HashMap<String, Vec<(String, i64, i64)>> = HashMap::new();
    for (run_id, node, attempt, start, end) in rows {
        by_run.entry(run_id).or_default().push((node, attempt, end.saturating_sub(start).max(0)));
    }
    let missing: Vec<&str> =
        ids.iter().map(|(id,)| id.as_str()).filter(|id| !by_run.contains_key(*id)).collect();
    for (run_id, folded) in super::archive::archived_many(pool, &missing).await? {
        let ok = folded.attempts.into_iter().filter(|a| a.outcome.as_deref() == Some("SUCCESS"));
        let durations: Vec<(String, i64, i64)> = ok
            .filter_map(|a| {
                Some((a.node, i64::from(a.attempt), a.finished_at?.saturating_sub(a.started_at).max(0)))
            })
            .collect();
        by_run.insert(run_id, durations);
    }
    let mut out = Vec::new();
    for (id,) in &ids {
        let Some(mut attempts) = by_run.remove(id) else { continue };
        attempts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out.extend(attempts.into_iter().map(|(node, _, ms)| (node, ms)));
    }
    Ok(out)
}
