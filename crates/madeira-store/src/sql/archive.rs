//! Folding finished runs into `run_archive` and back (the document: `crate::archive`).
//!
//! `fold` takes a batch of finished runs that are not held (no live lease: a
//! claim of a folded run unfolds it and holds it while the operator's command is
//! applied), locking their rows (`FOR UPDATE SKIP LOCKED`: two replicas folding at
//! once take different runs; SQLite's one writer needs no lock), and in one
//! transaction writes one archive row per run, deletes the run's nodes, attempts,
//! node outputs and transition rows, and marks it `folded` with no owner, so a
//! late commit of its former holder is fenced out (`LeaseLost`) instead of writing
//! rows beside the archive. `unfold` puts the rows back (transition rows with
//! their ids, so later ones still sort after them) in the caller's transaction.
//! Readers read the rows first, then the archive (`archived`): a fold between the
//! two is seen as the archive, whole.

use std::collections::HashMap;

use sqlx::QueryBuilder;

use super::{CHUNK, Conn, D, Db, Pool, Row, push_list, sql};
use crate::archive::{Folded, TransitionRow};
use crate::dialect::Dialect;
use crate::{AttemptRecord, OutputWrite, Result, StoreError};

/// The finished states, as written in SQL.
pub(super) const FINISHED: &str = "('SUCCESS', 'FAILED', 'CANCELLED')";

/// The archived rows of `run_id`, if it is folded. Only a run that is there
/// has them: where archive rows are dropped with their day (time partitions),
/// a pruned run's row outlives it until then.
pub(super) async fn archived(c: &mut Conn, run_id: &str) -> Result<Option<Folded>> {
    let doc: Option<(Vec<u8>,)> = sqlx::query_as(&sql(
        "SELECT a.doc FROM run_archive a JOIN runs r ON r.id = a.run_id WHERE a.run_id = $1",
    ))
    .bind(run_id)
    .fetch_optional(&mut *c)
    .await?;
    doc.map(|(doc,)| Folded::decode(run_id, &doc)).transpose()
}

/// `archived` on a pooled connection.
pub(super) async fn archived_in(pool: &Pool, run_id: &str) -> Result<Option<Folded>> {
    let mut c = pool.acquire().await?;
    archived(&mut c, run_id).await
}

/// The archived rows of those of `run_ids` that are folded.
pub(super) async fn archived_many(pool: &Pool, run_ids: &[&str]) -> Result<HashMap<String, Folded>> {
    let mut out = HashMap::new();
    for chunk in run_ids.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new(
            "SELECT a.run_id, a.doc FROM run_archive a JOIN runs r ON r.id = a.run_id WHERE a.run_id IN ",
        );
        push_list(&mut q, chunk.iter().copied());
        let rows: Vec<(String, Vec<u8>)> = q.build_query_as().fetch_all(pool).await?;
        for (id, doc) in rows {
            let folded = Folded::decode(&id, &doc)?;
            out.insert(id, folded);
        }
    }
    Ok(out)
}

/// Folds up to `batch` runs finished before `before_ms` and not held: returns
/// how many were folded.
pub(super) async fn fold(pool: &Pool, before_ms: i64, batch: u32) -> Result<u64> {
    let mut tx = pool.begin().await?;
    let runs: Vec<(String, i64)> = sqlx::query_as(&sql(&format!(
        "SELECT id, created_at FROM runs WHERE folded = FALSE AND finished_at IS NOT NULL \
         AND finished_at < $1 AND state IN {FINISHED} AND (lease_until IS NULL OR lease_until < {}) \
         ORDER BY finished_at LIMIT $2{}",
        D::NOW_MS,
        D::SKIP_LOCKED
    )))
    .bind(before_ms)
    .bind(i64::from(batch))
    .fetch_all(&mut *tx)
    .await?;
    for chunk in runs.chunks(CHUNK) {
        fold_chunk(&mut tx, chunk).await?;
    }
    tx.commit().await?;
    Ok(runs.len() as u64)
}

