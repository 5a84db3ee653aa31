//! Time partitions (PostgreSQL's `logs` and `run_archive`, one per UTC day of
//! run ids) and retention by the day. On every backend, with the same answers
//! (elsewhere rows are deleted as before): a day whose runs all finished before
//! the cutoff goes whole, a day with a run still running or finished within
//! retention stays, and a run in a day partition reads the same before and
//! after its fold (run, nodes, attempts, transitions, logs, durations). On
//! PostgreSQL: the partitions a store opens with, two keepers racing, a row of
//! a day without a partition, the dropped and kept days' tables, and the
//! upgrade of a store with rows in it.

use madeira_core::timebound::id_bound;
use madeira_core::{Cause, NodeState, RunCause, RunState};

use crate::postgres::PostgresStore;
use crate::testing::PgTestDb;
use crate::tests::suite::new_run;
use crate::*;

const DAY_MS: i64 = 86_400_000;
/// 2026-11-01T00:00:00Z.
const NOV1: i64 = 1_761_955_200_000;

/// A UUIDv7-shaped run id of `ms`, the `n`th of its millisecond.
fn id_at(ms: i64, n: u32) -> String {
    format!("{}7000-8000-{n:012x}", &id_bound(ms)[..14])
}

/// Creates run `id` at `at` (one node `a`) and commits its attempt with a log;
/// `finished`: the run ends SUCCESS then, else it stays RUNNING.
async fn run_with_log(s: &dyn Store, id: &str, at: i64, finished: Option<i64>) {
    let run = NewRun {
        flow: "p".into(),
        node_names: vec!["a".into()],
        now_ms: at,
        ..new_run(id, None, 0, Overlap::Queue)
    };
    s.create_run(&run).await.expect("create");
    let mut node = s.load_run(id).await.expect("load").expect("run").nodes.remove(0);
    node.state = if finished.is_some() { NodeState::Success } else { NodeState::Running };
    node.attempt = 1;
    node.started_at = Some(at + 1);
    node.finished_at = finished;
    let edge = |to, cause, t| TransitionRecord {
        run_id: id.into(),
        node: Some("a".into()),
        edge: Edge::Node { from: NodeState::Init, to, cause },
        actor: "engine".into(),
        attempt: 1,
        reason: None,
        at: t,
    };
    let mut transitions = vec![edge(NodeState::Running, Cause::Dispatch, at + 1)];
    if let Some(end) = finished {
        transitions.push(TransitionRecord {
            node: None,
            edge: Edge::run(Some(RunState::Running), RunCause::Succeeded, RunState::Success),
            attempt: 0,
            ..edge(NodeState::Success, Cause::Succeeded, end)
        });
    }
    s.commit(&Batch {
        runs: vec![RunWrite {
            run_id: id.into(),
            state: if finished.is_some() { RunState::Success } else { RunState::Running },
            started_at: Some(at + 1),
            finished_at: finished,
        }],
        nodes: vec![node],
        attempts: vec![AttemptRecord {
            run_id: id.into(),
            node: "a".into(),
            attempt: 1,
            started_at: at + 1,
            finished_at: finished,
            outcome: finished.map(|_| "SUCCESS".into()),
            error: None,
            host: Some("replica-a".into()),
        }],
        logs: vec![LogRecord {
            run_id: id.into(),
            node: "a".into(),
            attempt: 1,
            content: format!("log of {id}\n"),
        }],
        transitions,
        ..Batch::default()
    })
    .await
    .expect("commit");
}

/// What every reader says of run `id`: the run, its nodes and attempts, its
/// transitions and its node's logs.
type Read = (RunRow, Vec<NodeRow>, Vec<AttemptRecord>, Vec<TransitionRecord>, Vec<LogRecord>);

async fn read(s: &dyn Store, id: &str) -> Option<Read> {
    let run = s.load_run(id).await.expect("load")?;
    let log = s.transitions(id).await.expect("log");
    Some((run.run, run.nodes, run.attempts, log, s.logs(id, "a").await.expect("logs")))
}

