//! Backfills: creation with their steps and audit entry, the next steps decided
//! under the backfill's lock (`madeira_core::estate::advance` over the steps and
//! their runs' states), links from steps to runs, state changes through the core's
//! backfill table, and reads with progress counts.

use std::collections::{BTreeSet, HashMap};

use madeira_core::estate::{
    AdvanceFacts, BackfillAction, BackfillState, Rerun, StepFacts, StepStatus, advance,
};
use sqlx::{QueryBuilder, Row as _};

use super::{CHUNK, Db, Pool, Row, Tx, push_list, sql};
use crate::admission::UNFINISHED;
use crate::dialect::{Dialect, LockSpace};
use crate::{
    Advanced, AuditRecord, BackfillChange, BackfillProgress, BackfillRecord, BackfillStepRow,
    BackfillTrigger, NewBackfill, Result, StoreError,
};

/// Serialises the decisions about one backfill (its own key in the flows' lock space:
/// flow names never contain `:`).
async fn lock(tx: &mut Tx<'_>, id: &str) -> Result<()> {
    super::D::lock(tx, LockSpace::Flow, &format!("backfill:{id}")).await
}

fn corrupt(detail: impl ToString) -> StoreError {
    StoreError::Corrupt { table: "backfills", detail: detail.to_string() }
}

pub(super) async fn create(pool: &Pool, b: &NewBackfill, audit: &AuditRecord) -> Result<()> {
    let mut tx = pool.begin().await?;
    let dates = serde_json::to_string(&b.dates).map_err(corrupt)?;
    sqlx::query(&sql("INSERT INTO backfills (id, flow, date_from, date_to, calendar, dates, date_order, \
         parallel, with_dependents, rerun, reason, actor, state, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"))
    .bind(&b.id)
    .bind(&b.flow)
    .bind(&b.date_from)
    .bind(&b.date_to)
    .bind(&b.calendar)
    .bind(dates)
    .bind(&b.order)
    .bind(i64::from(b.parallel))
    .bind(i64::from(b.with_dependents))
    .bind(&b.rerun)
    .bind(&b.reason)
    .bind(&b.actor)
    .bind(BackfillState::Running.as_str())
    .bind(b.now_ms)
    .execute(&mut *tx)
    .await?;
    for (n, chunk) in b.steps.chunks(CHUNK / 5).enumerate() {
        let mut q: QueryBuilder<Db> =
            QueryBuilder::new("INSERT INTO backfill_steps (backfill_id, seq, flow, biz_date, waits) ");
        q.push_values(chunk.iter().enumerate(), |mut row, (i, step)| {
            let waits: Vec<String> = step.waits.iter().map(ToString::to_string).collect();
            row.push_bind(&b.id)
                .push_bind((n * (CHUNK / 5) + i) as i64)
                .push_bind(&step.flow)
                .push_bind(&step.biz_date)
                .push_bind(waits.join(","));
        });
        q.build().execute(&mut *tx).await?;
    }
    super::lifecycle::insert_audit(&mut tx, audit).await?;
    tx.commit().await?;
    Ok(())
}

/// One step as read for `advance`.
struct StepRead {
    seq: u32,
    flow: String,
    biz_date: String,
    waits: Vec<usize>,
    run_id: Option<String>,
    claimed_at: Option<i64>,
    outcome: Option<String>,
    run_state: Option<String>,
}

fn status(s: &StepRead, now_ms: i64, stale_ms: i64) -> StepStatus {
    match (s.outcome.as_deref(), &s.run_id, s.run_state.as_deref()) {
        (Some("skipped"), ..) => StepStatus::Skipped,
        (Some("cancelled"), None, _) => StepStatus::Cancelled,
        (Some(_), None, _) => StepStatus::Blocked,
        (_, Some(_), Some("QUEUED" | "ADMITTED" | "RUNNING")) => StepStatus::InFlight,
        (_, Some(_), Some("SUCCESS")) => StepStatus::Succeeded,
        (_, Some(_), Some("CANCELLED")) => StepStatus::Cancelled,
        // FAILED, or a run retention deleted.
        (_, Some(_), _) => StepStatus::Failed,
        (None, None, _) => match s.claimed_at {
            Some(at) => StepStatus::Claimed { stale: now_ms - at > stale_ms },
            None => StepStatus::Pending,
        },
    }
}

