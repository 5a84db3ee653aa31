//! Run creation (idempotency key and `on_overlap` decided inside one transaction
//! under the flow's advisory lock), promotion of queued runs, logs and retention.

use std::collections::HashMap;

use madeira_core::{RunCause, RunState};
use sqlx::{PgPool, Postgres, QueryBuilder, Transaction};

use crate::{CreateOutcome, LogRecord, NewRun, Overlap, Result, StoreError};

/// Rows per multi-row INSERT (PostgreSQL allows 65,535 bound values).
pub(super) const CHUNK: usize = 1000;

/// Serialises, across replicas, the decisions taken about one flow's runs and
/// versions. Released at the end of the transaction.
pub(super) async fn lock_flow(tx: &mut Transaction<'_, Postgres>, flow: &str) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 7070))")
        .bind(flow)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

pub(super) async fn create_runs(pool: &PgPool, runs: &[NewRun]) -> Result<Vec<CreateOutcome>> {
    let mut tx = pool.begin().await?;
    // Every flow of the batch is locked up front, in one order, so two replicas
    // batching runs of the same flows never wait on each other in a cycle.
    let mut flows: Vec<&str> = runs.iter().map(|r| r.flow.as_str()).collect();
    flows.sort_unstable();
    flows.dedup();
    for flow in flows {
        lock_flow(&mut tx, flow).await?;
    }
    let mut outcomes = Vec::with_capacity(runs.len());
    let mut claims = HashMap::new();
    for run in runs {
        outcomes.push(create_in(&mut tx, run, &mut claims).await?);
    }
    tx.commit().await?;
    Ok(outcomes)
}

/// Claims on throttled `(flow, node)`, counted once per transaction and then kept
/// up to date as runs are created in it (the flow's advisory lock makes this
/// transaction the only one creating runs of the flow).
type Claims = HashMap<(String, String), i64>;

async fn create_in(
    tx: &mut Transaction<'_, Postgres>,
    run: &NewRun,
    cache: &mut Claims,
) -> Result<CreateOutcome> {
    if let Some(key) = &run.idempotency_key {
        let existing: Option<(String, i64)> =
            sqlx::query_as("SELECT id, version FROM runs WHERE flow = $1 AND idempotency_key = $2")
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
                     WHERE r.flow = $1 AND r.state IN ('RUNNING', 'QUEUED') AND n.node = $2 \
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
            sqlx::query_as("SELECT id FROM runs WHERE flow = $1 AND state = 'RUNNING' ORDER BY id")
                .bind(&run.flow)
                .fetch_all(&mut **tx)
                .await?;
        let active: Vec<String> = active.into_iter().map(|(id,)| id).collect();
        let queued: Option<(String,)> =
            sqlx::query_as("SELECT id FROM runs WHERE flow = $1 AND state = 'QUEUED' LIMIT 1")
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
         started_at, trace_context) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(&run.id)
    .bind(&run.flow)
    .bind(i64::from(run.version))
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
        let mut q: QueryBuilder<Postgres> = QueryBuilder::new(
            "INSERT INTO nodes (run_id, idx, node, state, attempt, series_start, data_version, \
             outputs, reads, stale, fallback) ",
        );
        q.push_values(chunk.iter().enumerate(), |mut b, (i, name)| {
            b.push_bind(&run.id)
                .push_bind((offset * CHUNK + i) as i64)
                .push_bind(name)
                .push("'INIT', 0, 0, 0, '{}', '[]', FALSE, FALSE");
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
async fn started(tx: &mut Transaction<'_, Postgres>, run_id: &str, actor: &str, now_ms: i64) -> Result<()> {
    let to = RunState::Queued.apply(RunCause::Started).map_err(|e| StoreError::Refused(e.to_string()))?;
    record_run_transition(tx, run_id, Some(RunState::Queued), to, RunCause::Started.as_str(), actor, now_ms)
        .await
}

async fn record_run_transition(
    tx: &mut Transaction<'_, Postgres>,
    run_id: &str,
    from: Option<RunState>,
    to: RunState,
    cause: &str,
    actor: &str,
    now_ms: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO transitions (run_id, node, from_state, to_state, cause, actor, attempt, at) \
         VALUES ($1, NULL, $2, $3, $4, $5, 0, $6)",
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
    pool: &PgPool,
    flow: &str,
    max_active_runs: u32,
    now_ms: i64,
) -> Result<Option<String>> {
    let mut tx = pool.begin().await?;
    lock_flow(&mut tx, flow).await?;
    let (active,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM runs WHERE flow = $1 AND state = 'RUNNING'")
        .bind(flow)
        .fetch_one(&mut *tx)
        .await?;
    if max_active_runs != 0 && active >= i64::from(max_active_runs) {
        return Ok(None);
    }
    let next: Option<(String,)> =
        sqlx::query_as("SELECT id FROM runs WHERE flow = $1 AND state = 'QUEUED' ORDER BY id LIMIT 1")
            .bind(flow)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((run_id,)) = next else {
        return Ok(None);
    };
    sqlx::query("UPDATE runs SET state = 'RUNNING', started_at = $1 WHERE id = $2")
        .bind(now_ms)
        .bind(&run_id)
        .execute(&mut *tx)
        .await?;
    started(&mut tx, &run_id, "engine", now_ms).await?;
    tx.commit().await?;
    Ok(Some(run_id))
}

pub(super) async fn put_log(pool: &PgPool, log: &LogRecord) -> Result<()> {
    let mut tx = pool.begin().await?;
    put_log_in(&mut tx, log).await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn put_log_in(tx: &mut Transaction<'_, Postgres>, log: &LogRecord) -> Result<()> {
    sqlx::query(
        "INSERT INTO logs (run_id, node, attempt, content) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (run_id, node, attempt) DO UPDATE SET content = excluded.content",
    )
    .bind(&log.run_id)
    .bind(&log.node)
    .bind(i64::from(log.attempt))
    .bind(&log.content)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Deletes one small batch so the engine's writes are never blocked for long.
pub(super) async fn prune(pool: &PgPool, before_ms: i64, batch: u32) -> Result<u64> {
    let mut tx = pool.begin().await?;
    let ids: Vec<(String,)> = sqlx::query_as(
        "SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < $1 \
         AND state IN ('SUCCESS', 'FAILED', 'CANCELLED') LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(before_ms)
    .bind(i64::from(batch))
    .fetch_all(&mut *tx)
    .await?;
    let ids: Vec<String> = ids.into_iter().map(|(id,)| id).collect();
    let mut deleted = 0;
    if !ids.is_empty() {
        for table in ["nodes", "transitions", "node_outputs", "attempts", "logs"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE run_id = ANY($1)"))
                .bind(&ids)
                .execute(&mut *tx)
                .await?;
        }
        deleted = sqlx::query("DELETE FROM runs WHERE id = ANY($1)")
            .bind(&ids)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    }
    sqlx::query("DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at < $1 LIMIT $2)")
        .bind(before_ms)
        .bind(i64::from(batch))
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "DELETE FROM run_commands WHERE id IN (SELECT id FROM run_commands WHERE created_at < $1 LIMIT $2)",
    )
    .bind(before_ms)
    .bind(i64::from(batch))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(deleted)
}
