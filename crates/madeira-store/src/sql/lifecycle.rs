//! The SQL of a flow's lifecycle: events kept for a paused flow (decided under
//! the flow's lock, as `set_paused` is, so none is kept after a resume read the
//! queue), and deleting a flow with its history kept or purged.

use madeira_core::keys::RunKey;
use sqlx::QueryBuilder;
use sqlx::Row as _;

use super::runs::lock_flow;
use super::{CHUNK, D, Db, Pool, Tx, push_list, sql};
use crate::admission::UNFINISHED;
use crate::dialect::Dialect as _;
use crate::{AuditRecord, DeleteFlow, DeleteOutcome, QueueOutcome, QueuedEvent, Result, StoreError};

/// Keeps `event` for its paused flow unless its run exists, it already waits, the
/// flow is not paused, or `limit` events of its type already wait.
pub(super) async fn queue_event(pool: &Pool, event: &QueuedEvent, limit: u32) -> Result<QueueOutcome> {
    let mut tx = pool.begin().await?;
    lock_flow(&mut tx, &event.flow).await?;
    let flow: Option<(bool,)> =
        sqlx::query_as(&sql("SELECT paused FROM flows WHERE name = $1 AND deleted_at IS NULL"))
            .bind(&event.flow)
            .fetch_optional(&mut *tx)
            .await?;
    match flow {
        None => return Ok(QueueOutcome::FlowNotFound),
        Some((false,)) => return Ok(QueueOutcome::NotPaused),
        Some((true,)) => {}
    }
    let key = RunKey::Event { kind: event.event_type.clone(), id: event.event_id.clone() }.to_string();
    let run: Option<(String,)> =
        sqlx::query_as(&sql("SELECT id FROM runs WHERE flow = $1 AND idempotency_key = $2"))
            .bind(&event.flow)
            .bind(&key)
            .fetch_optional(&mut *tx)
            .await?;
    if let Some((run_id,)) = run {
        return Ok(QueueOutcome::Existing { run_id });
    }
    if let Some((id, queued_at)) = find(&mut tx, event).await? {
        let position = position(&mut tx, &event.flow, id).await?;
        return Ok(QueueOutcome::AlreadyQueued { id, position, queued_at });
    }
    let (queued,): (i64,) =
        sqlx::query_as(&sql("SELECT COUNT(*) FROM paused_events WHERE flow = $1 AND event_type = $2"))
            .bind(&event.flow)
            .bind(&event.event_type)
            .fetch_one(&mut *tx)
            .await?;
    if queued >= i64::from(limit) {
        return Ok(QueueOutcome::Full { queued: queued as u64 });
    }
    sqlx::query(&sql("INSERT INTO paused_events (flow, event_type, event_id, payload, actor, queued_at) \
         VALUES ($1, $2, $3, $4, $5, $6)"))
    .bind(&event.flow)
    .bind(&event.event_type)
    .bind(&event.event_id)
    .bind(event.payload.to_string())
    .bind(&event.actor)
    .bind(event.queued_at)
    .execute(&mut *tx)
    .await?;
    let (id, queued_at) = find(&mut tx, event)
        .await?
        .ok_or_else(|| StoreError::Refused("the queued event vanished inside its transaction".into()))?;
    let position = position(&mut tx, &event.flow, id).await?;
    tx.commit().await?;
    Ok(QueueOutcome::Queued { id, position, queued_at })
}

async fn find(tx: &mut Tx<'_>, event: &QueuedEvent) -> Result<Option<(i64, i64)>> {
    Ok(sqlx::query_as(&sql(
        "SELECT id, queued_at FROM paused_events WHERE flow = $1 AND event_type = $2 AND event_id = $3",
    ))
    .bind(&event.flow)
    .bind(&event.event_type)
    .bind(&event.event_id)
    .fetch_optional(&mut **tx)
    .await?)
}

async fn position(tx: &mut Tx<'_>, flow: &str, id: i64) -> Result<u64> {
    let (n,): (i64,) =
        sqlx::query_as(&sql("SELECT COUNT(*) FROM paused_events WHERE flow = $1 AND id <= $2"))
            .bind(flow)
            .bind(id)
            .fetch_one(&mut **tx)
            .await?;
    Ok(n.max(0) as u64)
}