async fn steps(tx: &mut Tx<'_>, id: &str) -> Result<Vec<StepRead>> {
    let rows: Vec<Row> = sqlx::query(&sql(
        "SELECT s.seq, s.flow, s.biz_date, s.waits, s.run_id, s.claimed_at, s.outcome, r.state AS run_state \
         FROM backfill_steps s LEFT JOIN runs r ON r.id = s.run_id WHERE s.backfill_id = $1 ORDER BY s.seq",
    ))
    .bind(id)
    .fetch_all(&mut **tx)
    .await?;
    rows.iter()
        .map(|row| {
            let waits: String = row.try_get("waits")?;
            let waits = waits
                .split(',')
                .filter(|w| !w.is_empty())
                .map(|w| w.parse::<usize>().map_err(corrupt))
                .collect::<Result<Vec<_>>>()?;
            Ok(StepRead {
                seq: row.try_get::<i64, _>("seq")? as u32,
                flow: row.try_get("flow")?,
                biz_date: row.try_get("biz_date")?,
                waits,
                run_id: row.try_get("run_id")?,
                claimed_at: row.try_get("claimed_at")?,
                outcome: row.try_get("outcome")?,
                run_state: row.try_get("run_state")?,
            })
        })
        .collect()
}

/// The (flow, date) pairs among `pending` that already have a SUCCESS run.
async fn successes(tx: &mut Tx<'_>, pending: &[&StepRead]) -> Result<BTreeSet<(String, String)>> {
    let flows: BTreeSet<&str> = pending.iter().map(|s| s.flow.as_str()).collect();
    let dates: BTreeSet<&str> = pending.iter().map(|s| s.biz_date.as_str()).collect();
    let dates: Vec<&str> = dates.into_iter().collect();
    let mut out = BTreeSet::new();
    for chunk in dates.chunks(CHUNK / 2) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new(
            "SELECT DISTINCT flow, biz_date FROM runs WHERE state = 'SUCCESS' AND flow IN ",
        );
        push_list(&mut q, flows.iter().copied());
        q.push(" AND biz_date IN ");
        push_list(&mut q, chunk.iter().copied());
        let rows: Vec<(String, String)> = q.build_query_as().fetch_all(&mut **tx).await?;
        out.extend(rows);
    }
    Ok(out)
}

/// The flows of `pending` that are paused (their steps wait for the resume).
async fn paused_flows(tx: &mut Tx<'_>, pending: &[&StepRead]) -> Result<BTreeSet<String>> {
    let flows: BTreeSet<&str> = pending.iter().map(|s| s.flow.as_str()).collect();
    let flows: Vec<&str> = flows.into_iter().collect();
    let mut out = BTreeSet::new();
    for chunk in flows.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new(
            "SELECT name FROM flows WHERE paused = TRUE AND deleted_at IS NULL AND name IN ",
        );
        push_list(&mut q, chunk.iter().copied());
        let rows: Vec<(String,)> = q.build_query_as().fetch_all(&mut **tx).await?;
        out.extend(rows.into_iter().map(|(name,)| name));
    }
    Ok(out)
}

/// For each of `ids` (running or paused), the paused flows its not-started steps wait for.
async fn waiting_on_paused(pool: &Pool, ids: &[&str]) -> Result<HashMap<String, Vec<String>>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for chunk in ids.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new(
            "SELECT DISTINCT s.backfill_id, s.flow FROM backfill_steps s JOIN flows f ON f.name = s.flow \
             WHERE f.paused = TRUE AND f.deleted_at IS NULL AND s.run_id IS NULL AND s.outcome IS NULL \
             AND s.backfill_id IN ",
        );
        push_list(&mut q, chunk.iter().copied());
        q.push(" ORDER BY s.backfill_id, s.flow");
        let rows: Vec<(String, String)> = q.build_query_as().fetch_all(pool).await?;
        for (id, flow) in rows {
            out.entry(id).or_default().push(flow);
        }
    }
    Ok(out)
}

fn active_state(state: &str) -> bool {
    matches!(state, "running" | "paused")
}

