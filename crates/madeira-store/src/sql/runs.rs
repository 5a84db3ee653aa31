//! Run creation and promotion of queued runs (the facts gathered under the flow's
//! lock, the decision taken by `madeira_core::admit`), logs and retention. A run
//! is written ADMITTED when it may start at once, else QUEUED until a promotion
//! admits it (QUEUED -> ADMITTED, recorded); the engine's `Command::Start` takes an
//! ADMITTED run RUNNING.

use madeira_core::admit::{
    BACKFILL_DEFER_MS, BACKFILL_TRIGGER, Existing, Facts, QueueFacts, RunEdge, admit, promote,
};
use sqlx::QueryBuilder;

use std::collections::HashMap;

use super::{CHUNK, D, Db, Pool, ROW_BY_ROW_FROM, Script, Tx, push_list, push_row, sql, upsert};
use crate::admission::{ACTIVE, ClaimCache, NODE_MET, RUN_MET, UNFINISHED, WAITING, refused, to_write};
use crate::dialect::{Dialect, LockSpace, TransitionIds, Val};
use crate::packed::Entry;
use crate::{CreateOutcome, Edge, NewRun, Result, StoreError};

/// Serialises the decisions taken about one flow's runs and versions until the
/// end of the transaction.
pub(super) async fn lock_flow(tx: &mut Tx<'_>, flow: &str) -> Result<()> {
    D::lock(tx, LockSpace::Flow, flow).await
}

pub(super) async fn create_run(
    pool: &Pool,
    ids: Option<&TransitionIds>,
    run: &NewRun,
) -> Result<CreateOutcome> {
    let mut outcomes = create_runs(pool, ids, std::slice::from_ref(run)).await?;
    outcomes.pop().ok_or_else(|| StoreError::Refused("no outcome for the run".into()))
}

pub(super) async fn create_runs(
    pool: &Pool,
    ids: Option<&TransitionIds>,
    runs: &[NewRun],
) -> Result<Vec<CreateOutcome>> {
    let mut tx = pool.begin().await?;
    // Every flow of the batch is locked up front, in one order, so two replicas
    // batching runs of the same flows never wait on each other in a cycle.
    let mut flows: Vec<&str> = runs.iter().map(|r| r.flow.as_str()).collect();
    flows.sort_unstable();
    flows.dedup();
    for flow in flows {
        lock_flow(&mut tx, flow).await?;
    }
    let mut batch = Admitted { keys: existing_keys(&mut tx, runs).await?, ids, ..Admitted::default() };
    let mut outcomes = Vec::with_capacity(runs.len());
    for run in runs {
        outcomes.push(create_in(&mut tx, run, &mut batch).await?);
    }
    batch.write(&mut tx).await?;
    let first = batch.runs.first().map(|(run, _, _)| run.id.clone());
    match tx.commit().await {
        Ok(()) => Ok(outcomes),
        Err(e) => {
            // The commit's answer was lost with its connection (killed, reset):
            // the commit may have been applied, and a retry would then fail on the
            // run ids it wrote and report runs that exist as not created. The
            // first of them, read on another connection, tells.
            let e = StoreError::from(e);
            match first {
                Some(id) if e.is_transient() && run_written(pool, &id).await => {
                    tracing::warn!(error = %e, "the commit's answer was lost but its runs are stored: created");
                    Ok(outcomes)
                }
                _ => Err(e),
            }
        }
    }
}

/// Whether run `id` is stored (read on a connection of its own; an error reads
/// as not stored, and the caller's retry decides).
async fn run_written(pool: &Pool, id: &str) -> bool {
    let mut q: QueryBuilder<Db> = QueryBuilder::new("SELECT id FROM runs WHERE id = ");
    q.push_bind(id);
    matches!(q.build_query_scalar::<String>().fetch_optional(pool).await, Ok(Some(_)))
}