/// Day 1 (Nov 1): two runs, finished that day. Day 2: one finished, one still
/// running. Day 3: one finished after the cutoff (within retention). The cutoff
/// is the start of Nov 4.
pub(crate) async fn retention_drops_whole_days_and_keeps_days_with_live_runs(s: &dyn Store) {
    s.keep_partitions(NOV1, NOV1 + 2 * DAY_MS).await.expect("keep");
    let (d1, d2, d3) = (NOV1, NOV1 + DAY_MS, NOV1 + 2 * DAY_MS);
    let cutoff = NOV1 + 3 * DAY_MS;
    let a1 = id_at(d1 + 3_600_000, 1);
    let a2 = id_at(d1 + 7_200_000, 2);
    let b1 = id_at(d2 + 3_600_000, 1);
    let b2 = id_at(d2 + 7_200_000, 2);
    let c1 = id_at(d3 + 3_600_000, 1);
    run_with_log(s, &a1, d1 + 3_600_000, Some(d1 + 3_700_000)).await;
    run_with_log(s, &a2, d1 + 7_200_000, Some(d1 + 7_300_000)).await;
    run_with_log(s, &b1, d2 + 3_600_000, Some(d2 + 3_700_000)).await;
    run_with_log(s, &b2, d2 + 7_200_000, None).await;
    run_with_log(s, &c1, d3 + 3_600_000, Some(cutoff + 3_600_000)).await;
    let before_fold = read(s, &c1).await.expect("c1");
    let durations = s.node_durations("p", 10).await.expect("durations");
    assert_eq!(s.fold_finished(cutoff + DAY_MS, 100).await.expect("fold"), 4, "the finished runs");
    assert_eq!(read(s, &c1).await.expect("c1 folded"), before_fold, "a folded run in a day partition");
    assert_eq!(s.node_durations("p", 10).await.expect("durations"), durations);

    let days = s.drop_days(cutoff).await.expect("drop days");
    assert!(days <= 1, "only Nov 1 is wholly past retention: {days}");
    let mut pruned = 0;
    loop {
        let n = s.prune(cutoff, 2).await.expect("prune");
        pruned += n;
        if n < 2 {
            break;
        }
    }
    assert_eq!(pruned, 3, "a1, a2, b1: finished before the cutoff");
    for gone in [&a1, &a2, &b1] {
        assert!(read(s, gone).await.is_none(), "{gone} pruned");
        let logs = s.logs(gone, "a").await.expect("logs");
        assert!(logs.is_empty(), "{gone}'s logs go with it: {logs:?}");
    }
    let (running, _, _, _, logs) = read(s, &b2).await.expect("b2 kept");
    assert_eq!(running.state, RunState::Running);
    assert_eq!(logs[0].content, format!("log of {b2}\n"));
    assert_eq!(read(s, &c1).await.expect("c1 kept"), before_fold, "within retention");
    // Nothing is left to drop until b2 ends and c1 passes the cutoff.
    assert_eq!(s.drop_days(cutoff).await.expect("again"), 0);
}

/// A PostgreSQL store, its pool, and the days its tables have partitions for.
async fn pg() -> Option<(PgTestDb, PostgresStore)> {
    let db = PgTestDb::create().await.expect("PostgreSQL test database")?;
    let store = PostgresStore::open(&db.url).await.expect("open");
    Some((db, store))
}

/// The day partitions of `table`, by name, in order.
async fn day_tables(s: &PostgresStore, table: &str) -> Vec<String> {
    let names: Vec<(String,)> = sqlx::query_as(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = to_regclass($1) AND c.relname ~ '_p[0-9]{8}$' ORDER BY 1",
    )
    .bind(table)
    .fetch_all(s.pool())
    .await
    .expect("partitions");
    names.into_iter().map(|(n,)| n).collect()
}

fn day_name(table: &str, ms: i64) -> String {
    let day = chrono::DateTime::from_timestamp_millis(ms).expect("time").format("%Y%m%d");
    format!("{table}_p{day}")
}

#[tokio::test]
async fn postgres_opens_with_partitions_ahead_and_racing_keepers_make_each_once() {
    let Some((_db, s)) = pg().await else { return };
    let today = chrono::Utc::now().timestamp_millis().div_euclid(DAY_MS) * DAY_MS;
    for table in ["logs", "run_archive"] {
        let tables = day_tables(&s, table).await;
        let want: Vec<String> = (-1..=7).map(|d| day_name(table, today + d * DAY_MS)).collect();
        assert_eq!(tables, want, "yesterday to a week ahead");
    }
    let (a, b) = futures::join!(
        s.keep_partitions(NOV1, NOV1 + 3 * DAY_MS),
        s.keep_partitions(NOV1, NOV1 + 3 * DAY_MS)
    );
    assert_eq!(a.expect("keeper a") + b.expect("keeper b"), 8, "4 days of 2 tables, each made once");
    assert_eq!(s.keep_partitions(NOV1, NOV1 + 3 * DAY_MS).await.expect("again"), 0, "idempotent");
    assert!(day_tables(&s, "logs").await.contains(&day_name("logs", NOV1)));
}

