//! What the smaller store layout must keep: the transition log in the order it
//! was written, across statements, commits and runs (on SQLite the store numbers
//! it, from `transition_seq`), and the log of an attempt that printed nothing
//! (written without a row) answered as empty. SQLite only: a store made before
//! the WITHOUT ROWID migration keeps its rows through it and numbers on after
//! them, ids given by another writer are never given again, and the compacted
//! layout has no second copy of the per-run keys.

use madeira_core::{Cause, NodeState};

use crate::tests::suite::new_run;
use crate::*;

pub(crate) fn transition(run_id: &str, seq: u32) -> TransitionRecord {
    TransitionRecord {
        run_id: run_id.into(),
        node: Some("a".into()),
        edge: Edge::Node { from: NodeState::Running, to: NodeState::Success, cause: Cause::Succeeded },
        actor: "engine".into(),
        // The order written, read back from the log.
        attempt: seq,
        reason: seq.is_multiple_of(2).then(|| format!("r{seq}")),
        at: 100 + i64::from(seq),
    }
}

/// The node transitions of `run_id`'s log, by the sequence number they carry.
async fn order(s: &dyn Store, run_id: &str) -> Vec<u32> {
    let log = s.transitions(run_id).await.expect("transitions");
    assert_eq!(log[0].edge.from_name(), "NONE", "the creation edge comes first");
    log.iter().skip(1).map(|t| t.attempt).collect()
}

pub(crate) async fn transitions_keep_their_order_across_statements_commits_and_runs(s: &dyn Store) {
    let runs: Vec<NewRun> =
        ["r1", "r2", "r3"].iter().map(|id| new_run(id, None, 0, Overlap::Queue)).collect();
    s.create_runs(&runs).await.expect("create");
    // More rows than one statement takes (SQLite: 500), the runs interleaved.
    let first: Vec<TransitionRecord> =
        (1..=1200u32).map(|i| transition(if i.is_multiple_of(3) { "r2" } else { "r1" }, i)).collect();
    s.commit(&Batch { transitions: first, ..Batch::default() }).await.expect("first commit");
    s.commit(&Batch { transitions: vec![transition("r1", 1201), transition("r3", 1)], ..Batch::default() })
        .await
        .expect("second commit");
    let r1 = order(s, "r1").await;
    let expected: Vec<u32> = (1..=1201u32).filter(|i| !i.is_multiple_of(3)).collect();
    assert_eq!(r1, expected);
    assert_eq!(order(s, "r2").await, (1..=1200u32).filter(|i| i.is_multiple_of(3)).collect::<Vec<u32>>());
    assert_eq!(order(s, "r3").await, [1]);
    let log = s.transitions("r2").await.expect("r2");
    assert_eq!((log[2].reason.as_deref(), log[2].at), (Some("r6"), 106), "the row's fields are its own");
}

pub(crate) async fn an_attempt_that_printed_nothing_answers_an_empty_log(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let attempt = |n: u32, finished: bool| AttemptRecord {
        run_id: "r1".into(),
        node: "a".into(),
        attempt: n,
        started_at: 100,
        finished_at: finished.then_some(150),
        outcome: finished.then(|| "RETRYABLE".into()),
        error: None,
        host: None,
    };
    let log = |n: u32, content: &str| LogRecord {
        run_id: "r1".into(),
        node: "a".into(),
        attempt: n,
        content: content.into(),
    };
    let batch = Batch {
        // 1 printed a line, 2 printed nothing (no row), 3 is still running.
        attempts: vec![attempt(1, true), attempt(2, true), attempt(3, false)],
        logs: vec![log(1, "boom\n")],
        ..Batch::default()
    };
    s.commit(&batch).await.expect("commit");
    let logs = s.logs("r1", "a").await.expect("logs");
    assert_eq!(logs, [log(1, "boom\n"), log(2, "")]);
    assert!(s.logs("r1", "b").await.expect("b").is_empty(), "a node that never ran has no log");
    s.commit(&Batch { attempts: vec![attempt(3, true)], ..Batch::default() }).await.expect("ended");
    assert_eq!(s.logs("r1", "a").await.expect("logs").len(), 3, "an attempt that ends silently gets one");
}