/// What one creation transaction has decided so far: the runs the keys of the
/// batch already name (read once, up front, then kept up to date), the throttle
/// claims, and the rows of the runs admitted but not yet written. They are
/// written together (a few multi-row statements), and before any query whose
/// answer they would change.
#[derive(Default)]
struct Admitted<'a> {
    keys: HashMap<(String, String), Existing>,
    claims: ClaimCache,
    /// Each admitted run with its creation edge and whether it may start now.
    runs: Vec<(&'a NewRun, RunEdge, bool)>,
    /// Where the store numbers transitions itself, the ids it gives.
    ids: Option<&'a TransitionIds>,
    /// Whether each flow is paused, read once under its lock.
    paused: HashMap<String, bool>,
    /// The scheduled run of each (flow, business date) the batch has seen.
    scheduled: HashMap<(String, String), Existing>,
    /// Runs held by an unmet `after`, with the reason shown on them.
    held: HashMap<String, String>,
}

impl<'a> Admitted<'a> {
    /// Writes the pending runs, their nodes and their creation edges (row by
    /// row where the dialect can and they are many: see `ROW_BY_ROW_FROM`).
    async fn write(&mut self, tx: &mut Tx<'_>) -> Result<()> {
        let nodes: usize = self.runs.iter().map(|(run, _, _)| run.node_names.len()).sum();
        let row_by_row = D::ROWS && self.runs.len() + nodes > ROW_BY_ROW_FROM;
        let mut s = if row_by_row { Script::row_by_row() } else { Script::new() };
        let runs = self.runs.iter().map(|&(run, created, start)| {
            // A run admitted to start is held from birth; a waiting one is
            // claimed by whichever replica promotes it.
            let held = run.lease.as_ref().filter(|_| start);
            vec![
                Val::text(&run.id),
                Val::text(&run.flow),
                Val::int(run.version),
                Val::text(created.to.as_str()),
                Val::owned(run.params.to_string()),
                Val::opt_text(run.idempotency_key.as_deref()),
                Val::text(&run.trigger),
                Val::int(run.now_ms),
                Val::Int(start.then_some(run.now_ms)),
                Val::opt_text(run.trace_context.as_deref()),
                Val::text(&run.actor),
                Val::opt_text(held.map(|l| l.owner.as_str())),
                Val::Int(held.map(|l| l.until_ms)),
                Val::opt_text(run.biz_date.as_deref()),
                Val::opt_text(run.wait_reason.as_deref()),
            ]
        });
        s.rows(&mut **tx, runs.collect(), |q, chunk| {
            q.push(
                "INSERT INTO runs (id, flow, version, state, params, idempotency_key, \"trigger\", \
                 created_at, admitted_at, trace_context, actor, owner, lease_until, biz_date, wait_reason) ",
            );
            q.push_values(chunk, push_row);
        })
        .await?;
        let nodes = self.runs.iter().flat_map(|(run, _, _)| {
            run.node_names
                .iter()
                .enumerate()
                .map(|(i, name)| vec![Val::text(&run.id), Val::int(i as i64), Val::text(name)])
        });
        s.rows(&mut **tx, nodes.collect(), |q, chunk| {
            q.push(
                "INSERT INTO nodes (run_id, idx, node, state, attempt, series_start, data_version, \
                 outputs, \"reads\", stale, fallback) ",
            );
            q.push_values(chunk, |mut b, row| {
                for v in row {
                    super::bind_separated(&mut b, v);
                }
                b.push("'INIT', 0, 0, 0, '{}', '[]', FALSE, FALSE");
            });
        })
        .await?;
        let transitions = self.runs.iter().map(|(run, created, _)| {
            let entry = Entry {
                node: None,
                edge: Edge::Run(*created),
                actor: &run.actor,
                attempt: 0,
                reason: None,
                at: run.now_ms,
            };
            (run.id.as_str(), entry)
        });
        super::insert_transitions(&mut **tx, &mut s, self.ids, transitions.collect()).await?;
        s.send(tx).await?;
        self.lease_by_database_clock(tx).await?;
        self.write_waits(tx).await?;
        self.runs.clear();
        Ok(())
    }