/// `SELECT {columns} FROM {table} WHERE run_id IN (ids) ORDER BY run_id, {order}`.
async fn rows_of(c: &mut Conn, table: &str, columns: &str, order: &str, ids: &[&str]) -> Result<Vec<Row>> {
    let mut q: QueryBuilder<Db> =
        QueryBuilder::new(format!("SELECT {columns} FROM {table} WHERE run_id IN "));
    push_list(&mut q, ids.iter().copied());
    q.push(format!(" ORDER BY run_id, {order}"));
    Ok(q.build().fetch_all(&mut *c).await?)
}

async fn fold_chunk(c: &mut Conn, runs: &[(String, i64)]) -> Result<()> {
    let ids: Vec<&str> = runs.iter().map(|(id, _)| id.as_str()).collect();
    let mut folded: HashMap<String, Folded> = HashMap::new();
    for row in rows_of(c, "nodes", super::read::NODE_COLUMNS, "idx", &ids).await? {
        let node = super::read::node_row(&row)?;
        folded.entry(node.run_id.clone()).or_default().nodes.push(node);
    }
    for row in rows_of(c, "attempts", super::read::ATTEMPT_COLUMNS, "node, attempt", &ids).await? {
        let a = super::read::attempt_row(&row)?;
        folded.entry(a.run_id.clone()).or_default().attempts.push(a);
    }
    let output_columns = format!("run_id, node, data_version, {}, value", D::bytes_as_text("\"key\""));
    for row in rows_of(c, "node_outputs", &output_columns, "node, data_version, \"key\"", &ids).await? {
        let o = output_row(&row)?;
        folded.entry(o.run_id.clone()).or_default().outputs.push(o);
    }
    for row in rows_of(c, "transitions", "run_id, id, at, entries", "id", &ids).await? {
        use sqlx::Row as _;
        let run_id: String = row.try_get("run_id")?;
        let t = TransitionRow {
            id: row.try_get("id")?,
            at: row.try_get("at")?,
            entries: row.try_get("entries")?,
        };
        folded.entry(run_id).or_default().transitions.push(t);
    }
    // Encoding is CPU work (~0.1 ms a run): off the async workers, which run the engine.
    let owned: Vec<(String, i64, Folded)> =
        runs.iter().map(|(id, at)| (id.clone(), *at, folded.remove(id).unwrap_or_default())).collect();
    let docs = tokio::task::spawn_blocking(move || {
        owned
            .into_iter()
            .map(|(id, at, f)| Ok((f.nodes.len() as i64, f.succeeded(), f.encode(&id, at)?, id)))
            .collect::<Result<Vec<_>>>()
    })
    .await
    .map_err(|e| StoreError::Corrupt { table: "run_archive", detail: format!("encoding task: {e}") })??;
    let mut q: QueryBuilder<Db> =
        QueryBuilder::new("INSERT INTO run_archive (run_id, nodes, succeeded, doc) ");
    q.push_values(docs, |mut b, (nodes, succeeded, doc, id)| {
        b.push_bind(id).push_bind(nodes).push_bind(succeeded).push_bind(doc);
    });
    q.build().execute(&mut *c).await?;
    for table in ["nodes", "attempts", "node_outputs", "transitions"] {
        let mut q: QueryBuilder<Db> = QueryBuilder::new(format!("DELETE FROM {table} WHERE run_id IN "));
        push_list(&mut q, ids.iter().copied());
        q.build().execute(&mut *c).await?;
    }
    let mut q: QueryBuilder<Db> =
        QueryBuilder::new("UPDATE runs SET folded = TRUE, owner = NULL, lease_until = NULL WHERE id IN ");
    push_list(&mut q, ids.iter().copied());
    q.build().execute(&mut *c).await?;
    Ok(())
}

