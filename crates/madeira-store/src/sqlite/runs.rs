//! Run creation (idempotency key and `on_overlap` decided inside one transaction),
//! promotion of queued runs, logs and retention.

use std::collections::HashMap;

use madeira_core::{RunCause, RunState};
use sqlx::{QueryBuilder, Sqlite, SqlitePool, Transaction};

use crate::{CreateOutcome, LogRecord, NewRun, Overlap, Result, StoreError};

/// Rows per multi-row INSERT, to stay well under SQLite's bound-variable limit.
pub(super) const CHUNK: usize = 500;

pub(super) async fn create_runs(pool: &SqlitePool, runs: &[NewRun]) -> Result<Vec<CreateOutcome>> {
    let mut tx = pool.begin().await?;
    let mut outcomes = Vec::with_capacity(runs.len());
    let mut claims = HashMap::new();
    for run in runs {
        outcomes.push(create_in(&mut tx, run, &mut claims).await?);
    }
    tx.commit().await?;
    Ok(outcomes)
}

/// Claims on throttled `(flow, node)`, counted once per transaction and then kept
/// up to date as runs are created in it (this transaction is the only writer).
type Claims = HashMap<(String, String), i64>;

async fn create_in(
    tx: &mut Transaction<'_, Sqlite>,
    run: &NewRun,
    cache: &mut Claims,
) -> Result<CreateOutcome> {
    if let Some(key) = &run.idempotency_key {
        let existing: Option<(String, i64)> =
            sqlx::query_as("SELECT id, version FROM runs WHERE flow = ? AND idempotency_key = ?")
                .bind(&run.flow)
                .bind(key)
                .fetch_optional(&mut **tx)
                .await?;
        if let Some((run_id, version)) = existing {
            return Ok(CreateOutcome::Existing { run_id, version: version as u32 });
        }
    }
    for claim in &run.throttles {
        let key = (run.flow.clone(), claim.node.clone());
        let claims = match cache.get(&key) {
            Some(n) => *n,
            None => {
                let (n,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM nodes n JOIN runs r ON r.id = n.run_id \
                     WHERE r.flow = ? AND r.state IN ('RUNNING', 'QUEUED') AND n.node = ? \
                     AND n.state IN ('INIT', 'RETRYING', 'RUNNING')",
                )
                .bind(&run.flow)
                .bind(&claim.node)
                .fetch_one(&mut **tx)
                .await?;
                cache.insert(key.clone(), n);
                n
            }
        };
        if claims >= i64::from(claim.max_permits) + i64::from(claim.queue_size) {
            return Ok(CreateOutcome::Throttled {
                node: claim.node.clone(),
                claims: claims as u32,
                max_permits: claim.max_permits,
                queue_size: claim.queue_size,
            });
        }
    }
    let (active, room) = if run.max_active_runs == 0 {
        (Vec::new(), true)
    } else {
        let active: Vec<(String,)> =
            sqlx::query_as("SELECT id FROM runs WHERE flow = ? AND state = 'RUNNING' ORDER BY id")
                .bind(&run.flow)
                .fetch_all(&mut **tx)
                .await?;
        let active: Vec<String> = active.into_iter().map(|(id,)| id).collect();
        let queued: Option<(String,)> =
            sqlx::query_as("SELECT id FROM runs WHERE flow = ? AND state = 'QUEUED' LIMIT 1")
                .bind(&run.flow)
                .fetch_optional(&mut **tx)
                .await?;
        let room = active.len() < run.max_active_runs as usize && queued.is_none();
        (active, room)
    };
    let (state, cancel_previous) = match (room, run.overlap) {
        (true, _) => (RunState::Running, Vec::new()),
        (false, Overlap::Skip) => return Ok(CreateOutcome::Skipped { active }),
        (false, Overlap::Queue) => (RunState::Queued, Vec::new()),
        (false, Overlap::CancelPrevious) => (RunState::Queued, active),
    };
    sqlx::query(
        "INSERT INTO runs (id, flow, version, state, params, idempotency_key, trigger, created_at, \
         started_at, trace_context) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&run.id)
    .bind(&run.flow)
    .bind(run.version)
    .bind(state.as_str())
    .bind(run.params.to_string())
    .bind(&run.idempotency_key)
    .bind(&run.trigger)
    .bind(run.now_ms)
    .bind((state == RunState::Running).then_some(run.now_ms))
    .bind(&run.trace_context)
    .execute(&mut **tx)
    .await?;
    for (offset, chunk) in run.node_names.chunks(CHUNK).enumerate() {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO nodes (run_id, idx, node, state, attempt, series_start, data_version, \
             outputs, reads, stale, fallback) ",
        );
        q.push_values(chunk.iter().enumerate(), |mut b, (i, name)| {
            b.push_bind(&run.id)
                .push_bind((offset * CHUNK + i) as i64)
                .push_bind(name)
                .push("'INIT', 0, 0, 0, '{}', '[]', 0, 0");
        });
        q.build().execute(&mut **tx).await?;
    }
    record_run_transition(tx, &run.id, None, RunState::Queued, "created", &run.actor, run.now_ms).await?;
    if state == RunState::Running {
        started(tx, &run.id, &run.actor, run.now_ms).await?;
    }
    for claim in &run.throttles {
        *cache.entry((run.flow.clone(), claim.node.clone())).or_default() += 1;
    }
    Ok(CreateOutcome::Created { run_id: run.id.clone(), state, cancel_previous })
}

