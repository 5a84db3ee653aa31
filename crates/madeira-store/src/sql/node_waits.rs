//! Node-level `after:` waits (`node_waits`): what one node of a run waits for, and
//! whether it is met (read from the runs and nodes tables, like a run's waits, so
//! the commit that makes the upstream SUCCESS is what makes the node startable);
//! the runs to tell when an upstream succeeds (with the replica holding each);
//! the nodes held now (for `after_policy`); and dropping a node's waits. Also who
//! holds a run (a sub-flow child's end is told to its parent's holder).

use super::{D, Pool, sql};
use crate::admission::{NODE_MET, RUN_MET, wait_met};
use crate::dialect::Dialect;
use crate::{AfterWait, HeldNode, NodeWaitState, Result};

/// An unmet wait `w` of an INIT node (`hn`) of a RUNNING run (`r`). Read from
/// `node_waits` (small: only nodes with `after`), never from `nodes` by state,
/// which has no index on it and holds every node of the history.
const HELD_NODE: &str = concat!(
    "FROM node_waits w JOIN runs r ON r.id = w.run_id ",
    "JOIN nodes hn ON hn.run_id = w.run_id AND hn.node = w.node ",
    "WHERE r.state = 'RUNNING' AND hn.state = 'INIT' AND NOT ",
    wait_met!(),
);

type WaitRow = (String, Option<String>, String, String);

/// Every node wait of `run_id`, with where its upstream stands.
pub(super) async fn node_waits(pool: &Pool, run_id: &str) -> Result<Vec<NodeWaitState>> {
    let rows: Vec<WaitRow> = sqlx::query_as(&sql(
        "SELECT upstream_flow, upstream_node, upstream_date, node FROM node_waits WHERE run_id = $1 \
         ORDER BY node, seq",
    ))
    .bind(run_id)
    .fetch_all(pool)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for (flow, node, date, waiting) in rows {
        let wait = AfterWait { flow, node, date };
        out.push(state_of(pool, waiting, wait).await?);
    }
    Ok(out)
}

async fn state_of(pool: &Pool, node: String, wait: AfterWait) -> Result<NodeWaitState> {
    let met: Option<(String,)> = match &wait.node {
        None => sqlx::query_as(&sql(RUN_MET)).bind(&wait.flow).bind(&wait.date).fetch_optional(pool).await?,
        Some(n) => {
            sqlx::query_as(&sql(NODE_MET))
                .bind(&wait.flow)
                .bind(&wait.date)
                .bind(n)
                .bind(n)
                .fetch_optional(pool)
                .await?
        }
    };
    let latest: Option<(String, String, Option<i64>)> =
        sqlx::query_as(&sql("SELECT id, state, started_at FROM runs WHERE flow = $1 AND biz_date = $2 \
         ORDER BY created_at DESC, id DESC LIMIT 1"))
        .bind(&wait.flow)
        .bind(&wait.date)
        .fetch_optional(pool)
        .await?;
    let (upstream_run, mut upstream_state, mut upstream_since) = match latest {
        Some((id, state, since)) => (Some(id), Some(state), since),
        None => (None, None, None),
    };
    if let (Some(run), Some(n)) = (&upstream_run, &wait.node) {
        let row: Option<(String, Option<i64>)> =
            sqlx::query_as(&sql("SELECT state, started_at FROM nodes WHERE run_id = $1 AND node = $2"))
                .bind(run)
                .bind(n)
                .fetch_optional(pool)
                .await?;
        let row = match row {
            Some(row) => Some(row),
            // Folded (read after the row: a fold meanwhile is seen here).
            None => super::archive::archived_in(pool, run)
                .await?
                .and_then(|f| f.nodes.into_iter().find(|x| x.node == *n))
                .map(|x| (x.state.as_str().to_string(), x.started_at)),
        };
        (upstream_state, upstream_since) = row.map_or((None, None), |(s, at)| (Some(s), at));
    }
    Ok(NodeWaitState { node, wait, met: met.is_some(), upstream_run, upstream_state, upstream_since })
}

/// RUNNING runs with an INIT node waiting for `flow` on `date`, and their holders.
pub(super) async fn node_waiters(
    pool: &Pool,
    flow: &str,
    date: &str,
) -> Result<Vec<(String, Option<String>)>> {
    Ok(sqlx::query_as(&sql(
        "SELECT DISTINCT r.id, r.owner FROM node_waits w JOIN runs r ON r.id = w.run_id \
         JOIN nodes hn ON hn.run_id = w.run_id AND hn.node = w.node \
         WHERE w.upstream_flow = $1 AND w.upstream_date = $2 AND r.state = 'RUNNING' \
         AND hn.state = 'INIT' ORDER BY r.id",
    ))
    .bind(flow)
    .bind(date)
    .fetch_all(pool)
    .await?)
}

/// INIT nodes of RUNNING runs held by an unmet node wait, oldest run first.
pub(super) async fn held_nodes(pool: &Pool) -> Result<Vec<HeldNode>> {
    let rows: Vec<(String, String, i64, String, i64, Option<String>)> = sqlx::query_as(&format!(
        "SELECT DISTINCT r.id, r.flow, r.version, w.node, r.created_at, r.owner {HELD_NODE} \
         ORDER BY r.id, w.node LIMIT 1000"
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(run_id, flow, version, node, created_at, owner)| HeldNode {
            run_id,
            flow,
            version: version as u32,
            node,
            created_at,
            owner,
        })
        .collect())
}

/// For a sub-flow child run: its parent run and the replica holding that parent.
pub(super) async fn subflow_parent(pool: &Pool, run_id: &str) -> Result<Option<(String, Option<String>)>> {
    let child: Option<(Option<String>,)> = sqlx::query_as(&sql(&format!(
        "SELECT {} FROM runs WHERE id = $1 AND \"trigger\" = '{}'",
        D::bytes_as_text("idempotency_key"),
        madeira_core::subflow::TRIGGER
    )))
    .bind(run_id)
    .fetch_optional(pool)
    .await?;
    let key = child.and_then(|(key,)| key);
    let Some((parent, _, _)) = key.as_deref().and_then(madeira_core::subflow::parse_child_key) else {
        return Ok(None);
    };
    let row: Option<(Option<String>,)> = sqlx::query_as(&sql("SELECT owner FROM runs WHERE id = $1"))
        .bind(&parent)
        .fetch_optional(pool)
        .await?;
    Ok(row.map(|(owner,)| (parent, owner)))
}

/// Drops the waits of `node` of `run_id`: true when it had some.
pub(super) async fn waive_node_waits(pool: &Pool, run_id: &str, node: &str) -> Result<bool> {
    let done = sqlx::query(&sql("DELETE FROM node_waits WHERE run_id = $1 AND node = $2"))
        .bind(run_id)
        .bind(node)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}