    /// The `after` waits of the pending runs, and the reason of the held ones.
    async fn write_waits(&mut self, tx: &mut Tx<'_>) -> Result<()> {
        for (run, _, _) in &self.runs {
            for (seq, wait) in run.after.iter().enumerate() {
                sqlx::query(&sql(
                    "INSERT INTO run_waits (run_id, seq, upstream_flow, upstream_node, upstream_date) \
                     VALUES ($1, $2, $3, $4, $5)",
                ))
                .bind(&run.id)
                .bind(seq as i64)
                .bind(&wait.flow)
                .bind(wait.node.as_deref())
                .bind(&wait.date)
                .execute(&mut **tx)
                .await?;
            }
            for (seq, w) in run.node_after.iter().enumerate() {
                sqlx::query(&sql(
                    "INSERT INTO node_waits (run_id, node, seq, upstream_flow, upstream_node, upstream_date) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                ))
                .bind(&run.id)
                .bind(&w.node)
                .bind(seq as i64)
                .bind(&w.wait.flow)
                .bind(w.wait.node.as_deref())
                .bind(&w.wait.date)
                .execute(&mut **tx)
                .await?;
            }
            if let Some(reason) = self.held.remove(&run.id) {
                sqlx::query(&sql("UPDATE runs SET wait_reason = $1 WHERE id = $2"))
                    .bind(reason)
                    .bind(&run.id)
                    .execute(&mut **tx)
                    .await?;
            }
        }
        Ok(())
    }
}

/// The first of `run`'s `after` waits that is not met, read in the creating
/// transaction (`None`: every upstream is SUCCESS, or there is none).
async fn unmet_wait<'r>(tx: &mut Tx<'_>, run: &'r NewRun) -> Result<Option<&'r crate::AfterWait>> {
    for wait in &run.after {
        let met: Option<(String,)> = match &wait.node {
            None => {
                sqlx::query_as(&sql(RUN_MET))
                    .bind(&wait.flow)
                    .bind(&wait.date)
                    .fetch_optional(&mut **tx)
                    .await?
            }
            Some(node) => {
                sqlx::query_as(&sql(NODE_MET))
                    .bind(&wait.flow)
                    .bind(&wait.date)
                    .bind(node)
                    .bind(node)
                    .fetch_optional(&mut **tx)
                    .await?
            }
        };
        if met.is_none() {
            return Ok(Some(wait));
        }
    }
    Ok(None)
}

impl Admitted<'_> {
    /// Rewrites the leases of the runs held from birth from the database's clock
    /// (`Dialect::NOW_MS`): the rows were written with the creating replica's
    /// `until_ms`, which a skewed clock would make lapse at once, or never.
    async fn lease_by_database_clock(&self, tx: &mut Tx<'_>) -> Result<()> {
        let mut held: Vec<(i64, &str)> = self
            .runs
            .iter()
            .filter(|(_, _, start)| *start)
            .filter_map(|(run, _, _)| run.lease.as_ref().map(|l| (l.length_ms(), run.id.as_str())))
            .collect();
        held.sort_unstable();
        for group in held.chunk_by(|a, b| a.0 == b.0) {
            for chunk in group.chunks(CHUNK) {
                let mut q: QueryBuilder<Db> =
                    QueryBuilder::new(format!("UPDATE runs SET lease_until = {} + ", D::NOW_MS));
                q.push_bind(chunk[0].0).push(" WHERE id IN ");
                push_list(&mut q, chunk.iter().map(|(_, id)| *id));
                q.build().execute(&mut **tx).await?;
            }
        }
        Ok(())
    }
}

/// The runs that the idempotency keys of `runs` already made, by (flow, key).
async fn existing_keys(tx: &mut Tx<'_>, runs: &[NewRun]) -> Result<HashMap<(String, String), Existing>> {
    let keyed: Vec<(&str, &str)> =
        runs.iter().filter_map(|r| Some((r.flow.as_str(), r.idempotency_key.as_deref()?))).collect();
    let mut known = HashMap::new();
    for chunk in keyed.chunks(CHUNK) {
        let mut flows: Vec<&str> = chunk.iter().map(|(f, _)| *f).collect();
        flows.sort_unstable();
        flows.dedup();
        let mut q: QueryBuilder<Db> = QueryBuilder::new(format!(
            "SELECT flow, {}, id, version FROM runs WHERE flow IN ",
            D::bytes_as_text("idempotency_key")
        ));
        push_list(&mut q, flows);
        q.push(" AND idempotency_key IN ");
        push_list(&mut q, chunk.iter().map(|(_, k)| *k));
        let keep = super::cacheable(q.sql());
        let rows: Vec<(String, String, String, i64)> =
            q.build_query_as().persistent(keep).fetch_all(&mut **tx).await?;
        for (flow, key, run_id, version) in rows {
            known.insert((flow, key), Existing { run_id, version: version as u32 });
        }
    }
    Ok(known)
}

/// Gathers the facts `admit` reads, in its order, leaving out what it will not
/// read (see `madeira_core::admit::Facts`). A fact read from the database first
/// writes what the batch has admitted, so it counts those runs too.
async fn facts(tx: &mut Tx<'_>, run: &NewRun, batch: &mut Admitted<'_>) -> Result<Facts> {
    if let Some(key) = &run.idempotency_key
        && let Some(existing) = batch.keys.get(&(run.flow.clone(), key.clone()))
    {
        return Ok(Facts { existing: Some(existing.clone()), ..Facts::default() });
    }
    if let Some(existing) = scheduled_for_biz_date(tx, run, batch).await? {
        return Ok(Facts { existing: Some(existing), ..Facts::default() });
    }
    let mut claims = Vec::with_capacity(run.throttles.len());
    for claim in &run.throttles {
        let key = (run.flow.clone(), claim.node.clone());
        let n = match batch.claims.get(&key) {
            Some(n) => *n,
            None => {
                batch.write(tx).await?;
                let (n,): (i64,) = sqlx::query_as(&sql(&format!(
                    "SELECT COUNT(*) FROM nodes n JOIN runs r ON r.id = n.run_id \
                         WHERE r.flow = $1 AND r.state IN {UNFINISHED} AND n.node = $2 \
                         AND n.state IN ('INIT', 'RETRYING', 'RUNNING')"
                )))
                .bind(&run.flow)
                .bind(&claim.node)
                .fetch_one(&mut **tx)
                .await?;
                batch.claims.insert(key, n);
                n
            }
        };
        claims.push(u32::try_from(n).unwrap_or(u32::MAX));
    }
    if run.max_active_runs == 0 {
        return Ok(Facts { claims, ..Facts::default() });
    }
    batch.write(tx).await?;
    let active: Vec<(String,)> =
        sqlx::query_as(&sql(&format!("SELECT id FROM runs WHERE flow = $1 AND {ACTIVE} ORDER BY id")))
            .bind(&run.flow)
            .fetch_all(&mut **tx)
            .await?;
    // A backfill run waiting for room does not hold back another run unless it
    // has waited longer than `BACKFILL_DEFER_MS` (backfills rank below).
    let ahead = match run.trigger == BACKFILL_TRIGGER {
        true => i64::MAX,
        false => run.now_ms - BACKFILL_DEFER_MS,
    };
    let queued: Option<(String,)> = sqlx::query_as(&sql(&format!(
        "SELECT id FROM runs WHERE flow = $1 AND {WAITING} \
         AND (\"trigger\" <> '{BACKFILL_TRIGGER}' OR created_at <= $2) LIMIT 1"
    )))
    .bind(&run.flow)
    .bind(ahead)
    .fetch_optional(&mut **tx)
    .await?;
    let active = active.into_iter().map(|(id,)| id).collect();
    Ok(Facts { existing: None, claims, active, queued: queued.is_some() })
}

/// The scheduled run (`cron`, `cron_catchup`) the flow already has for the
/// run's business date, when the run is one of those (`NewRun::one_per_biz_date`).
async fn scheduled_for_biz_date(
    tx: &mut Tx<'_>,
    run: &NewRun,
    batch: &mut Admitted<'_>,
) -> Result<Option<Existing>> {
    let Some(date) = run.biz_date.as_ref().filter(|_| run.one_per_biz_date) else { return Ok(None) };
    let key = (run.flow.clone(), date.clone());
    if let Some(existing) = batch.scheduled.get(&key) {
        return Ok(Some(existing.clone()));
    }
    batch.write(tx).await?;
    let row: Option<(String, i64)> =
        sqlx::query_as(&sql("SELECT id, version FROM runs WHERE flow = $1 AND biz_date = $2 \
         AND \"trigger\" IN ('cron', 'cron_catchup') ORDER BY id LIMIT 1"))
        .bind(&run.flow)
        .bind(date)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(row.map(|(run_id, version)| Existing { run_id, version: version as u32 }))
}

/// Whether `flow` is paused (a flow not found is not).
async fn flow_paused(tx: &mut Tx<'_>, flow: &str, batch: &mut Admitted<'_>) -> Result<bool> {
    if let Some(paused) = batch.paused.get(flow) {
        return Ok(*paused);
    }
    let row: Option<(bool,)> = sqlx::query_as(&sql("SELECT paused FROM flows WHERE name = $1"))
        .bind(flow)
        .fetch_optional(&mut **tx)
        .await?;
    let paused = row.is_some_and(|(p,)| p);
    batch.paused.insert(flow.to_string(), paused);
    Ok(paused)
}

/// Decides the run with `madeira_core::admit` and records what it says for the
/// batch to write: the run row (ADMITTED with `admitted_at` when it may start,
/// else QUEUED), its
/// node rows and the transition record of its creation edge.
async fn create_in<'a>(tx: &mut Tx<'_>, run: &'a NewRun, batch: &mut Admitted<'a>) -> Result<CreateOutcome> {
    let facts = facts(tx, run, batch).await?;
    // Read under the flow's lock, which `set_paused` takes too: once a pause has
    // answered, no trigger it stops makes a run (a repeated key still finds its run).
    if facts.existing.is_none() && run.stopped_by_pause() && flow_paused(tx, &run.flow, batch).await? {
        return Ok(CreateOutcome::Paused);
    }
    let decision = admit(&facts, &run.policy()).map_err(refused)?;
    let (mut created, mut start, cancel_previous) = match to_write(decision) {
        Ok(write) => write,
        Err(answer) => return Ok(answer),
    };
    if let Some(wait) = unmet_wait(tx, run).await? {
        // Held: not admitted, so it counts toward no `max_active_runs`; admission
        // promotes it once every wait is met (`WAITING`).
        start = false;
        batch.held.insert(run.id.clone(), format!("waiting for {}", wait.label()));
    }
    let start = start && run.wait_reason.is_none();
    if start != (created.to == madeira_core::state::RunState::Admitted) {
        created = RunEdge::creation(start).map_err(refused)?;
    }
    if let Some(key) = &run.idempotency_key {
        let existing = Existing { run_id: run.id.clone(), version: run.version };
        batch.keys.insert((run.flow.clone(), key.clone()), existing);
    }
    if let Some(date) = run.biz_date.as_ref().filter(|_| run.one_per_biz_date) {
        let existing = Existing { run_id: run.id.clone(), version: run.version };
        batch.scheduled.insert((run.flow.clone(), date.clone()), existing);
    }
    batch.runs.push((run, created, start));
    for claim in &run.throttles {
        *batch.claims.entry((run.flow.clone(), claim.node.clone())).or_default() += 1;
    }
    Ok(CreateOutcome::Created { run_id: run.id.clone(), start, cancel_previous })
}

