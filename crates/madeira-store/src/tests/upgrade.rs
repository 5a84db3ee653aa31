//! Upgrades keep every run's history. The packed transition log (`crate::packed`): on each backend, a database at the schema just before the migration
//! that packs it gets transitions written in the old format (one row each, with
//! every node and run state and cause, reasons with quotes and line breaks, times
//! going back and forth), then the store opens it, migrates, and reads the same
//! log back, in order; what it writes after them comes after them. The run
//! archive: a finished run written at the schema before it is read the same
//! after the upgrade, folded by the archiver, and unfolded by a claim.

use std::path::Path;

use madeira_core::state::{Cause, NodeState, RunCause, RunState};
use sqlx::migrate::Migrator;

use crate::mysql::{MySqlOptions, MySqlStore};
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::testing::{MySqlTestDb, PgTestDb};
use crate::*;

const MIGRATION: &str = "20261210000100_packed_transitions.sql";

/// The transitions written in the old format: run `u1` with every node state
/// as `from` and every cause once, then every run edge; run `u2` with two.
fn old_log() -> Vec<TransitionRecord> {
    let mut log = Vec::new();
    let mut at = 1_733_000_000_000;
    let mut push = |run: &str, node: Option<&str>, edge: Edge, actor: &str, reason: Option<&str>| {
        // Back by 5 ms every seventh transition: `dt` may be negative.
        at += if log.len() % 7 == 6 { -5 } else { 13 };
        log.push(TransitionRecord {
            run_id: run.into(),
            node: node.map(str::to_string),
            edge,
            actor: actor.into(),
            attempt: u32::try_from(log.len() % 4).expect("small"),
            reason: reason.map(str::to_string),
            at,
        });
    };
    for (i, cause) in Cause::ALL.into_iter().enumerate() {
        let from = NodeState::ALL[i % NodeState::ALL.len()];
        let to = NodeState::ALL[(i + 3) % NodeState::ALL.len()];
        let actor = if i % 5 == 0 { "alice" } else { "engine" };
        let reason = (i % 3 == 0).then_some("it's \"late\",\nretry");
        push(
            "u1",
            Some(if i % 2 == 0 { "pull_refunds" } else { "vérif" }),
            Edge::Node { from, to, cause },
            actor,
            reason,
        );
    }
    let froms = std::iter::once(None).chain(RunState::ALL.into_iter().map(Some));
    for (i, from) in froms.enumerate() {
        for (j, cause) in RunCause::ALL.into_iter().enumerate() {
            let to = RunState::ALL[(i + j) % RunState::ALL.len()];
            push("u1", None, Edge::run(from, cause, to), "scheduler", (j == 2).then_some("why"));
        }
    }
    let created = Edge::run(None, RunCause::Created, RunState::Queued);
    push("u2", None, created, "api", None);
    let dispatch = Edge::Node { from: NodeState::Init, to: NodeState::Running, cause: Cause::Dispatch };
    push("u2", Some("a"), dispatch, "engine", None);
    log
}

fn literal(s: Option<&str>) -> String {
    s.map_or("NULL".into(), |s| format!("'{}'", s.replace('\'', "''")))
}

/// The old format's INSERTs of `log`, one row each, in order; `numbered`: with
/// the ids the store gives (SQLite), the counter moved past them.
fn old_rows(log: &[TransitionRecord], numbered: bool) -> Vec<String> {
    let mut rows: Vec<String> = log
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (id, value) = if numbered { ("id, ", format!("{}, ", i + 1)) } else { ("", String::new()) };
            format!(
                "INSERT INTO transitions ({id}run_id, node, from_state, to_state, cause, actor, attempt, reason, at) \
                 VALUES ({value}{}, {}, '{}', '{}', '{}', {}, {}, {}, {})",
                literal(Some(&t.run_id)),
                literal(t.node.as_deref()),
                t.edge.from_name(),
                t.edge.to_name(),
                t.edge.cause_name(),
                literal(Some(&t.actor)),
                t.attempt,
                literal(t.reason.as_deref()),
                t.at
            )
        })
        .collect();
    if numbered {
        rows.push(format!("UPDATE transition_seq SET seq = {}", log.len()));
    }
    rows
}