/// Records QUEUED -> RUNNING, checked against the run table.
async fn started(tx: &mut Transaction<'_, Sqlite>, run_id: &str, actor: &str, now_ms: i64) -> Result<()> {
    let to = RunState::Queued.apply(RunCause::Started).map_err(|e| StoreError::Refused(e.to_string()))?;
    record_run_transition(tx, run_id, Some(RunState::Queued), to, RunCause::Started.as_str(), actor, now_ms)
        .await
}

async fn record_run_transition(
    tx: &mut Transaction<'_, Sqlite>,
    run_id: &str,
    from: Option<RunState>,
    to: RunState,
    cause: &str,
    actor: &str,
    now_ms: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO transitions (run_id, node, from_state, to_state, cause, actor, attempt, at) \
         VALUES (?, NULL, ?, ?, ?, ?, 0, ?)",
    )
    .bind(run_id)
    .bind(from.map_or("NONE", RunState::as_str))
    .bind(to.as_str())
    .bind(cause)
    .bind(actor)
    .bind(now_ms)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

pub(super) async fn promote_queued(
    pool: &SqlitePool,
    flow: &str,
    max_active_runs: u32,
    now_ms: i64,
) -> Result<Option<String>> {
    let mut tx = pool.begin().await?;
    let (active,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM runs WHERE flow = ? AND state = 'RUNNING'")
        .bind(flow)
        .fetch_one(&mut *tx)
        .await?;
    if max_active_runs != 0 && active >= i64::from(max_active_runs) {
        return Ok(None);
    }
    let next: Option<(String,)> =
        sqlx::query_as("SELECT id FROM runs WHERE flow = ? AND state = 'QUEUED' ORDER BY id LIMIT 1")
            .bind(flow)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((run_id,)) = next else {
        return Ok(None);
    };
    sqlx::query("UPDATE runs SET state = 'RUNNING', started_at = ? WHERE id = ?")
        .bind(now_ms)
        .bind(&run_id)
        .execute(&mut *tx)
        .await?;
    started(&mut tx, &run_id, "engine", now_ms).await?;
    tx.commit().await?;
    Ok(Some(run_id))
}

pub(super) async fn put_log(pool: &SqlitePool, log: &LogRecord) -> Result<()> {
    let mut tx = pool.begin().await?;
    put_log_in(&mut tx, log).await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn put_log_in(tx: &mut Transaction<'_, Sqlite>, log: &LogRecord) -> Result<()> {
    sqlx::query(
        "INSERT INTO logs (run_id, node, attempt, content) VALUES (?, ?, ?, ?) \
         ON CONFLICT(run_id, node, attempt) DO UPDATE SET content = excluded.content",
    )
    .bind(&log.run_id)
    .bind(&log.node)
    .bind(log.attempt)
    .bind(&log.content)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Deletes one small batch so the engine's writes are never blocked for long.
pub(super) async fn prune(pool: &SqlitePool, before_ms: i64, batch: u32) -> Result<u64> {
    let mut tx = pool.begin().await?;
    let ids: Vec<(String,)> = sqlx::query_as(
        "SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < ? \
         AND state IN ('SUCCESS', 'FAILED', 'CANCELLED') LIMIT ?",
    )
    .bind(before_ms)
    .bind(batch)
    .fetch_all(&mut *tx)
    .await?;
    for table in ["nodes", "transitions", "node_outputs", "attempts", "logs"] {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(format!("DELETE FROM {table} WHERE run_id IN ("));
        let mut sep = q.separated(", ");
        for (id,) in &ids {
            sep.push_bind(id);
        }
        sep.push_unseparated(")");
        if !ids.is_empty() {
            q.build().execute(&mut *tx).await?;
        }
    }
    let mut deleted = 0;
    for (id,) in &ids {
        deleted +=
            sqlx::query("DELETE FROM runs WHERE id = ?").bind(id).execute(&mut *tx).await?.rows_affected();
    }
    sqlx::query("DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at < ? LIMIT ?)")
        .bind(before_ms)
        .bind(batch)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "DELETE FROM run_commands WHERE id IN (SELECT id FROM run_commands WHERE created_at < ? LIMIT ?)",
    )
    .bind(before_ms)
    .bind(batch)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(deleted)
}
