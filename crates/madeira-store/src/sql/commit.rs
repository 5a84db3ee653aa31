//! The group commit: one transaction writes every node row, run row, transition
//! record, output, attempt and audit entry of a batch, with multi-row statements.
//! On SQLite (`Dialect::ROWS`) it runs as one-row statements, each compiled once
//! and run for each of its rows (`Dialect::commit_rows`).

use std::collections::BTreeMap;

use super::{D, Script, Taken, To, bind, bind_separated, last_per_key, push_row, upsert};
use crate::dialect::{Dialect, TransitionIds, Val};
use crate::packed::Entry;
use crate::{Batch, Result, RunWrite};

pub(super) async fn commit(pool: &super::Pool, dialect: &D, batch: &Batch) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let ids = dialect.transition_ids();
    if D::ROWS {
        return commit_rows(pool, dialect, ids, batch).await;
    }
    let mut tx = pool.begin().await?;
    if let Some(owner) = &batch.owner {
        super::lease::fence(&mut tx, owner, &crate::lease::touched_runs(batch)).await?;
    }
    let mut script = Script::new();
    write_all(&mut *tx, &mut script, ids, batch).await?;
    script.send(&mut tx).await?;
    tx.commit().await?;
    Ok(())
}

/// The commit as one-row statements (the fence first), each compiled once and
/// run for each of its rows, in one transaction (`Dialect::commit_rows`, which
/// ends it on a failure). No other write of this store runs meanwhile: every
/// write holds the dialect's write lock (`SqlStore::write`), this one included,
/// so the commit does not take the writer connection out of its pool (sqlx pings
/// a connection as it goes back, a hop to its thread that the next commit of a
/// chain waited for). The statements are built without a connection; the
/// transitions' counter, when not known (the store just opened, or a write
/// failed), is read first. A fence that failed is then told as `LeaseLost` by
/// the fence query.
async fn commit_rows(
    pool: &super::Pool,
    dialect: &D,
    ids: Option<&TransitionIds>,
    batch: &Batch,
) -> Result<()> {
    if let Some(ids) = ids
        && ids.last().is_none()
    {
        let seq = sqlx::query_scalar(&super::sql("SELECT seq FROM transition_seq")).fetch_one(pool).await?;
        ids.set(seq);
    }
    let mut script = Script::row_by_row();
    let touched = batch.owner.as_ref().map(|owner| (owner, crate::lease::touched_runs(batch)));
    let written = async {
        if let Some((owner, runs)) = &touched {
            super::lease::fence_statements(&mut Taken, &mut script, owner, runs).await?;
        }
        write_all(&mut Taken, &mut script, ids, batch).await?;
        dialect.commit_rows(&script.take_rows()).await
    }
    .await;
    if written.is_err()
        && let Some((owner, runs)) = &touched
    {
        let mut tx = pool.begin().await?;
        super::lease::fence(&mut tx, owner, runs).await?;
    }
    written
}

/// Adds every write of `batch` to `s` (sent as each ends where the dialect takes
/// no scripts).
async fn write_all<'a>(
    c: &mut To,
    s: &mut Script<'a>,
    ids: Option<&TransitionIds>,
    batch: &'a Batch,
) -> Result<()> {
    write_nodes(c, s, batch).await?;
    write_runs(c, s, batch).await?;
    let transitions = batch.transitions.iter().map(|t| {
        let entry = Entry {
            node: t.node.as_deref(),
            edge: t.edge,
            actor: &t.actor,
            attempt: t.attempt,
            reason: t.reason.as_deref(),
            at: t.at,
        };
        (t.run_id.as_str(), entry)
    });
    super::insert_transitions(c, s, ids, transitions.collect()).await?;
    let outputs = last_per_key(&batch.outputs, |o| (&o.run_id, &o.node, o.data_version, &o.key));
    let outputs = outputs.into_iter().map(|o| {
        let value = Val::owned(o.value.to_string());
        vec![Val::text(&o.run_id), Val::text(&o.node), Val::int(o.data_version), Val::text(&o.key), value]
    });
    s.rows(c, outputs.collect(), |q, chunk| {
        q.push("INSERT INTO node_outputs (run_id, node, data_version, \"key\", value) ");
        q.push_values(chunk, push_row).push(upsert("run_id, node, data_version, key", "value"));
    })
    .await?;
    write_attempts(c, s, batch).await?;
    let audit = batch.audit.iter().map(|a| {
        vec![
            Val::int(a.at),
            Val::text(&a.actor),
            Val::text(&a.action),
            Val::opt_text(a.run_id.as_deref()),
            Val::opt_text(a.node.as_deref()),
            Val::opt_text(a.reason.as_deref()),
            Val::Text(a.details.as_ref().map(|d| d.to_string().into())),
        ]
    });
    s.rows(c, audit.collect(), |q, chunk| {
        q.push("INSERT INTO audit (at, actor, action, run_id, node, reason, details) ");
        q.push_values(chunk, push_row);
    })
    .await?;
    for key in &batch.permit_releases {
        let v = vec![Val::text(&key.flow), Val::text(&key.node), Val::text(&key.run_id)];
        s.one(c, v, |q, v| {
            bind(q.push("DELETE FROM permits WHERE flow = "), &v[0]);
            bind(q.push(" AND node = "), &v[1]).push(" AND run_id = ");
            bind(q, &v[2]);
        })
        .await?;
    }
    let at = crate::unix_ms();
    let events = batch.alert_events.iter().map(|body| vec![Val::text(body), Val::int(at)]);
    s.rows(c, events.collect(), |q, chunk| {
        q.push("INSERT INTO alert_inbox (body, created_at) ").push_values(chunk, push_row);
    })
    .await?;
    for a in &batch.answers {
        s.one(c, vec![Val::text(&a.answer), Val::int(a.at), Val::int(a.id)], |q, v| {
            bind(q.push("UPDATE run_commands SET answer = "), &v[0]).push(", answered_at = ");
            bind(q, &v[1]).push(" WHERE id = ");
            bind(q, &v[2]);
        })
        .await?;
    }
    let logs = last_per_key(&batch.logs, |l| (&l.run_id, &l.node, l.attempt));
    let logs = logs
        .into_iter()
        .map(|l| vec![Val::text(&l.run_id), Val::text(&l.node), Val::int(l.attempt), Val::text(&l.content)]);
    s.rows(c, logs.collect(), |q, chunk| {
        q.push("INSERT INTO logs (run_id, node, attempt, content) ");
        q.push_values(chunk, push_row).push(upsert("run_id, node, attempt", "content"));
    })
    .await
}