/// A copy of `backend`'s migrations before `MIGRATION`, in `dir`.
async fn old_migrator(backend: &str, dir: &Path) -> Migrator {
    migrator_before(backend, dir, MIGRATION).await
}

/// A copy of `backend`'s migrations before `migration`, in `dir`.
pub(super) async fn migrator_before(backend: &str, dir: &Path, migration: &str) -> Migrator {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations").join(backend);
    let old = dir.join(backend);
    std::fs::create_dir(&old).expect("dir");
    for entry in std::fs::read_dir(&src).expect("migrations") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name").to_string_lossy().into_owned();
        if name.as_str() < migration {
            std::fs::copy(&path, old.join(&name)).expect("copy");
        }
    }
    Migrator::new(old.as_path()).await.expect("migrator")
}

/// What every backend must read after the upgrade, and keep writing after.
async fn check(s: &dyn Store) {
    let log = old_log();
    let u1: Vec<TransitionRecord> = log.iter().filter(|t| t.run_id == "u1").cloned().collect();
    let u2: Vec<TransitionRecord> = log.iter().filter(|t| t.run_id == "u2").cloned().collect();
    assert_eq!(s.transitions("u1").await.expect("u1"), u1, "every state, cause, reason and time kept");
    assert_eq!(s.transitions("u2").await.expect("u2"), u2);
    let mut next = u2[1].clone();
    next.edge = Edge::Node { from: NodeState::Running, to: NodeState::Success, cause: Cause::Succeeded };
    next.at += 1;
    s.commit(&Batch { transitions: vec![next.clone()], ..Batch::default() }).await.expect("commit");
    let after = s.transitions("u2").await.expect("u2 after");
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(after[2], next, "written after the old rows, read after them");
}

#[tokio::test]
async fn sqlite_keeps_every_run_history_through_the_packing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("old.db");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let pool = sqlx::SqlitePool::connect(&url).await.expect("connect");
    old_migrator("sqlite", dir.path()).await.run(&pool).await.expect("old schema");
    sqlx::raw_sql(&old_rows(&old_log(), true).join(";\n")).execute(&pool).await.expect("old rows");
    pool.close().await;
    check(&SqliteStore::open_path(&file).await.expect("migrated")).await;
}

#[tokio::test]
async fn postgres_keeps_every_run_history_through_the_packing() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
    old_migrator("postgres", dir.path()).await.run(&pool).await.expect("old schema");
    sqlx::raw_sql(&old_rows(&old_log(), false).join(";\n")).execute(&pool).await.expect("old rows");
    pool.close().await;
    check(&PostgresStore::open(&db.url).await.expect("migrated")).await;
}

/// The run archive's migration.
const ARCHIVE: &str = "20261211000100_run_archive.sql";

/// A finished run `f1` (two nodes, two attempts, an output, a packed log) as the
/// schema before the archive has it.
pub(super) fn finished_run_rows() -> Vec<String> {
    let node = |idx: u32, name: &str, state: &str, reason: &str| {
        format!(
            "INSERT INTO nodes (run_id, idx, node, state, reason, attempt, series_start, data_version, outputs, \
             \"reads\", stale, fallback, next_attempt_at, started_at, finished_at) VALUES ('f1', {idx}, '{name}', \
             '{state}', {reason}, 1, 1, 1, '{{\"rows\":3}}', '[[0,1]]', FALSE, FALSE, NULL, 110, 120)"
        )
    };
    vec![
        "INSERT INTO runs (id, flow, version, state, params, \"trigger\", created_at, admitted_at, started_at, \
         finished_at, owner, lease_until, actor) VALUES ('f1', 'f', 1, 'FAILED', '{\"p\":1}', 'api', 100, 100, 101, \
         130, 'old-replica', 131, 'bob')"
            .into(),
        node(0, "pull_x", "SUCCESS", "NULL"),
        node(1, "verify", "FAILED", "'exit 1'"),
        "INSERT INTO attempts (run_id, node, attempt, started_at, finished_at, outcome, error, host) VALUES \
         ('f1', 'pull_x', 1, 110, 120, 'SUCCESS', NULL, 'r1'), ('f1', 'verify', 1, 121, 129, 'FAILED', 'exit 1', 'r1')"
            .into(),
        "INSERT INTO node_outputs (run_id, node, data_version, \"key\", value) VALUES ('f1', 'pull_x', 1, 'rows', '3')"
            .into(),
        "INSERT INTO transitions (id, run_id, at, entries) VALUES (1, 'f1', 100, \
         '[[null,0,2,1,0,0,\"api\"],[null,2,3,2,0,1,\"engine\"],[\"pull_x\",0,1,0,1,9],[\"pull_x\",1,2,1,1,10],\
         [\"verify\",0,1,0,1,1],[\"verify\",1,3,2,1,8,null,\"exit 1\"],[null,3,5,4,0,1]]')"
            .into(),
    ]
}