/// Up to `limit` of the events waiting for `flow`, oldest first.
pub(super) async fn queued_events(pool: &Pool, flow: &str, limit: u32) -> Result<Vec<QueuedEvent>> {
    let rows = sqlx::query(&sql(&format!(
        "SELECT id, flow, {}, {}, payload, actor, queued_at FROM paused_events \
             WHERE flow = $1 ORDER BY id LIMIT $2",
        D::bytes_as_text("event_type"),
        D::bytes_as_text("event_id")
    )))
    .bind(flow)
    .bind(i64::from(limit.max(1)))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            let payload: String = row.try_get("payload")?;
            let payload = serde_json::from_str(&payload).map_err(|e| StoreError::Corrupt {
                table: "paused_events",
                detail: format!("payload: {e}"),
            })?;
            Ok(QueuedEvent {
                id: row.try_get("id")?,
                flow: row.try_get("flow")?,
                event_type: row.try_get("event_type")?,
                event_id: row.try_get("event_id")?,
                payload,
                actor: row.try_get("actor")?,
                queued_at: row.try_get("queued_at")?,
            })
        })
        .collect()
}

/// Removes queued events (started, or dropped with a reason recorded by the caller).
pub(super) async fn remove_queued_events(pool: &Pool, ids: &[i64]) -> Result<()> {
    for chunk in ids.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new("DELETE FROM paused_events WHERE id IN ");
        push_list(&mut q, chunk.iter().copied());
        q.build().execute(pool).await?;
    }
    Ok(())
}

/// How many events wait, per flow (flows with none are left out).
pub(super) async fn queued_event_counts(pool: &Pool) -> Result<Vec<(String, u64)>> {
    let rows: Vec<(String, i64)> =
        sqlx::query_as(&sql("SELECT flow, COUNT(*) FROM paused_events GROUP BY flow ORDER BY flow"))
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(|(flow, n)| (flow, n.max(0) as u64)).collect())
}

/// Deletes a flow unless runs of it are active, in one transaction with its audit
/// entry: kept history marks the row deleted; a purge deletes its versions, runs
/// and everything about them (the row stays, so version numbers keep rising).
pub(super) async fn delete_flow(pool: &Pool, req: &DeleteFlow) -> Result<DeleteOutcome> {
    let mut tx = pool.begin().await?;
    lock_flow(&mut tx, &req.flow).await?;
    let exists: Option<(i64,)> =
        sqlx::query_as(&sql("SELECT latest_version FROM flows WHERE name = $1 AND deleted_at IS NULL"))
            .bind(&req.flow)
            .fetch_optional(&mut *tx)
            .await?;
    if exists.is_none() {
        return Ok(DeleteOutcome::NotFound);
    }
    let active: Vec<(String,)> = sqlx::query_as(&sql(&format!(
        "SELECT id FROM runs WHERE flow = $1 AND state IN {UNFINISHED} ORDER BY id LIMIT 100",
    )))
    .bind(&req.flow)
    .fetch_all(&mut *tx)
    .await?;
    if !active.is_empty() {
        return Ok(DeleteOutcome::Active { runs: active.into_iter().map(|(id,)| id).collect() });
    }
    let events_dropped = sqlx::query(&sql("DELETE FROM paused_events WHERE flow = $1"))
        .bind(&req.flow)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    let ids: Vec<String> = sqlx::query_scalar(&sql("SELECT id FROM runs WHERE flow = $1"))
        .bind(&req.flow)
        .fetch_all(&mut *tx)
        .await?;
    if req.purge {
        for chunk in ids.chunks(CHUNK) {
            super::delete_runs(&mut tx, chunk, &["run_commands"], None).await?;
        }
        for table in ["permits", "flow_versions"] {
            sqlx::query(&sql(&format!("DELETE FROM {table} WHERE flow = $1")))
                .bind(&req.flow)
                .execute(&mut *tx)
                .await?;
        }
    }
    sqlx::query(&sql("UPDATE flows SET deleted_at = $1, paused = FALSE, updated_at = $2 WHERE name = $3"))
        .bind(req.now_ms)
        .bind(req.now_ms)
        .bind(&req.flow)
        .execute(&mut *tx)
        .await?;
    insert_audit(&mut tx, &req.audit).await?;
    tx.commit().await?;
    Ok(DeleteOutcome::Deleted { runs: ids.len() as u64, events_dropped })
}

pub(super) async fn insert_audit(tx: &mut Tx<'_>, a: &AuditRecord) -> Result<()> {
    sqlx::query(&sql("INSERT INTO audit (at, actor, action, run_id, node, reason, details) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)"))
    .bind(a.at)
    .bind(&a.actor)
    .bind(&a.action)
    .bind(&a.run_id)
    .bind(&a.node)
    .bind(&a.reason)
    .bind(a.details.as_ref().map(|d| d.to_string()))
    .execute(&mut **tx)
    .await?;
    Ok(())
}
