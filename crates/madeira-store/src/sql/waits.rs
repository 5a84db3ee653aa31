//! Cross-flow waits (`after:`): which flows have runs held by the run of a flow
//! for a business date (the engine promotes them once that run is SUCCESS), and
//! what one run waits for (shown on the run and the estate map), which runs a
//! failed run holds (its failure alert lists them), the runs held by `after` now
//! (for `after_policy`), waiving a held run's waits (`after_policy: run`), and
//! which flows any wait names at all (`waited_upstreams`).

use super::{Pool, sql};
use crate::admission::HELD_BY_AFTER;
use crate::{AfterWait, HeldRun, Result, RunRow};

/// Flows with a QUEUED run waiting for `flow` on `date` (whole run or
/// one of its nodes), in name order.
pub(super) async fn after_dependents(pool: &Pool, flow: &str, date: &str) -> Result<Vec<String>> {
    let rows: Vec<(String,)> =
        sqlx::query_as(&sql("SELECT DISTINCT r.flow FROM run_waits w JOIN runs r ON r.id = w.run_id \
         WHERE w.upstream_flow = $1 AND w.upstream_date = $2 AND r.state = 'QUEUED' \
         ORDER BY r.flow"))
        .bind(flow)
        .bind(date)
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(|(f,)| f).collect())
}

pub(super) async fn waited_upstreams(pool: &Pool) -> Result<Vec<String>> {
    let rows: Vec<(String,)> = sqlx::query_as(&sql(
        "SELECT upstream_flow FROM run_waits UNION SELECT upstream_flow FROM node_waits ORDER BY 1",
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(f,)| f).collect())
}

/// QUEUED runs with a wait for `flow` on `date`, oldest first.
pub(super) async fn held_runs(pool: &Pool, flow: &str, date: &str) -> Result<Vec<RunRow>> {
    let query = format!(
        "SELECT {} FROM runs WHERE id IN (SELECT w.run_id FROM run_waits w WHERE w.upstream_flow = $1 \
         AND w.upstream_date = $2) AND state = 'QUEUED' ORDER BY id LIMIT 1000",
        super::read::run_columns()
    );
    let rows = sqlx::query(&sql(&query)).bind(flow).bind(date).fetch_all(pool).await?;
    rows.iter().map(super::read::run_row).collect()
}

/// What `run_id` waits for, in its flow's `after:` order.
pub(super) async fn run_waits(pool: &Pool, run_id: &str) -> Result<Vec<AfterWait>> {
    let rows: Vec<(String, Option<String>, String)> = sqlx::query_as(&sql(
        "SELECT upstream_flow, upstream_node, upstream_date FROM run_waits WHERE run_id = $1 ORDER BY seq",
    ))
    .bind(run_id)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(flow, node, date)| AfterWait { flow, node, date }).collect())
}

/// Runs held by an unmet `after` now, oldest first.
pub(super) async fn held_by_after(pool: &Pool) -> Result<Vec<HeldRun>> {
    let rows: Vec<(String, String, i64, i64, Option<String>)> = sqlx::query_as(&format!(
        "SELECT id, flow, version, created_at, wait_reason FROM runs WHERE {HELD_BY_AFTER} ORDER BY id LIMIT 1000"
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(run_id, flow, version, created_at, wait_reason)| HeldRun {
            run_id,
            flow,
            version: version as u32,
            created_at,
            wait_reason,
        })
        .collect())
}

/// Drops the `after` waits of `run_id` while it is still held (QUEUED), under its flow's lock: it then waits only for room like any run.
/// False when it was no longer held (released, cancelled, or another replica
/// waived it first).
pub(super) async fn waive_waits(pool: &Pool, run_id: &str) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let flow: Option<(String,)> =
        sqlx::query_as(&sql("SELECT flow FROM runs WHERE id = $1 AND state = 'QUEUED'"))
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((flow,)) = flow else { return Ok(false) };
    super::runs::lock_flow(&mut tx, &flow).await?;
    let still: Option<(String,)> =
        sqlx::query_as(&sql(&format!("SELECT id FROM runs WHERE id = $1 AND {HELD_BY_AFTER}")))
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await?;
    if still.is_none() {
        return Ok(false);
    }
    sqlx::query(&sql("DELETE FROM run_waits WHERE run_id = $1")).bind(run_id).execute(&mut *tx).await?;
    sqlx::query(&sql("UPDATE runs SET wait_reason = NULL WHERE id = $1"))
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}