mod sqlite_only {
    use std::path::Path;

    use sqlx::migrate::Migrator;

    use crate::sqlite::SqliteStore;
    use crate::*;

    const MIGRATION: &str = "20261206000350_without_rowid.sql";

    /// A store file at the schema just before `MIGRATION`, with a run whose
    /// transitions, nodes, attempt and log the old tables numbered and keyed.
    async fn old_store(dir: &Path) -> std::path::PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/sqlite");
        let old = dir.join("migrations");
        std::fs::create_dir(&old).expect("dir");
        for entry in std::fs::read_dir(&src).expect("migrations") {
            let path = entry.expect("entry").path();
            let name = path.file_name().expect("name").to_string_lossy().into_owned();
            if name.as_str() < MIGRATION {
                std::fs::copy(&path, old.join(&name)).expect("copy");
            }
        }
        let file = dir.join("old.db");
        let url = format!("sqlite://{}?mode=rwc", file.display());
        let pool = sqlx::SqlitePool::connect(&url).await.expect("connect");
        Migrator::new(old.as_path()).await.expect("migrator").run(&pool).await.expect("old schema");
        let script = "
            INSERT INTO runs (id, flow, version, state, params, \"trigger\", created_at, actor)
                VALUES ('r1', 'f', 1, 'RUNNING', '{}', 'manual', 1, 'test');
            INSERT INTO nodes VALUES ('r1', 0, 'a', 'SUCCESS', NULL, 1, 1, 1, '{}', '[]', 0, 0, NULL, 2, 3);
            INSERT INTO transitions (run_id, node, from_state, to_state, cause, actor, attempt, at)
                VALUES ('r1', NULL, 'NONE', 'QUEUED', 'created', 'test', 0, 1),
                       ('r1', 'a', 'INIT', 'RUNNING', 'dispatch', 'engine', 1, 2),
                       ('r1', 'a', 'RUNNING', 'SUCCESS', 'succeeded', 'engine', 1, 3),
                       ('gone', 'a', 'INIT', 'RUNNING', 'dispatch', 'engine', 1, 2);
            DELETE FROM transitions WHERE run_id = 'gone';
            INSERT INTO attempts (run_id, node, attempt, started_at, finished_at, outcome, host)
                VALUES ('r1', 'a', 1, 2, 3, 'SUCCESS', 'cp');
            INSERT INTO logs VALUES ('r1', 'a', 1, 'old line\n');
            INSERT INTO node_outputs VALUES ('r1', 'a', 1, 'k', '5');";
        sqlx::raw_sql(script).execute(&pool).await.expect("old rows");
        pool.close().await;
        file
    }