/// Admits the oldest waiting QUEUED run of `flow` to start when
/// `madeira_core::admit::promote` says there is room (QUEUED -> ADMITTED, recorded;
/// the engine's `Command::Start` then takes it RUNNING).
pub(super) async fn promote_queued(
    pool: &Pool,
    ids: Option<&TransitionIds>,
    flow: &str,
    max_active_runs: u32,
    now_ms: i64,
) -> Result<Option<String>> {
    let mut tx = pool.begin().await?;
    lock_flow(&mut tx, flow).await?;
    let (active,): (i64,) =
        sqlx::query_as(&sql(&format!("SELECT COUNT(*) FROM runs WHERE flow = $1 AND {ACTIVE}")))
            .bind(flow)
            .fetch_one(&mut *tx)
            .await?;
    // Backfill runs rank as if created `BACKFILL_DEFER_MS` later.
    let oldest: Option<(String,)> = sqlx::query_as(&sql(&format!(
        "SELECT id FROM runs WHERE flow = $1 AND {WAITING} ORDER BY CASE WHEN \"trigger\" = \
         '{BACKFILL_TRIGGER}' THEN created_at + $2 ELSE created_at END, id LIMIT 1"
    )))
    .bind(flow)
    .bind(BACKFILL_DEFER_MS)
    .fetch_optional(&mut *tx)
    .await?;
    let facts = QueueFacts {
        active: u32::try_from(active).unwrap_or(u32::MAX),
        oldest_queued: oldest.map(|(id,)| id),
    };
    let Some(run_id) = promote(&facts, max_active_runs) else {
        return Ok(None);
    };
    admit_queued(&mut tx, ids, &run_id, now_ms).await?;
    tx.commit().await?;
    Ok(Some(run_id))
}