async fn write_nodes<'a>(c: &mut To, s: &mut Script<'a>, batch: &'a Batch) -> Result<()> {
    let rows = batch.nodes.iter().map(|n| {
        vec![
            Val::text(&n.run_id),
            Val::int(n.idx),
            Val::text(&n.node),
            Val::text(n.state.as_str()),
            Val::opt_text(n.reason.as_deref()),
            Val::int(n.attempt),
            Val::int(n.series_start),
            Val::int(n.data_version),
            Val::owned(serde_json::Value::Object(n.outputs.clone()).to_string()),
            Val::owned(crate::reads_json(&n.reads)),
            Val::Bool(n.stale),
            Val::Bool(n.fallback),
            Val::Int(n.next_attempt_at),
            Val::Int(n.started_at),
            Val::Int(n.finished_at),
        ]
    });
    s.rows(c, rows.collect(), |q, chunk| {
        q.push(
            "INSERT INTO nodes (run_id, idx, node, state, reason, attempt, series_start, \
             data_version, outputs, \"reads\", stale, fallback, next_attempt_at, started_at, finished_at) ",
        );
        q.push_values(chunk, push_row);
        q.push(upsert(
            "run_id, idx",
            "state, reason, attempt, series_start, data_version, outputs, \"reads\", stale, fallback, \
             next_attempt_at, started_at, finished_at",
        ));
    })
    .await
}

async fn write_runs<'a>(c: &mut To, s: &mut Script<'a>, batch: &'a Batch) -> Result<()> {
    // One statement for every run of the batch: the last write of a run wins, with
    // the latest start time any of its writes set (as one update after another).
    let mut last: BTreeMap<&str, RunWrite> = BTreeMap::new();
    for r in &batch.runs {
        let started_at = r.started_at.or_else(|| last.get(r.run_id.as_str()).and_then(|w| w.started_at));
        last.insert(r.run_id.as_str(), RunWrite { started_at, ..r.clone() });
    }
    let rows = last.into_iter().map(|(id, r)| {
        vec![Val::text(id), Val::text(r.state.as_str()), Val::Int(r.started_at), Val::Int(r.finished_at)]
    });
    let bigint = format!(" AS {})", D::BIGINT);
    s.rows(c, rows.collect(), |q, chunk| {
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
                let mut r = r.into_iter();
                for v in r.by_ref().take(2) {
                    bind_separated(&mut b, v);
                }
                for v in r {
                    let Val::Int(at) = v else { continue };
                    b.push("CAST(").push_bind_unseparated(at).push_unseparated(&bigint);
                }
            },
        );
    })
    .await
}

async fn write_attempts<'a>(c: &mut To, s: &mut Script<'a>, batch: &'a Batch) -> Result<()> {
    // A start and its end in one batch: the later record is kept.
    let rows = last_per_key(&batch.attempts, |a| (&a.run_id, &a.node, a.attempt));
    let rows = rows.into_iter().map(|a| {
        vec![
            Val::text(&a.run_id),
            Val::text(&a.node),
            Val::int(a.attempt),
            Val::int(a.started_at),
            Val::Int(a.finished_at),
            Val::opt_text(a.outcome.as_deref()),
            Val::opt_text(a.error.as_deref()),
            Val::opt_text(a.host.as_deref()),
        ]
    });
    s.rows(c, rows.collect(), |q, chunk| {
        q.push(
            "INSERT INTO attempts (run_id, node, attempt, started_at, finished_at, outcome, error, host) ",
        );
        q.push_values(chunk, push_row).push(upsert("run_id, node, attempt", "finished_at, outcome, error"));
    })
    .await?;
    for h in last_per_key(&batch.attempt_hosts, |h| (&h.run_id, &h.node, h.attempt)) {
        let v = vec![Val::text(&h.host), Val::text(&h.run_id), Val::text(&h.node), Val::int(h.attempt)];
        s.one(c, v, |q, v| {
            bind(q.push("UPDATE attempts SET host = "), &v[0]).push(" WHERE run_id = ");
            bind(q, &v[1]).push(" AND node = ");
            bind(q, &v[2]).push(" AND attempt = ");
            bind(q, &v[3]);
        })
        .await?;
    }
    Ok(())
}
