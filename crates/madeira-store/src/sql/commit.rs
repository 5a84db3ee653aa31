//! The group commit: one transaction writes every node row, run row, transition
//! record, output, attempt and audit entry of a batch, with multi-row statements.
//! On SQLite (`Dialect::SCRIPTS`) the whole transaction is one script, one call
//! to the connection's thread: `BEGIN IMMEDIATE`, the fence, the writes, `COMMIT`.

use std::collections::BTreeMap;

use super::{CHUNK, Conn, D, Script, last_per_key, upsert};
use crate::dialect::{Dialect, TransitionIds};
use crate::{Batch, Result, RunWrite};

pub(super) async fn commit(pool: &super::Pool, ids: Option<&TransitionIds>, batch: &Batch) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    if D::SCRIPTS {
        return commit_script(pool, ids, batch).await;
    }
    let mut tx = pool.begin().await?;
    if let Some(owner) = &batch.owner {
        super::lease::fence(&mut tx, owner, &crate::lease::touched_runs(batch)).await?;
    }
    let mut script = Script::new();
    write_all(&mut tx, &mut script, ids, batch).await?;
    script.send(&mut tx).await?;
    tx.commit().await?;
    Ok(())
}

/// The commit as one script. A statement that fails leaves the transaction open:
/// it is rolled back here (and the dialect replaces the connection after a failed
/// write). A fence that failed is then told as `LeaseLost` by the fence query.
async fn commit_script(pool: &super::Pool, ids: Option<&TransitionIds>, batch: &Batch) -> Result<()> {
    let mut open = OpenScript(Some(pool.acquire().await?));
    let conn = open.conn();
    let mut script = Script::new();
    script.statement().push("BEGIN IMMEDIATE");
    let touched = batch.owner.as_ref().map(|owner| (owner, crate::lease::touched_runs(batch)));
    if let Some((owner, runs)) = &touched {
        super::lease::fence_statements(&mut script, owner, runs);
    }
    let written = async {
        write_all(conn, &mut script, ids, batch).await?;
        script.statement().push("COMMIT");
        script.send(conn).await
    }
    .await;
    let Err(e) = written else {
        open.ended();
        return Ok(());
    };
    // Fails where SQLite ended the transaction itself (a full disk): the error
    // is then told as it is (and the connection replaced).
    let rolled_back = sqlx::query("ROLLBACK").execute(&mut *open.conn()).await.is_ok();
    open.ended();
    if rolled_back && let Some((owner, runs)) = &touched {
        let mut tx = pool.begin().await?;
        super::lease::fence(&mut tx, owner, runs).await?;
    }
    Err(e)
}

/// The writer connection while a script's transaction may be open. Dropped
/// before `ended` (the commit abandoned by its caller, as a request whose client
/// hung up), it leaves the pool and closes, which rolls back whatever the
/// script had begun; the pool opens a fresh connection for the next write.
struct OpenScript(Option<sqlx::pool::PoolConnection<super::Db>>);

impl OpenScript {
    fn conn(&mut self) -> &mut Conn {
        self.0.as_mut().expect("the connection until `ended`")
    }

    /// The transaction is over (committed or rolled back): the connection goes
    /// back to the pool.
    fn ended(mut self) {
        self.0.take();
    }
}

impl Drop for OpenScript {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            drop(conn.detach());
        }
    }
}

/// Adds every write of `batch` to `s` (sent as each ends where the dialect takes
/// no scripts).
async fn write_all<'a>(
    c: &mut Conn,
    s: &mut Script<'a>,
    ids: Option<&TransitionIds>,
    batch: &'a Batch,
) -> Result<()> {
    write_nodes(c, s, batch).await?;
    write_runs(c, s, batch).await?;
    write_transitions(c, s, ids, batch).await?;
    write_outputs(c, s, batch).await?;
    write_attempts(c, s, batch).await?;
    write_audit(c, s, batch).await?;
    for key in &batch.permit_releases {
        let q = s.statement();
        q.push("DELETE FROM permits WHERE flow = ").push_bind(&key.flow);
        q.push(" AND node = ").push_bind(&key.node).push(" AND run_id = ").push_bind(&key.run_id);
        s.end(c).await?;
    }
    for chunk in batch.alert_events.chunks(CHUNK) {
        let at = crate::unix_ms();
        let q = s.statement();
        q.push("INSERT INTO alert_inbox (body, created_at) ");
        q.push_values(chunk, |mut row, body| {
            row.push_bind(body).push_bind(at);
        });
        s.end(c).await?;
    }
    for a in &batch.answers {
        let q = s.statement();
        q.push("UPDATE run_commands SET answer = ").push_bind(&a.answer);
        q.push(", answered_at = ").push_bind(a.at).push(" WHERE id = ").push_bind(a.id);
        s.end(c).await?;
    }
    write_logs(c, s, batch).await
}

async fn write_nodes<'a>(c: &mut Conn, s: &mut Script<'a>, batch: &'a Batch) -> Result<()> {
    for chunk in batch.nodes.chunks(CHUNK) {
        let q = s.statement();
        q.push(
            "INSERT INTO nodes (run_id, idx, node, state, reason, attempt, series_start, \
             data_version, outputs, \"reads\", stale, fallback, next_attempt_at, started_at, finished_at) ",
        );
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
        q.push(upsert(
            "run_id, idx",
            "state, reason, attempt, series_start, data_version, outputs, \"reads\", stale, fallback, \
             next_attempt_at, started_at, finished_at",
        ));
        s.end(c).await?;
    }
    Ok(())
}

