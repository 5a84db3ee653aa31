//! Queries: runs with their nodes and attempts, run listings with a cursor, the
//! transition log, logs and the audit trail.

use madeira_core::keys::CRON_PREFIX;
use madeira_core::state::{NodeState, RunState};
use sqlx::QueryBuilder;
use sqlx::Row as _;

use super::{D, Db, Pool, Row, sql};
use crate::admission::UNFINISHED;
use crate::dialect::Dialect;
use crate::{
    AttemptRecord, AuditQuery, AuditRecord, LogRecord, NodeRow, Result, RunQuery, RunRow, StoreError,
    StoredRun, TransitionRecord,
};

/// The columns `run_row` reads.
pub(super) fn run_columns() -> String {
    format!(
        "id, flow, version, state, params, {}, \"trigger\", actor, created_at, admitted_at, started_at, \
         finished_at, trace_context, biz_date, wait_reason",
        D::bytes_as_text("idempotency_key")
    )
}

fn corrupt(table: &'static str, detail: impl ToString) -> StoreError {
    StoreError::Corrupt { table, detail: detail.to_string() }
}

pub(super) fn run_row(row: &Row) -> Result<RunRow> {
    let params: String = row.try_get("params")?;
    let state: String = row.try_get("state")?;
    Ok(RunRow {
        id: row.try_get("id")?,
        flow: row.try_get("flow")?,
        version: row.try_get::<i64, _>("version")? as u32,
        state: state.parse().map_err(|e| corrupt("runs", e))?,
        params: serde_json::from_str(&params).map_err(|e| corrupt("runs", e))?,
        idempotency_key: row.try_get("idempotency_key")?,
        trigger: row.try_get("trigger")?,
        actor: row.try_get("actor")?,
        created_at: row.try_get("created_at")?,
        admitted_at: row.try_get("admitted_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        trace_context: row.try_get("trace_context")?,
        biz_date: row.try_get("biz_date")?,
        wait_reason: row.try_get("wait_reason")?,
    })
}

/// The columns `node_row` reads, in the order `archive` inserts them.
pub(super) const NODE_COLUMNS: &str = "run_id, idx, node, state, reason, attempt, series_start, data_version, \
     outputs, \"reads\", stale, fallback, next_attempt_at, started_at, finished_at";
/// The columns `attempt_row` reads, in the order `archive` inserts them.
pub(super) const ATTEMPT_COLUMNS: &str =
    "run_id, node, attempt, started_at, finished_at, outcome, error, host";

pub(super) fn node_row(row: &Row) -> Result<NodeRow> {
    let state: String = row.try_get("state")?;
    let outputs: String = row.try_get("outputs")?;
    let reads: String = row.try_get("reads")?;
    let reads: Vec<[u64; 2]> = serde_json::from_str(&reads).map_err(|e| corrupt("nodes", e))?;
    Ok(NodeRow {
        run_id: row.try_get("run_id")?,
        idx: row.try_get::<i64, _>("idx")? as u32,
        node: row.try_get("node")?,
        state: state.parse().map_err(|e| corrupt("nodes", e))?,
        reason: row.try_get("reason")?,
        attempt: row.try_get::<i64, _>("attempt")? as u32,
        series_start: row.try_get::<i64, _>("series_start")? as u32,
        data_version: row.try_get::<i64, _>("data_version")? as u32,
        outputs: serde_json::from_str(&outputs).map_err(|e| corrupt("nodes", e))?,
        reads: reads.into_iter().map(|[u, v]| (u as usize, v as u32)).collect(),
        stale: row.try_get("stale")?,
        fallback: row.try_get("fallback")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
    })
}

pub(super) fn attempt_row(row: &Row) -> Result<AttemptRecord> {
    Ok(AttemptRecord {
        run_id: row.try_get("run_id")?,
        node: row.try_get("node")?,
        attempt: row.try_get::<i64, _>("attempt")? as u32,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        outcome: row.try_get("outcome")?,
        error: row.try_get("error")?,
        host: row.try_get("host")?,
    })
}

/// A run with its nodes and attempts: from their rows, or from the archive when
/// the run is folded. The rows are read first and the archive after them, so a
/// fold in between is seen as the archive (a finished run with no node or no
/// attempt row is looked up there), and an unfold in between as the rows.
pub(super) async fn load_run(pool: &Pool, run_id: &str) -> Result<Option<StoredRun>> {
    let Some(row) = sqlx::query(&sql(&format!("SELECT {}, folded FROM runs WHERE id = $1", run_columns())))
        .bind(run_id)
        .fetch_optional(pool)
        .await?
    else {
        return Ok(None);
    };
    let run = run_row(&row)?;
    let folded: bool = row.try_get("folded")?;
    let finished = run.state.is_terminal();
    if folded && let Some(f) = super::archive::archived_in(pool, run_id).await? {
        return Ok(Some(StoredRun { run, nodes: f.nodes, attempts: f.attempts }));
    }
    let nodes =
        sqlx::query(&sql(&format!("SELECT {NODE_COLUMNS} FROM nodes WHERE run_id = $1 ORDER BY idx")))
            .bind(run_id)
            .fetch_all(pool)
            .await?
            .iter()
            .map(node_row)
            .collect::<Result<Vec<_>>>()?;
    let attempts = sqlx::query(&sql(&format!(
        "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE run_id = $1 ORDER BY node, attempt"
    )))
    .bind(run_id)
    .fetch_all(pool)
    .await?
    .iter()
    .map(attempt_row)
    .collect::<Result<Vec<_>>>()?;
    if finished
        && (nodes.is_empty() || attempts.is_empty())
        && let Some(f) = super::archive::archived_in(pool, run_id).await?
    {
        return Ok(Some(StoredRun { run, nodes: f.nodes, attempts: f.attempts }));
    }
    Ok(Some(StoredRun { run, nodes, attempts }))
}

pub(super) async fn unfinished_runs(pool: &Pool) -> Result<Vec<String>> {
    let rows: Vec<(String,)> =
        sqlx::query_as(&sql(&format!("SELECT id FROM runs WHERE state IN {UNFINISHED} ORDER BY id")))
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

/// The condition on `state` for a shown state filter: QUEUED stands for ADMITTED
/// too (`RunState::shown`), any other state for itself. Known states are written
/// as literals (they come from the core's names, never from the caller's text), so
/// PostgreSQL plans with the state's real frequency: with bound values its generic
/// plan walks the primary key backwards filtering every row (718 ms for the two
/// QUEUED runs among 1M, against 0.2 ms on `runs_state_id`). `None` for a name
/// that is no state: it matches no run.
fn state_condition(state: &str) -> Option<String> {
    match state.to_ascii_uppercase().parse::<RunState>().ok()? {
        RunState::Queued => {
            Some(format!("state IN ('{}', '{}')", RunState::Queued.as_str(), RunState::Admitted.as_str()))
        }
        other => Some(format!("state = '{}'", other.as_str())),
    }
}

pub(super) async fn list_runs(pool: &Pool, query: &RunQuery) -> Result<Vec<RunRow>> {
    let mut q: QueryBuilder<Db> = QueryBuilder::new(format!(
        "SELECT {} FROM runs{} WHERE 1 = 1",
        run_columns(),
        D::runs_list_hint(query.flow.is_some(), query.state.is_some())
    ));
    if let Some(flow) = &query.flow {
        q.push(" AND flow = ").push_bind(flow);
    }
    if let Some(state) = &query.state {
        match state_condition(state) {
            Some(condition) => q.push(" AND ").push(condition),
            None => return Ok(Vec::new()),
        };
    }
    if let Some(actor) = &query.actor {
        q.push(" AND actor = ").push_bind(actor);
    }
    if let Some(biz_date) = &query.biz_date {
        q.push(" AND biz_date = ").push_bind(biz_date);
    }
    if let Some(before) = &query.before {
        q.push(" AND id < ").push_bind(before);
    }
    q.push(" ORDER BY id DESC LIMIT ").push_bind(i64::from(query.limit.max(1)));
    q.build().fetch_all(pool).await?.iter().map(run_row).collect()
}

/// Counts at most `cap` rows: an index range scan on `runs_state_id` that stops at the cap.
pub(super) async fn count_runs(pool: &Pool, state: &str, since_id: &str, cap: u32) -> Result<u32> {
    let Some(condition) = state_condition(state) else { return Ok(0) };
    let (n,): (i64,) = sqlx::query_as(&sql(&format!(
        "SELECT COUNT(*) FROM (SELECT 1 AS one FROM runs WHERE {condition} AND id >= $1 LIMIT $2) AS capped"
    )))
    .bind(since_id)
    .bind(i64::from(cap))
    .fetch_one(pool)
    .await?;
    Ok(u32::try_from(n).unwrap_or(cap))
}

/// Runs in RUNNING with a MANUAL_CONFIRM node, by when their first such node
/// started (running runs are never folded: their node rows are there): `runs_state_id` gives the running runs, the nodes' primary key their
/// nodes (the states written as literals, see `state_condition`).
pub(super) async fn awaiting_confirmation(pool: &Pool, limit: u32) -> Result<Vec<String>> {
    let rows: Vec<(String, i64)> = sqlx::query_as(&sql(&format!(
        "SELECT n.run_id, COALESCE(MIN(n.started_at), 0) AS since FROM runs r JOIN nodes n ON n.run_id = r.id \
         WHERE r.state = '{}' AND n.state = '{}' GROUP BY n.run_id ORDER BY since, n.run_id LIMIT $1",
        RunState::Running.as_str(),
        NodeState::ManualConfirm.as_str()
    )))
    .bind(i64::from(limit.max(1)))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(id, _)| id).collect())
}