/// Read the same after the upgrade, folded, and unfolded by a claim.
async fn check_archive(s: &dyn Store) {
    let read = || async {
        let run = s.load_run("f1").await.expect("load").expect("f1");
        let log = s.transitions("f1").await.expect("log");
        let logs = s.logs("f1", "verify").await.expect("logs");
        (run.run, run.nodes, run.attempts, log, logs)
    };
    let before = read().await;
    assert_eq!(before.1.len(), 2);
    assert_eq!(before.2.len(), 2);
    assert_eq!(before.3.len(), 7);
    assert_eq!(before.4.len(), 1, "verify's attempt, which printed nothing");
    assert_eq!(s.fold_finished(1_000, 100).await.expect("fold"), 1, "the archiver catches up");
    assert_eq!(s.folded().await.expect("counts"), (1, 2));
    assert_eq!(read().await, before);
    let lease = Lease { owner: "ops".into(), now_ms: 0, until_ms: 60_000 };
    assert_eq!(s.claim_run("f1", &lease, true).await.expect("claim"), Claim::Held);
    assert_eq!(s.folded().await.expect("counts"), (0, 0));
    assert_eq!(read().await, before);
}

#[tokio::test]
async fn sqlite_folds_runs_finished_before_the_archive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("old.db");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let pool = sqlx::SqlitePool::connect(&url).await.expect("connect");
    migrator_before("sqlite", dir.path(), ARCHIVE).await.run(&pool).await.expect("old schema");
    let mut rows = finished_run_rows();
    rows.push("UPDATE transition_seq SET seq = 1".into());
    sqlx::raw_sql(&rows.join(";\n")).execute(&pool).await.expect("old rows");
    pool.close().await;
    check_archive(&SqliteStore::open_path(&file).await.expect("migrated")).await;
}

#[tokio::test]
async fn postgres_folds_runs_finished_before_the_archive() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
    migrator_before("postgres", dir.path(), ARCHIVE).await.run(&pool).await.expect("old schema");
    sqlx::raw_sql(&finished_run_rows().join(";\n")).execute(&pool).await.expect("old rows");
    pool.close().await;
    check_archive(&PostgresStore::open(&db.url).await.expect("migrated")).await;
}

#[tokio::test]
async fn mysql_folds_runs_finished_before_the_archive() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = ansi_pool(&db.url).await;
    migrator_before("mysql", dir.path(), ARCHIVE).await.run(&pool).await.expect("old schema");
    for row in finished_run_rows() {
        sqlx::raw_sql(&row).execute(&pool).await.expect("old row");
    }
    pool.close().await;
    let options = MySqlOptions { lock_wait_timeout: std::time::Duration::from_secs(2), ..Default::default() };
    check_archive(&MySqlStore::open_with(&db.url, &options).await.expect("migrated")).await;
}

/// One connection with the store's own session settings (ANSI quotes), as its
/// migrations run with.
async fn ansi_pool(url: &str) -> sqlx::MySqlPool {
    sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::Executor::execute(
                    &mut *conn,
                    "SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES,STRICT_TRANS_TABLES')",
                )
                .await?;
                Ok(())
            })
        })
        .connect(url)
        .await
        .expect("connect")
}

#[tokio::test]
async fn mysql_keeps_every_run_history_through_the_packing() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = ansi_pool(&db.url).await;
    old_migrator("mysql", dir.path()).await.run(&pool).await.expect("old schema");
    for row in old_rows(&old_log(), false) {
        sqlx::raw_sql(&row).execute(&pool).await.expect("old row");
    }
    pool.close().await;
    let options = MySqlOptions { lock_wait_timeout: std::time::Duration::from_secs(2), ..Default::default() };
    check(&MySqlStore::open_with(&db.url, &options).await.expect("migrated")).await;
}