fn output_row(row: &Row) -> Result<OutputWrite> {
    use sqlx::Row as _;
    let value: String = row.try_get("value")?;
    Ok(OutputWrite {
        run_id: row.try_get("run_id")?,
        node: row.try_get("node")?,
        data_version: row.try_get::<i64, _>("data_version")? as u32,
        key: row.try_get("key")?,
        value: serde_json::from_str(&value)
            .map_err(|e| StoreError::Corrupt { table: "node_outputs", detail: e.to_string() })?,
    })
}

/// Puts the archived rows of `run_id` back into their tables and drops its
/// archive row, in the caller's transaction (which holds the run's row).
pub(super) async fn unfold(c: &mut Conn, run_id: &str) -> Result<()> {
    let folded = archived(c, run_id).await?.unwrap_or_default();
    insert_rows(c, run_id, &folded).await?;
    sqlx::query(&sql("DELETE FROM run_archive WHERE run_id = $1")).bind(run_id).execute(&mut *c).await?;
    sqlx::query(&sql("UPDATE runs SET folded = FALSE WHERE id = $1")).bind(run_id).execute(&mut *c).await?;
    Ok(())
}

async fn insert_rows(c: &mut Conn, run_id: &str, f: &Folded) -> Result<()> {
    for chunk in f.nodes.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> =
            QueryBuilder::new(format!("INSERT INTO nodes ({}) ", super::read::NODE_COLUMNS));
        q.push_values(chunk, |mut b, n| {
            b.push_bind(&n.run_id)
                .push_bind(i64::from(n.idx))
                .push_bind(&n.node)
                .push_bind(n.state.as_str())
                .push_bind(&n.reason)
                .push_bind(i64::from(n.attempt))
                .push_bind(i64::from(n.series_start))
                .push_bind(i64::from(n.data_version))
                .push_bind(serde_json::Value::Object(n.outputs.clone()).to_string())
                .push_bind(crate::reads_json(&n.reads))
                .push_bind(n.stale)
                .push_bind(n.fallback)
                .push_bind(n.next_attempt_at)
                .push_bind(n.started_at)
                .push_bind(n.finished_at);
        });
        q.build().execute(&mut *c).await?;
    }
    for chunk in f.attempts.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> =
            QueryBuilder::new(format!("INSERT INTO attempts ({}) ", super::read::ATTEMPT_COLUMNS));
        q.push_values(chunk, |mut b, a: &AttemptRecord| {
            b.push_bind(&a.run_id)
                .push_bind(&a.node)
                .push_bind(i64::from(a.attempt))
                .push_bind(a.started_at)
                .push_bind(a.finished_at)
                .push_bind(&a.outcome)
                .push_bind(&a.error)
                .push_bind(&a.host);
        });
        q.build().execute(&mut *c).await?;
    }
    for chunk in f.outputs.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> =
            QueryBuilder::new("INSERT INTO node_outputs (run_id, node, data_version, \"key\", value) ");
        q.push_values(chunk, |mut b, o| {
            b.push_bind(&o.run_id)
                .push_bind(&o.node)
                .push_bind(i64::from(o.data_version))
                .push_bind(&o.key)
                .push_bind(o.value.to_string());
        });
        q.build().execute(&mut *c).await?;
    }
    for chunk in f.transitions.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new("INSERT INTO transitions (id, run_id, at, entries) ");
        q.push_values(chunk, |mut b, t| {
            b.push_bind(t.id).push_bind(run_id).push_bind(t.at).push_bind(&t.entries);
        });
        q.build().execute(&mut *c).await?;
    }
    Ok(())
}

/// How many runs are folded, and how many node rows they hold.
pub(super) async fn counts(pool: &Pool) -> Result<(u64, u64)> {
    let (runs, nodes): (i64, Option<i64>) =
        sqlx::query_as(&format!("SELECT COUNT(*), CAST(SUM(nodes) AS {}) FROM run_archive", D::BIGINT))
            .fetch_one(pool)
            .await?;
    Ok((runs.max(0) as u64, nodes.unwrap_or(0).max(0) as u64))
}