/// The run's transition log: its rows, or the archive's when it has none (a
/// folded run; one statement reads the rows, so rows found are the whole log).
pub(super) async fn transitions(pool: &Pool, run_id: &str) -> Result<Vec<TransitionRecord>> {
    let rows = transition_rows(pool, run_id).await?;
    if rows.is_empty() {
        if let Some(f) = super::archive::archived_in(pool, run_id).await? {
            return f.log(run_id);
        }
        // Unfolded since the rows were read: they are there now.
        return unpack_rows(run_id, transition_rows(pool, run_id).await?);
    }
    unpack_rows(run_id, rows)
}

async fn transition_rows(pool: &Pool, run_id: &str) -> Result<Vec<(i64, String)>> {
    Ok(sqlx::query_as(&sql("SELECT at, entries FROM transitions WHERE run_id = $1 ORDER BY id"))
        .bind(run_id)
        .fetch_all(pool)
        .await?)
}

fn unpack_rows(run_id: &str, rows: Vec<(i64, String)>) -> Result<Vec<TransitionRecord>> {
    let mut log = Vec::new();
    for (at, entries) in rows {
        log.extend(crate::packed::unpack(run_id, at, &entries)?);
    }
    Ok(log)
}

/// The stored log of each of the node's attempts, and an empty one for each
/// finished attempt without a log row (it printed nothing: see `RunStore::logs`).
/// The attempts are the rows', or the archive's when the node has none (logs are
/// never folded). Only a run that is there has logs: where logs are dropped
/// with their day (time partitions), a pruned run's rows outlive it until then.
pub(super) async fn logs(pool: &Pool, run_id: &str, node: &str) -> Result<Vec<LogRecord>> {
    let stored: Vec<(i64, String)> =
        sqlx::query_as(&sql("SELECT attempt, content FROM logs WHERE run_id = $1 AND node = $2 \
         AND EXISTS (SELECT 1 FROM runs WHERE id = $3)"))
        .bind(run_id)
        .bind(node)
        .bind(run_id)
        .fetch_all(pool)
        .await?;
    let attempts: Vec<(i64,)> = sqlx::query_as(&sql(
        "SELECT attempt FROM attempts WHERE run_id = $1 AND node = $2 AND finished_at IS NOT NULL",
    ))
    .bind(run_id)
    .bind(node)
    .fetch_all(pool)
    .await?;
    let mut finished: Vec<u32> = attempts.into_iter().map(|(a,)| a as u32).collect();
    if finished.is_empty()
        && let Some(f) = super::archive::archived_in(pool, run_id).await?
    {
        let of_node = f.attempts.into_iter().filter(|a| a.node == node && a.finished_at.is_some());
        finished = of_node.map(|a| a.attempt).collect();
    }
    let mut out: Vec<LogRecord> = stored
        .into_iter()
        .map(|(attempt, content)| LogRecord {
            run_id: run_id.to_string(),
            node: node.to_string(),
            attempt: attempt as u32,
            content,
        })
        .collect();
    for attempt in finished {
        if !out.iter().any(|l| l.attempt == attempt) {
            out.push(LogRecord {
                run_id: run_id.to_string(),
                node: node.to_string(),
                attempt,
                content: String::new(),
            });
        }
    }
    out.sort_by_key(|l| l.attempt);
    Ok(out)
}