async fn set_steps(tx: &mut Tx<'_>, id: &str, seqs: &[u32], set: &str, value: Option<&str>) -> Result<()> {
    for chunk in seqs.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new(format!("UPDATE backfill_steps SET {set} = "));
        q.push_bind(value.map(str::to_string));
        q.push(" WHERE backfill_id = ").push_bind(id.to_string()).push(" AND seq IN ");
        push_list(&mut q, chunk.iter().map(|s| i64::from(*s)));
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

pub(super) async fn advance_backfill(
    pool: &Pool,
    id: &str,
    now_ms: i64,
    stale_ms: i64,
) -> Result<Option<Advanced>> {
    let mut tx = pool.begin().await?;
    lock(&mut tx, id).await?;
    let head: Option<(String, i64, String, String, String)> =
        sqlx::query_as(&sql("SELECT state, parallel, rerun, actor, reason FROM backfills WHERE id = $1"))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((state, parallel, rerun, actor, reason)) = head else { return Ok(None) };
    let state: BackfillState = state.parse().map_err(corrupt)?;
    let rerun: Rerun = rerun.parse().map_err(corrupt)?;
    let quiet = Advanced { actor, reason, steps: Vec::new(), finished: false };
    if matches!(state, BackfillState::Cancelled | BackfillState::Done) {
        return Ok(Some(quiet));
    }
    let read = steps(&mut tx, id).await?;
    let pending: Vec<&StepRead> =
        read.iter().filter(|s| status(s, now_ms, stale_ms) == StepStatus::Pending).collect();
    let done = match rerun {
        Rerun::SkipExisting if !pending.is_empty() => successes(&mut tx, &pending).await?,
        _ => BTreeSet::new(),
    };
    let paused = paused_flows(&mut tx, &pending).await?;
    let facts: Vec<StepFacts> = read
        .iter()
        .map(|s| StepFacts {
            status: status(s, now_ms, stale_ms),
            waits: s.waits.clone(),
            has_success: done.contains(&(s.flow.clone(), s.biz_date.clone())),
            flow_paused: paused.contains(&s.flow),
        })
        .collect();
    let decided = advance(&AdvanceFacts {
        state,
        parallel: u32::try_from(parallel).unwrap_or(1),
        rerun,
        steps: &facts,
    });
    let seq = |i: &usize| read[*i].seq;
    let claimed: Vec<u32> = decided.claim.iter().chain(&decided.retrigger).map(seq).collect();
    for chunk in claimed.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new("UPDATE backfill_steps SET claimed_at = ");
        q.push_bind(now_ms).push(" WHERE backfill_id = ").push_bind(id.to_string()).push(" AND seq IN ");
        push_list(&mut q, chunk.iter().map(|s| i64::from(*s)));
        q.build().execute(&mut *tx).await?;
    }
    let skipped: Vec<u32> = decided.skip.iter().map(seq).collect();
    set_steps(&mut tx, id, &skipped, "outcome", Some("skipped")).await?;
    set_steps(&mut tx, id, &skipped, "note", Some("the date already had a SUCCESS run")).await?;
    for (i, unmet) in &decided.block {
        let upstream = &read[*unmet];
        let note = format!("waits for {} {}, which did not succeed", upstream.flow, upstream.biz_date);
        sqlx::query(&sql(
            "UPDATE backfill_steps SET outcome = 'blocked', note = $1 WHERE backfill_id = $2 AND seq = $3",
        ))
        .bind(note)
        .bind(id)
        .bind(i64::from(read[*i].seq))
        .execute(&mut *tx)
        .await?;
    }
    if decided.finish {
        let to = state.apply(BackfillAction::Finish).map_err(|e| StoreError::Refused(e.to_string()))?;
        sqlx::query(&sql("UPDATE backfills SET state = $1, finished_at = $2 WHERE id = $3"))
            .bind(to.as_str())
            .bind(now_ms)
            .bind(id)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    let steps = decided
        .claim
        .iter()
        .chain(&decided.retrigger)
        .map(|&i| BackfillTrigger {
            seq: read[i].seq,
            flow: read[i].flow.clone(),
            biz_date: read[i].biz_date.clone(),
        })
        .collect();
    Ok(Some(Advanced { steps, finished: decided.finish, ..quiet }))
}

pub(super) async fn settle_step(
    pool: &Pool,
    id: &str,
    seq: u32,
    run_id: Option<&str>,
    note: Option<&str>,
) -> Result<Option<String>> {
    let (set, value) = match run_id {
        Some(run) => ("run_id = $1", run),
        None => ("outcome = 'refused', note = $1", note.unwrap_or("the run was not created")),
    };
    let text = format!("UPDATE backfill_steps SET {set} WHERE backfill_id = $2 AND seq = $3");
    sqlx::query(&sql(&text)).bind(value).bind(id).bind(i64::from(seq)).execute(pool).await?;
    let state: Option<(String,)> = sqlx::query_as(&sql("SELECT state FROM backfills WHERE id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    Ok(state.map(|(s,)| s))
}

pub(super) async fn of_runs(pool: &Pool, run_ids: &[String]) -> Result<Vec<String>> {
    let mut out = BTreeSet::new();
    for chunk in run_ids.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new(
            "SELECT DISTINCT s.backfill_id FROM backfill_steps s JOIN backfills b ON b.id = s.backfill_id \
             WHERE b.state IN ('running', 'paused') AND s.run_id IN ",
        );
        push_list(&mut q, chunk.iter());
        let rows: Vec<(String,)> = q.build_query_as().fetch_all(pool).await?;
        out.extend(rows.into_iter().map(|(id,)| id));
    }
    Ok(out.into_iter().collect())
}

pub(super) async fn active(pool: &Pool) -> Result<Vec<String>> {
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT id FROM backfills WHERE state IN ('running', 'paused') ORDER BY id")
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

const COLUMNS: &str = "id, flow, date_from, date_to, calendar, dates, date_order, parallel, with_dependents, \
     rerun, reason, actor, state, created_at, finished_at";

fn record(row: &Row) -> Result<BackfillRecord> {
    let dates: String = row.try_get("dates")?;
    Ok(BackfillRecord {
        id: row.try_get("id")?,
        flow: row.try_get("flow")?,
        date_from: row.try_get("date_from")?,
        date_to: row.try_get("date_to")?,
        calendar: row.try_get("calendar")?,
        dates: serde_json::from_str(&dates).map_err(corrupt)?,
        order: row.try_get("date_order")?,
        parallel: row.try_get::<i64, _>("parallel")? as u32,
        with_dependents: row.try_get::<i64, _>("with_dependents")? != 0,
        rerun: row.try_get("rerun")?,
        reason: row.try_get("reason")?,
        actor: row.try_get("actor")?,
        state: row.try_get("state")?,
        created_at: row.try_get("created_at")?,
        finished_at: row.try_get("finished_at")?,
        progress: BackfillProgress::default(),
        paused_flows: Vec::new(),
    })
}

/// Counts one step (its outcome, else its run's state) into `p`.
fn count(p: &mut BackfillProgress, outcome: Option<&str>, run_state: Option<&str>, n: u32) {
    p.total += n;
    let slot = match (outcome, run_state) {
        (Some("skipped"), _) => &mut p.skipped,
        (Some("cancelled"), None) => &mut p.cancelled,
        (Some(_), None) => &mut p.blocked,
        (_, Some("QUEUED" | "ADMITTED")) => &mut p.queued,
        (_, Some("RUNNING")) => &mut p.running,
        (_, Some("SUCCESS")) => &mut p.success,
        (_, Some("FAILED")) => &mut p.failed,
        (_, Some("CANCELLED")) => &mut p.cancelled,
        _ => &mut p.pending,
    };
    *slot += n;
}

pub(super) async fn list(pool: &Pool, limit: u32) -> Result<Vec<BackfillRecord>> {
    let rows: Vec<Row> = sqlx::query(&sql(&format!(
        "SELECT {COLUMNS} FROM backfills ORDER BY created_at DESC, id DESC LIMIT $1"
    )))
    .bind(i64::from(limit.clamp(1, 1000)))
    .fetch_all(pool)
    .await?;
    let mut out: Vec<BackfillRecord> = rows.iter().map(record).collect::<Result<_>>()?;
    if out.is_empty() {
        return Ok(out);
    }
    let mut q: QueryBuilder<Db> = QueryBuilder::new(
        "SELECT s.backfill_id, s.outcome, r.state, COUNT(*) FROM backfill_steps s \
         LEFT JOIN runs r ON r.id = s.run_id WHERE s.backfill_id IN ",
    );
    push_list(&mut q, out.iter().map(|b| b.id.clone()));
    q.push(" GROUP BY s.backfill_id, s.outcome, r.state");
    let counts: Vec<(String, Option<String>, Option<String>, i64)> =
        q.build_query_as().fetch_all(pool).await?;
    let mut by_id: HashMap<String, BackfillProgress> = HashMap::new();
    for (id, outcome, state, n) in counts {
        count(by_id.entry(id).or_default(), outcome.as_deref(), state.as_deref(), n as u32);
    }
    let active: Vec<&str> = out.iter().filter(|b| active_state(&b.state)).map(|b| b.id.as_str()).collect();
    let mut paused = waiting_on_paused(pool, &active).await?;
    for b in &mut out {
        b.progress = by_id.remove(&b.id).unwrap_or_default();
        b.paused_flows = paused.remove(&b.id).unwrap_or_default();
    }
    Ok(out)
}

pub(super) async fn get(pool: &Pool, id: &str) -> Result<Option<(BackfillRecord, Vec<BackfillStepRow>)>> {
    let row: Option<Row> = sqlx::query(&sql(&format!("SELECT {COLUMNS} FROM backfills WHERE id = $1")))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let mut b = record(&row)?;
    let rows: Vec<Row> = sqlx::query(&sql(
        "SELECT s.seq, s.flow, s.biz_date, s.run_id, s.outcome, s.note, r.state AS run_state, \
         r.started_at, r.finished_at FROM backfill_steps s LEFT JOIN runs r ON r.id = s.run_id \
         WHERE s.backfill_id = $1 ORDER BY s.seq",
    ))
    .bind(id)
    .fetch_all(pool)
    .await?;
    let mut steps = Vec::with_capacity(rows.len());
    for row in &rows {
        let step = BackfillStepRow {
            seq: row.try_get::<i64, _>("seq")? as u32,
            flow: row.try_get("flow")?,
            biz_date: row.try_get("biz_date")?,
            run_id: row.try_get("run_id")?,
            // Shown as SPEC §3's run states: ADMITTED is QUEUED.
            run_state: row.try_get::<Option<String>, _>("run_state")?.map(|s| match s.as_str() {
                "ADMITTED" => "QUEUED".to_string(),
                _ => s,
            }),
            outcome: row.try_get("outcome")?,
            note: row.try_get("note")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
        };
        count(&mut b.progress, step.outcome.as_deref(), step.run_state.as_deref(), 1);
        steps.push(step);
    }
    if active_state(&b.state) {
        b.paused_flows = waiting_on_paused(pool, &[id]).await?.remove(id).unwrap_or_default();
    }
    Ok(Some((b, steps)))
}

pub(super) async fn change(
    pool: &Pool,
    id: &str,
    action: BackfillAction,
    now_ms: i64,
    audit: &AuditRecord,
) -> Result<BackfillChange> {
    let mut tx = pool.begin().await?;
    lock(&mut tx, id).await?;
    let state: Option<(String,)> = sqlx::query_as(&sql("SELECT state FROM backfills WHERE id = $1"))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    let Some((state,)) = state else { return Ok(BackfillChange::NotFound) };
    let from: BackfillState = state.parse().map_err(corrupt)?;
    let Ok(to) = from.apply(action) else { return Ok(BackfillChange::Refused { state }) };
    let finished = matches!(to, BackfillState::Cancelled | BackfillState::Done).then_some(now_ms);
    sqlx::query(&sql("UPDATE backfills SET state = $1, finished_at = $2 WHERE id = $3"))
        .bind(to.as_str())
        .bind(finished)
        .bind(id)
        .execute(&mut *tx)
        .await?;
    if to == BackfillState::Cancelled {
        sqlx::query(&sql("UPDATE backfill_steps SET outcome = 'cancelled', note = $1 \
             WHERE backfill_id = $2 AND run_id IS NULL AND outcome IS NULL"))
        .bind(audit.reason.clone().unwrap_or_default())
        .bind(id)
        .execute(&mut *tx)
        .await?;
    }
    let unfinished: Vec<(String,)> = sqlx::query_as(&sql(&format!(
        "SELECT s.run_id FROM backfill_steps s JOIN runs r ON r.id = s.run_id \
         WHERE s.backfill_id = $1 AND r.state IN {UNFINISHED} ORDER BY s.seq"
    )))
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    super::lifecycle::insert_audit(&mut tx, audit).await?;
    tx.commit().await?;
    Ok(BackfillChange::Changed {
        from: from.as_str().to_string(),
        to: to.as_str().to_string(),
        unfinished: unfinished.into_iter().map(|(r,)| r).collect(),
    })
}