#[tokio::test]
async fn postgres_a_row_of_a_day_without_a_partition_makes_it() {
    let Some((_db, s)) = pg().await else { return };
    // 2026-03-10: no keeper made it.
    let day = NOV1 - 236 * DAY_MS;
    assert!(!day_tables(&s, "logs").await.contains(&day_name("logs", day)));
    let id = id_at(day + 60_000, 7);
    run_with_log(&s, &id, day + 60_000, Some(day + 120_000)).await;
    assert!(day_tables(&s, "logs").await.contains(&day_name("logs", day)), "made by the write");
    assert_eq!(s.logs(&id, "a").await.expect("logs")[0].content, format!("log of {id}\n"));
    assert_eq!(s.fold_finished(day + DAY_MS, 10).await.expect("fold"), 1);
    let (_, nodes, _, log, logs) = read(&s, &id).await.expect("folded");
    assert_eq!((nodes.len(), log.len(), logs.len()), (1, 3, 1));
    // A row whose id is not a time id goes to `_far`.
    run_with_log(&s, "r1", 5, Some(6)).await;
    assert_eq!(s.logs("r1", "a").await.expect("logs").len(), 1);
}

#[tokio::test]
async fn postgres_retention_drops_the_day_tables_and_keeps_the_others() {
    let Some((_db, s)) = pg().await else { return };
    retention_drops_whole_days_and_keeps_days_with_live_runs(&s).await;
    for table in ["logs", "run_archive"] {
        let tables = day_tables(&s, table).await;
        assert!(!tables.contains(&day_name(table, NOV1)), "{table}: Nov 1 dropped: {tables:?}");
        assert!(tables.contains(&day_name(table, NOV1 + DAY_MS)), "{table}: Nov 2 kept (b2 runs)");
        assert!(tables.contains(&day_name(table, NOV1 + 2 * DAY_MS)), "{table}: Nov 3 kept (c1)");
    }
    let (left,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM pg_class WHERE relname = $1")
        .bind(day_name("logs", NOV1))
        .fetch_one(s.pool())
        .await
        .expect("count");
    assert_eq!(left, 0, "detached and dropped, not left behind");
}

/// The partitions' migration.
const PARTITIONS: &str = "20261212000100_time_partitions.sql";

/// A fresh PostgreSQL database at the schema before the partitions, and a pool on it.
async fn pg_before_partitions() -> Option<(PgTestDb, sqlx::PgPool)> {
    let db = PgTestDb::create().await.expect("PostgreSQL test database")?;
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
    super::upgrade::migrator_before("postgres", dir.path(), PARTITIONS)
        .await
        .run(&pool)
        .await
        .expect("old schema");
    Some((db, pool))
}

#[tokio::test]
async fn postgres_upgrades_a_store_with_rows_in_it() {
    let Some((db, pool)) = pg_before_partitions().await else { return };
    let t1 = id_at(NOV1 + 60_000, 1);
    let mut rows = super::upgrade::finished_run_rows();
    rows.extend([
        format!(
            "INSERT INTO runs (id, flow, version, state, params, \"trigger\", created_at, admitted_at, started_at, \
             finished_at, actor) VALUES ('{t1}', 'p', 1, 'SUCCESS', '{{}}', 'api', {0}, {0}, {0}, {1}, 'bob')",
            NOV1 + 60_000,
            NOV1 + 90_000
        ),
        format!(
            "INSERT INTO nodes (run_id, idx, node, state, attempt, series_start, data_version, outputs, \"reads\", \
             stale, fallback, started_at, finished_at) VALUES ('{t1}', 0, 'a', 'SUCCESS', 1, 1, 0, '{{}}', '[]', \
             FALSE, FALSE, {0}, {1})",
            NOV1 + 60_000,
            NOV1 + 90_000
        ),
        format!(
            "INSERT INTO attempts (run_id, node, attempt, started_at, finished_at, outcome) VALUES \
             ('{t1}', 'a', 1, {}, {}, 'SUCCESS')",
            NOV1 + 60_000,
            NOV1 + 90_000
        ),
        format!("INSERT INTO logs (run_id, node, attempt, content) VALUES ('{t1}', 'a', 1, 'old line\n')"),
        "INSERT INTO logs (run_id, node, attempt, content) VALUES ('f1', 'verify', 1, 'exit 1\n')".into(),
    ]);
    sqlx::raw_sql(&rows.join(";\n")).execute(&pool).await.expect("old rows");
    pool.close().await;
    let s = PostgresStore::open(&db.url).await.expect("migrated");
    let partitions: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i \
         JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'logs'::regclass \
         AND c.relname IN ('logs_old', 'logs_far') ORDER BY 1",
    )
    .fetch_all(s.pool())
    .await
    .expect("partitions");
    let nov2 = id_bound(NOV1 + DAY_MS);
    assert_eq!(
        partitions,
        vec![
            (
                "logs_far".into(),
                "FOR VALUES FROM ('0699e991-a800-0000-0000-000000000000') TO (MAXVALUE)".into()
            ),
            ("logs_old".into(), format!("FOR VALUES FROM (MINVALUE) TO ('{nov2}')")),
        ],
        "the old table attached up to the day after its newest row; `f1` moved to `_far`"
    );
    assert_eq!(s.logs(&t1, "a").await.expect("logs")[0].content, "old line\n");
    assert_eq!(s.logs("f1", "verify").await.expect("logs")[0].content, "exit 1\n");
    // The archive's old table was empty: t1's archive row goes to its day's
    // partition, made by the fold's write.
    let before = read(&s, &t1).await.expect("t1");
    assert_eq!(s.fold_finished(NOV1 + DAY_MS, 10).await.expect("fold"), 2, "t1 and f1");
    assert_eq!(read(&s, &t1).await.expect("t1 folded"), before);
    assert!(day_tables(&s, "run_archive").await.contains(&day_name("run_archive", NOV1)));
    // Retention: Nov 1's archive partition goes whole; t1's logs, in `logs_old`, by rows.
    assert_eq!(s.drop_days(NOV1 + 2 * DAY_MS).await.expect("drop"), 1);
    assert_eq!(s.prune(NOV1 + 2 * DAY_MS, 10).await.expect("prune"), 2, "t1 and f1");
    let (logs,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM logs").fetch_one(s.pool()).await.expect("count");
    assert_eq!(logs, 0, "rows outside day partitions deleted with their runs");
    // No run of the old range is left: the next retention drops `_old` (both
    // tables), and a run of that range made later still gets its rows (its day's
    // partition is made), counted as partitioned from the lowest id on.
    let (_, far) = s.partitioned_ids_for_tests().await.expect("ids").expect("bounds");
    assert_eq!(s.drop_days(NOV1 + 2 * DAY_MS).await.expect("drop"), 0, "no day to drop");
    let olds: Vec<(String,)> = sqlx::query_as(
        "SELECT relname::text FROM pg_class WHERE relname IN ('logs_old', 'run_archive_old') ORDER BY 1",
    )
    .fetch_all(s.pool())
    .await
    .expect("old tables");
    assert!(olds.is_empty(), "the `_old` partitions dropped: {olds:?}");
    assert_eq!(s.partitioned_ids_for_tests().await.expect("ids"), Some((String::new(), far)));
    let late = id_at(NOV1 + 120_000, 2);
    run_with_log(&s, &late, NOV1 + 120_000, Some(NOV1 + 130_000)).await;
    assert!(read(&s, &late).await.is_some(), "written below the old bound, into its day's partition");
    assert!(day_tables(&s, "logs").await.contains(&day_name("logs", NOV1)));
}

/// An upgraded store whose old range still has a run keeps its `_old` partition.
#[tokio::test]
async fn postgres_keeps_the_old_partition_while_a_run_of_its_range_is_left() {
    let Some((db, pool)) = pg_before_partitions().await else { return };
    let t1 = id_at(NOV1 + 60_000, 1);
    let row = format!(
        "INSERT INTO runs (id, flow, version, state, params, \"trigger\", created_at, admitted_at, started_at, \
         actor) VALUES ('{t1}', 'p', 1, 'RUNNING', '{{}}', 'api', {0}, {0}, {0}, 'bob'); \
         INSERT INTO logs (run_id, node, attempt, content) VALUES ('{t1}', 'a', 1, 'running\n')",
        NOV1 + 60_000
    );
    sqlx::raw_sql(&row).execute(&pool).await.expect("old row");
    pool.close().await;
    let s = PostgresStore::open(&db.url).await.expect("migrated");
    assert_eq!(s.drop_days(NOV1 + 30 * DAY_MS).await.expect("drop"), 0);
    let (olds,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM pg_class WHERE relname = 'logs_old'")
        .fetch_one(s.pool())
        .await
        .expect("old table");
    assert_eq!(olds, 1, "a running run of the old range keeps it");
    assert_eq!(s.logs(&t1, "a").await.expect("logs")[0].content, "running\n");
}