pub(super) async fn audit(pool: &Pool, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
    let mut q: QueryBuilder<Db> =
        QueryBuilder::new("SELECT at, actor, action, run_id, node, reason, details FROM audit WHERE 1 = 1");
    if let Some(run_id) = &query.run_id {
        q.push(" AND run_id = ").push_bind(run_id);
    }
    if let Some(actor) = &query.actor {
        q.push(" AND actor = ").push_bind(actor);
    }
    if let Some(since) = query.since_ms {
        q.push(" AND at >= ").push_bind(since);
    }
    q.push(" ORDER BY id DESC LIMIT ").push_bind(i64::from(query.limit.max(1)));
    q.build()
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| {
            let details: Option<String> = r.try_get("details")?;
            Ok(AuditRecord {
                at: r.try_get("at")?,
                actor: r.try_get("actor")?,
                action: r.try_get("action")?,
                run_id: r.try_get("run_id")?,
                node: r.try_get("node")?,
                reason: r.try_get("reason")?,
                details: details.and_then(|d| serde_json::from_str(&d).ok()),
            })
        })
        .collect()
}

pub(super) async fn last_cron_key(pool: &Pool, flow: &str) -> Result<Option<String>> {
    // Keys are `cron:<flow>:<RFC 3339 UTC with milliseconds>`: they sort by instant
    // (compared bytewise, whatever the database collation).
    let (column, order) = D::cron_key_order();
    let row: Option<(String,)> = sqlx::query_as(&sql(&format!(
        "SELECT {} FROM runs WHERE flow = $1 AND {column} LIKE '{CRON_PREFIX}%' ORDER BY {order} DESC LIMIT 1",
        D::bytes_as_text("idempotency_key"),
    )))
    .bind(flow)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(key,)| key))
}