async fn write_runs<'a>(c: &mut Conn, s: &mut Script<'a>, batch: &'a Batch) -> Result<()> {
    // One statement for every run of the batch: the last write of a run wins, with
    // the latest start time any of its writes set (as one update after another).
    let mut last: BTreeMap<&str, RunWrite> = BTreeMap::new();
    for r in &batch.runs {
        let started_at = r.started_at.or_else(|| last.get(r.run_id.as_str()).and_then(|w| w.started_at));
        last.insert(r.run_id.as_str(), RunWrite { started_at, ..r.clone() });
    }
    let rows: Vec<RunWrite> = last.into_values().collect();
    let bigint = format!(" AS {})", D::BIGINT);
    for chunk in rows.chunks(CHUNK) {
        let q = s.statement();
        D::update_from(
            q,
            "runs",
            &["id", "state", "started_at", "finished_at"],
            &[
                ("state", "v.state"),
                ("started_at", "COALESCE(v.started_at, runs.started_at)"),
                ("finished_at", "v.finished_at"),
            ],
            chunk,
            |mut b, r| {
                b.push_bind(r.run_id.clone())
                    .push_bind(r.state.as_str())
                    .push("CAST(")
                    .push_bind_unseparated(r.started_at)
                    .push_unseparated(&bigint)
                    .push("CAST(")
                    .push_bind_unseparated(r.finished_at)
                    .push_unseparated(&bigint);
            },
        );
        s.end(c).await?;
    }
    Ok(())
}

async fn write_transitions<'a>(
    c: &mut Conn,
    s: &mut Script<'a>,
    ids: Option<&TransitionIds>,
    batch: &'a Batch,
) -> Result<()> {
    super::insert_transitions(c, s, ids, &batch.transitions, |mut b, t| {
        b.push_bind(&t.run_id)
            .push_bind(&t.node)
            .push_bind(t.edge.from_name())
            .push_bind(t.edge.to_name())
            .push_bind(t.edge.cause_name())
            .push_bind(&t.actor)
            .push_bind(i64::from(t.attempt))
            .push_bind(&t.reason)
            .push_bind(t.at);
    })
    .await
}

async fn write_outputs<'a>(c: &mut Conn, s: &mut Script<'a>, batch: &'a Batch) -> Result<()> {
    let rows = last_per_key(&batch.outputs, |o| (&o.run_id, &o.node, o.data_version, &o.key));
    for chunk in rows.chunks(CHUNK) {
        let q = s.statement();
        q.push("INSERT INTO node_outputs (run_id, node, data_version, \"key\", value) ");
        q.push_values(chunk, |mut b, o| {
            b.push_bind(&o.run_id)
                .push_bind(&o.node)
                .push_bind(i64::from(o.data_version))
                .push_bind(&o.key)
                .push_bind(o.value.to_string());
        });
        q.push(upsert("run_id, node, data_version, key", "value"));
        s.end(c).await?;
    }
    Ok(())
}

async fn write_attempts<'a>(c: &mut Conn, s: &mut Script<'a>, batch: &'a Batch) -> Result<()> {
    // A start and its end in one batch: the later record is kept.
    let rows = last_per_key(&batch.attempts, |a| (&a.run_id, &a.node, a.attempt));
    for chunk in rows.chunks(CHUNK) {
        let q = s.statement();
        q.push(
            "INSERT INTO attempts (run_id, node, attempt, started_at, finished_at, outcome, error, host) ",
        );
        q.push_values(chunk, |mut b, a| {
            b.push_bind(&a.run_id)
                .push_bind(&a.node)
                .push_bind(i64::from(a.attempt))
                .push_bind(a.started_at)
                .push_bind(a.finished_at)
                .push_bind(&a.outcome)
                .push_bind(&a.error)
                .push_bind(&a.host);
        });
        q.push(upsert("run_id, node, attempt", "finished_at, outcome, error"));
        s.end(c).await?;
    }
    for h in last_per_key(&batch.attempt_hosts, |h| (&h.run_id, &h.node, h.attempt)) {
        let q = s.statement();
        q.push("UPDATE attempts SET host = ")
            .push_bind(&h.host)
            .push(" WHERE run_id = ")
            .push_bind(&h.run_id);
        q.push(" AND node = ").push_bind(&h.node).push(" AND attempt = ").push_bind(i64::from(h.attempt));
        s.end(c).await?;
    }
    Ok(())
}

async fn write_logs<'a>(c: &mut Conn, s: &mut Script<'a>, batch: &'a Batch) -> Result<()> {
    let rows = last_per_key(&batch.logs, |l| (&l.run_id, &l.node, l.attempt));
    for chunk in rows.chunks(CHUNK) {
        let q = s.statement();
        q.push("INSERT INTO logs (run_id, node, attempt, content) ");
        q.push_values(chunk, |mut b, l| {
            b.push_bind(&l.run_id).push_bind(&l.node).push_bind(i64::from(l.attempt)).push_bind(&l.content);
        });
        q.push(upsert("run_id, node, attempt", "content"));
        s.end(c).await?;
    }
    Ok(())
}

async fn write_audit<'a>(c: &mut Conn, s: &mut Script<'a>, batch: &'a Batch) -> Result<()> {
    for chunk in batch.audit.chunks(CHUNK) {
        let q = s.statement();
        q.push("INSERT INTO audit (at, actor, action, run_id, node, reason, details) ");
        q.push_values(chunk, |mut b, a| {
            b.push_bind(a.at)
                .push_bind(&a.actor)
                .push_bind(&a.action)
                .push_bind(&a.run_id)
                .push_bind(&a.node)
                .push_bind(&a.reason)
                .push_bind(a.details.as_ref().map(|d| d.to_string()));
        });
        s.end(c).await?;
    }
    Ok(())
}