/// Writes a waiting run's admission: QUEUED -> ADMITTED (the run table's edge),
/// `admitted_at`, no `wait_reason`, and the transition record, in the caller's
/// transaction (which holds the run's flow lock).
async fn admit_queued(tx: &mut Tx<'_>, ids: Option<&TransitionIds>, run_id: &str, now_ms: i64) -> Result<()> {
    let edge = RunEdge::admission().map_err(refused)?;
    let changed = sqlx::query(&sql(
        "UPDATE runs SET state = $1, admitted_at = $2, wait_reason = NULL WHERE id = $3 AND state = $4",
    ))
    .bind(edge.to.as_str())
    .bind(now_ms)
    .bind(run_id)
    .bind(edge.from.map_or("NONE", |s| s.as_str()))
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if changed != 1 {
        return Err(StoreError::Refused(format!("run {run_id} is no longer QUEUED")));
    }
    let entry =
        Entry { node: None, edge: Edge::Run(edge), actor: "engine", attempt: 0, reason: None, at: now_ms };
    let mut s = Script::new();
    super::insert_transitions(&mut **tx, &mut s, ids, vec![(run_id, entry)]).await?;
    s.send(tx).await
}

/// See `RunStore::set_wait_reason`; under the run's flow lock, so a release and
/// a promotion of the same flow never interleave.
pub(super) async fn set_wait_reason(
    pool: &Pool,
    ids: Option<&TransitionIds>,
    run_id: &str,
    reason: Option<&str>,
    admit_ms: Option<i64>,
) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let flow: Option<(String,)> = sqlx::query_as(&sql(
        "SELECT flow FROM runs WHERE id = $1 AND state = 'QUEUED' AND wait_reason IS NOT NULL",
    ))
    .bind(run_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((flow,)) = flow else { return Ok(false) };
    lock_flow(&mut tx, &flow).await?;
    // Re-read under the lock: another replica may have released it meanwhile.
    let still: Option<(String,)> = sqlx::query_as(&sql(
        "SELECT id FROM runs WHERE id = $1 AND state = 'QUEUED' AND wait_reason IS NOT NULL",
    ))
    .bind(run_id)
    .fetch_optional(&mut *tx)
    .await?;
    if still.is_none() {
        return Ok(false);
    }
    match admit_ms.filter(|_| reason.is_none()) {
        Some(now_ms) => admit_queued(&mut tx, ids, run_id, now_ms).await?,
        None => {
            sqlx::query(&sql("UPDATE runs SET wait_reason = $1 WHERE id = $2"))
                .bind(reason)
                .bind(run_id)
                .execute(&mut *tx)
                .await?;
        }
    }
    tx.commit().await?;
    Ok(true)
}