    #[tokio::test]
    async fn a_store_made_before_the_rebuild_keeps_its_rows_and_numbers_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = old_store(dir.path()).await;
        let s = SqliteStore::open_path(&file).await.expect("migrated");
        let stored = s.load_run("r1").await.expect("load").expect("kept");
        assert_eq!((stored.nodes.len(), stored.nodes[0].node.as_str()), (1, "a"));
        assert_eq!(stored.attempts[0].host.as_deref(), Some("cp"));
        assert_eq!(s.logs("r1", "a").await.expect("logs")[0].content, "old line\n");
        s.commit(&Batch {
            transitions: vec![super::transition("r1", 7)],
            logs: vec![LogRecord {
                run_id: "r1".into(),
                node: "a".into(),
                attempt: 2,
                content: "new\n".into(),
            }],
            ..Batch::default()
        })
        .await
        .expect("commit after the migration");
        let log = s.transitions("r1").await.expect("log");
        let causes: Vec<&str> = log.iter().map(|t| t.edge.cause_name()).collect();
        assert_eq!(
            causes,
            ["created", "dispatch", "succeeded", "succeeded"],
            "old rows first, in their order"
        );
        let (seq,): (i64,) =
            sqlx::query_as("SELECT seq FROM transition_seq").fetch_one(&s.writer).await.expect("seq");
        assert_eq!(seq, 5, "numbered after the old largest id ever given (4, of a deleted row)");
        let (max,): (i64,) =
            sqlx::query_as("SELECT MAX(id) FROM transitions").fetch_one(&s.writer).await.expect("max");
        assert_eq!(max, 5);
        assert_eq!(s.logs("r1", "a").await.expect("logs").len(), 2);
    }

    #[tokio::test]
    async fn ids_given_elsewhere_fail_one_commit_and_the_next_numbers_after_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = SqliteStore::open_path(&dir.path().join("m.db")).await.expect("open");
        s.create_run(&super::new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
        let one = |seq| Batch { transitions: vec![super::transition("r1", seq)], ..Batch::default() };
        s.commit(&one(1)).await.expect("first");
        // Another process numbering transitions in this file (not a supported set-up).
        sqlx::query("UPDATE transition_seq SET seq = seq + 10").execute(&s.writer).await.expect("elsewhere");
        assert!(s.commit(&one(2)).await.is_err(), "the ids it would give may be taken");
        s.commit(&one(3)).await.expect("read again after the failure");
        let log = s.transitions("r1").await.expect("log");
        assert_eq!(log.iter().skip(1).map(|t| t.attempt).collect::<Vec<_>>(), [1, 3]);
        let ids: Vec<(i64,)> =
            sqlx::query_as("SELECT id FROM transitions ORDER BY id").fetch_all(&s.writer).await.expect("ids");
        assert_eq!(ids, [(1,), (2,), (13,)], "creation, first, then after the ten given elsewhere");
    }

    /// Group commits do not hold sqlx's writer connection: the store's write lock
    /// keeps every other write out while one runs. Commits and run creations side
    /// by side (both number transitions from the same counter) all land, numbered
    /// without a gap or a repeat; without the lock two of them would take the
    /// same ids and one would fail.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn commits_and_other_writes_side_by_side_all_land_numbered_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = std::sync::Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("open"));
        s.create_run(&super::new_run("r0", None, 0, Overlap::Queue)).await.expect("create");
        let mut tasks = tokio::task::JoinSet::new();
        for i in 1..=200u32 {
            let s = s.clone();
            tasks.spawn(async move {
                let batch = Batch { transitions: vec![super::transition("r0", i)], ..Batch::default() };
                s.commit(&batch).await.expect("commit");
                s.create_run(&super::new_run(&format!("r{i}"), None, 0, Overlap::Queue))
                    .await
                    .expect("create");
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.expect("task");
        }
        let ids: Vec<(i64,)> =
            sqlx::query_as("SELECT id FROM transitions ORDER BY id").fetch_all(&s.writer).await.expect("ids");
        let ids: Vec<i64> = ids.into_iter().map(|(id,)| id).collect();
        assert_eq!(ids, (1..=ids.len() as i64).collect::<Vec<_>>(), "numbered once each, no gap");
        assert_eq!(s.transitions("r0").await.expect("log").len(), 201, "creation and 200 commits");
    }

    #[tokio::test]
    async fn the_per_run_tables_keep_no_second_copy_of_their_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("m.db");
        let s = SqliteStore::open_path(&file).await.expect("open");
        s.create_run(&super::new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
        let space = crate::sqlite::space::measure(&file).await.expect("space");
        assert_eq!(space.nodes, 2);
        assert!(space.file_bytes > 0 && space.file_bytes.is_multiple_of(4096), "{space:?}");
        for table in ["transitions", "nodes", "attempts", "logs", "node_outputs"] {
            let (rows, indexes) = space.table_bytes(table);
            assert!(rows > 0, "{table} is measured: {space:?}");
            assert_eq!(indexes, 0, "{table} has no index of its own: {space:?}");
        }
        assert!(space.table_bytes("runs").1 > 0, "runs keeps its indexes");
        assert!(!file.with_file_name(format!("m.db.space-{}", std::process::id())).exists(), "copy removed");
    }
}
