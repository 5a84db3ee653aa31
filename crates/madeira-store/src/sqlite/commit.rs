//! The group commit: one transaction writes every node row, run row, transition
//! record, output, attempt and audit entry of a batch, with multi-row statements.

use sqlx::{QueryBuilder, Sqlite, SqlitePool, Transaction};

use super::runs::CHUNK;
use crate::{Batch, Result, reads_json};

pub(super) async fn commit(pool: &SqlitePool, batch: &Batch) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    if let Some(owner) = &batch.owner {
        super::lease::fence(&mut tx, owner, &crate::lease::touched_runs(batch)).await?;
    }
    write_nodes(&mut tx, batch).await?;
    write_runs(&mut tx, batch).await?;
    write_transitions(&mut tx, batch).await?;
    write_outputs(&mut tx, batch).await?;
    write_attempts(&mut tx, batch).await?;
    write_audit(&mut tx, batch).await?;
    super::permits::release(&mut tx, &batch.permit_releases).await?;
    for chunk in batch.alert_events.chunks(CHUNK) {
        let at = crate::unix_ms();
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new("INSERT INTO alert_inbox (body, created_at) ");
        q.push_values(chunk, |mut row, body| {
            row.push_bind(body).push_bind(at);
        });
        q.build().execute(&mut *tx).await?;
    }
    for a in &batch.answers {
        sqlx::query("UPDATE run_commands SET answer = ?, answered_at = ? WHERE id = ?")
            .bind(&a.answer)
            .bind(a.at)
            .bind(a.id)
            .execute(&mut *tx)
            .await?;
    }
    for log in &batch.logs {
        super::runs::put_log_in(&mut tx, log).await?;
    }
    tx.commit().await?;
    Ok(())
}

async fn write_nodes(tx: &mut Transaction<'_, Sqlite>, batch: &Batch) -> Result<()> {
    for chunk in batch.nodes.chunks(CHUNK) {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO nodes (run_id, idx, node, state, reason, attempt, series_start, \
             data_version, outputs, reads, stale, fallback, next_attempt_at, started_at, finished_at) ",
        );
        q.push_values(chunk, |mut b, n| {
            b.push_bind(&n.run_id)
                .push_bind(n.idx)
                .push_bind(&n.node)
                .push_bind(n.state.as_str())
                .push_bind(&n.reason)
                .push_bind(n.attempt)
                .push_bind(n.series_start)
                .push_bind(n.data_version)
                .push_bind(serde_json::Value::Object(n.outputs.clone()).to_string())
                .push_bind(reads_json(&n.reads))
                .push_bind(n.stale)
                .push_bind(n.fallback)
                .push_bind(n.next_attempt_at)
                .push_bind(n.started_at)
                .push_bind(n.finished_at);
        });
        q.push(
            " ON CONFLICT(run_id, idx) DO UPDATE SET state = excluded.state, reason = excluded.reason, \
             attempt = excluded.attempt, series_start = excluded.series_start, \
             data_version = excluded.data_version, outputs = excluded.outputs, reads = excluded.reads, \
             stale = excluded.stale, fallback = excluded.fallback, \
             next_attempt_at = excluded.next_attempt_at, started_at = excluded.started_at, \
             finished_at = excluded.finished_at",
        );
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

async fn write_runs(tx: &mut Transaction<'_, Sqlite>, batch: &Batch) -> Result<()> {
    for r in &batch.runs {
        sqlx::query(
            "UPDATE runs SET state = ?, started_at = COALESCE(?, started_at), finished_at = ? \
             WHERE id = ?",
        )
        .bind(r.state.as_str())
        .bind(r.started_at)
        .bind(r.finished_at)
        .bind(&r.run_id)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

async fn write_transitions(tx: &mut Transaction<'_, Sqlite>, batch: &Batch) -> Result<()> {
    for chunk in batch.transitions.chunks(CHUNK) {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO transitions (run_id, node, from_state, to_state, cause, actor, attempt, \
             reason, at) ",
        );
        q.push_values(chunk, |mut b, t| {
            b.push_bind(&t.run_id)
                .push_bind(&t.node)
                .push_bind(&t.from)
                .push_bind(&t.to)
                .push_bind(&t.cause)
                .push_bind(&t.actor)
                .push_bind(t.attempt)
                .push_bind(&t.reason)
                .push_bind(t.at);
        });
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

async fn write_outputs(tx: &mut Transaction<'_, Sqlite>, batch: &Batch) -> Result<()> {
    for chunk in batch.outputs.chunks(CHUNK) {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT OR REPLACE INTO node_outputs (run_id, node, data_version, key, value) ",
        );
        q.push_values(chunk, |mut b, o| {
            b.push_bind(&o.run_id)
                .push_bind(&o.node)
                .push_bind(o.data_version)
                .push_bind(&o.key)
                .push_bind(o.value.to_string());
        });
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

async fn write_attempts(tx: &mut Transaction<'_, Sqlite>, batch: &Batch) -> Result<()> {
    for chunk in batch.attempts.chunks(CHUNK) {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(
            "INSERT INTO attempts (run_id, node, attempt, started_at, finished_at, outcome, error) ",
        );
        q.push_values(chunk, |mut b, a| {
            b.push_bind(&a.run_id)
                .push_bind(&a.node)
                .push_bind(a.attempt)
                .push_bind(a.started_at)
                .push_bind(a.finished_at)
                .push_bind(&a.outcome)
                .push_bind(&a.error);
        });
        q.push(
            " ON CONFLICT(run_id, node, attempt) DO UPDATE SET finished_at = excluded.finished_at, \
             outcome = excluded.outcome, error = excluded.error",
        );
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

async fn write_audit(tx: &mut Transaction<'_, Sqlite>, batch: &Batch) -> Result<()> {
    for a in &batch.audit {
        sqlx::query(
            "INSERT INTO audit (at, actor, action, run_id, node, reason, details) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(a.at)
        .bind(&a.actor)
        .bind(&a.action)
        .bind(&a.run_id)
        .bind(&a.node)
        .bind(&a.reason)
        .bind(a.details.as_ref().map(|d| d.to_string()))
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}