/// Deletes one small batch so the engine's writes are never blocked for long.
pub(super) async fn prune(pool: &Pool, before_ms: i64, batch: u32) -> Result<u64> {
    let partitioned = D::partitioned_ids(pool).await?;
    let mut tx = pool.begin().await?;
    let ids: Vec<(String,)> = sqlx::query_as(&sql(&format!(
        "SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < $1 \
         AND state IN ('SUCCESS', 'FAILED', 'CANCELLED') LIMIT $2{}",
        D::SKIP_LOCKED
    )))
    .bind(before_ms)
    .bind(i64::from(batch))
    .fetch_all(&mut *tx)
    .await?;
    let ids: Vec<String> = ids.into_iter().map(|(id,)| id).collect();
    let mut deleted = 0;
    for chunk in ids.chunks(CHUNK) {
        deleted += super::delete_runs(&mut tx, chunk, &[], partitioned.as_ref()).await?;
    }
    prune_backfills(&mut tx, before_ms, batch).await?;
    for (table, column) in [("audit", "at"), ("run_commands", "created_at")] {
        sqlx::query(&sql(&format!(
            "DELETE FROM {table} WHERE id IN (SELECT id FROM (SELECT id FROM {table} WHERE {column} < $1 LIMIT $2) AS old)"
        )))
        .bind(before_ms)
        .bind(i64::from(batch))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(deleted)
}

/// Deletes finished backfills (done or cancelled before `before_ms`) none of
/// whose runs is left, with their steps: a few per batch (a backfill has up to
/// a few thousand steps).
async fn prune_backfills(tx: &mut Tx<'_>, before_ms: i64, batch: u32) -> Result<()> {
    let ids: Vec<(String,)> = sqlx::query_as(&sql(
        "SELECT b.id FROM backfills b WHERE b.state IN ('done', 'cancelled') AND b.finished_at < $1 \
         AND NOT EXISTS (SELECT 1 FROM backfill_steps s JOIN runs r ON r.id = s.run_id \
         WHERE s.backfill_id = b.id) ORDER BY b.finished_at LIMIT $2",
    ))
    .bind(before_ms)
    .bind(i64::from((batch / 20).max(1)))
    .fetch_all(&mut **tx)
    .await?;
    if ids.is_empty() {
        return Ok(());
    }
    for (table, column) in [("backfill_steps", "backfill_id"), ("backfills", "id")] {
        let mut q: QueryBuilder<Db> = QueryBuilder::new(format!("DELETE FROM {table} WHERE {column} IN "));
        push_list(&mut q, ids.iter().map(|(id,)| id));
        q.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// Writes the probe row (the store's health check).
pub(super) async fn probe(pool: &Pool, now_ms: i64) -> Result<()> {
    sqlx::query(&sql(&format!("INSERT INTO store_probe (id, at) VALUES (1, $1){}", upsert("id", "at"))))
        .bind(now_ms)
        .execute(pool)
        .await?;
    Ok(())
}
