//! Large group commits, which SQLite runs row by row (`Dialect::ROWS`, on its
//! group commits' own connection): every kind of row a batch carries is written
//! and read back as a small commit writes it, a fenced one writes nothing, and
//! (SQLite) one on a full database rolls back whole, and commits and other
//! writes at once never collide; and a large batch of new runs (also row by row)
//! is decided and written whole.

use madeira_core::{NodeState, RunState};
use serde_json::json;

use super::storage::transition;
use super::suite::new_run;
use crate::mysql::MySqlStore;
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::testing::{MySqlTestDb, PgTestDb};
use crate::*;

/// `n` transitions of `run_id`'s node `a`, numbered by `attempt`.
fn transitions(run_id: &str, n: u32) -> Vec<TransitionRecord> {
    (1..=n).map(|i| transition(run_id, i)).collect()
}

fn lease(owner: &str) -> Lease {
    Lease { owner: owner.into(), until_ms: i64::MAX / 2, now_ms: 1 }
}

/// Two runs held by `a`, r1's nodes with their stored rows.
async fn two_held_runs(s: &dyn Store) -> StoredRun {
    s.create_runs(&[new_run("r1", None, 0, Overlap::Queue), new_run("r2", None, 0, Overlap::Queue)])
        .await
        .expect("create");
    for run in ["r1", "r2"] {
        assert_eq!(s.claim_run(run, &lease("a"), false).await.expect("claim"), Claim::Held);
    }
    s.load_run("r1").await.expect("load").expect("r1")
}

async fn a_large_batch_writes_every_kind_of_row<S: Store + AlertStore>(s: &S) {
    let r1 = two_held_runs(s).await;
    let permit = PermitKey { flow: "f".into(), node: "a".into(), run_id: "r1".into() };
    assert!(s.try_permit(&permit, "a", 1, 1).await.expect("permit"));
    let command = RunCommand {
        id: 0,
        run_id: "r1".into(),
        target: "a".into(),
        action: "cancel".into(),
        node: None,
        actor: "sre".into(),
        reason: None,
        created_at: 1,
    };
    let command_id = s.send_command(&command).await.expect("command");
    let mut a = r1.nodes[0].clone();
    a.state = NodeState::Success;
    a.attempt = 1;
    a.data_version = 1;
    a.outputs = json!({"total": 12.5, "note": "naïve \"q\""}).as_object().cloned().expect("object");
    a.reads = vec![(1, 2)];
    a.started_at = Some(1_001);
    a.finished_at = Some(1_002);
    let mut b = r1.nodes[1].clone();
    b.state = NodeState::Retrying;
    b.reason = Some("exit 3".into());
    b.next_attempt_at = Some(9_000);
    b.stale = true;
    let attempt = |node: &str, finished: Option<i64>| AttemptRecord {
        run_id: "r1".into(),
        node: node.into(),
        attempt: 1,
        started_at: 1_001,
        finished_at: finished,
        outcome: finished.map(|_| "SUCCESS".into()),
        error: None,
        host: None,
    };
    let mut all = transitions("r1", 20);
    all.extend(transitions("r2", 3));
    let batch = Batch {
        owner: Some("a".into()),
        runs: vec![
            RunWrite {
                run_id: "r1".into(),
                state: RunState::Running,
                started_at: Some(1_000),
                finished_at: None,
            },
            RunWrite {
                run_id: "r2".into(),
                state: RunState::Running,
                started_at: Some(1_000),
                finished_at: None,
            },
            RunWrite {
                run_id: "r1".into(),
                state: RunState::Success,
                started_at: None,
                finished_at: Some(1_003),
            },
        ],
        nodes: vec![a.clone(), b.clone()],
        transitions: all,
        outputs: vec![OutputWrite {
            run_id: "r1".into(),
            node: "a".into(),
            data_version: 1,
            key: "total".into(),
            value: json!(12.5),
        }],
        // A start and its end in one batch: the end is kept.
        attempts: vec![attempt("a", None), attempt("a", Some(1_002)), attempt("b", None)],
        attempt_hosts: vec![AttemptHost {
            run_id: "r1".into(),
            node: "b".into(),
            attempt: 1,
            host: "h1".into(),
        }],
        audit: vec![AuditRecord {
            at: 1_003,
            actor: "sre".into(),
            action: "confirm".into(),
            run_id: Some("r1".into()),
            node: None,
            reason: None,
            details: Some(json!({"k": [1]})),
        }],
        logs: vec![LogRecord { run_id: "r1".into(), node: "a".into(), attempt: 1, content: "ok\n".into() }],
        permit_releases: vec![permit.clone()],
        answers: vec![CommandAnswer { id: command_id, answer: r#"{"ok":true}"#.into(), at: 1_004 }],
        alert_events: vec![r#"{"event":"run_succeeded"}"#.into()],
    };
    s.commit(&batch).await.expect("the large commit");

    let stored = s.load_run("r1").await.expect("load").expect("r1");
    assert_eq!(stored.run.state, RunState::Success);
    assert_eq!((stored.run.started_at, stored.run.finished_at), (Some(1_000), Some(1_003)));
    assert_eq!(stored.nodes, vec![a, b]);
    assert_eq!(
        stored.attempts,
        vec![attempt("a", Some(1_002)), AttemptRecord { host: Some("h1".into()), ..attempt("b", None) }]
    );
    let r2 = s.load_run("r2").await.expect("load").expect("r2");
    assert_eq!((r2.run.state, r2.run.started_at), (RunState::Running, Some(1_000)));
    let log = s.transitions("r1").await.expect("transitions");
    let node_log: Vec<&TransitionRecord> = log.iter().filter(|t| t.node.is_some()).collect();
    assert_eq!(node_log.len(), 20);
    assert!(node_log.iter().zip(transitions("r1", 20).iter()).all(|(got, want)| *got == want));
    assert_eq!(s.transitions("r2").await.expect("r2").iter().filter(|t| t.node.is_some()).count(), 3);
    assert_eq!(s.logs("r1", "a").await.expect("logs"), batch.logs);
    let query = AuditQuery { run_id: Some("r1".into()), limit: 5, ..AuditQuery::default() };
    assert_eq!(s.audit(&query).await.expect("audit"), batch.audit);
    assert_eq!(s.command_answer(command_id).await.expect("answer").as_deref(), Some(r#"{"ok":true}"#));
    let events = s.alert_events(10).await.expect("inbox");
    assert_eq!(
        events.iter().map(|e| e.body.to_string()).collect::<Vec<_>>(),
        [r#"{"event":"run_succeeded"}"#]
    );
    let other = PermitKey { run_id: "r2".into(), ..permit };
    assert!(s.try_permit(&other, "a", 1, 2).await.expect("freed"), "the release freed the one permit");
}

pub(crate) async fn a_large_fenced_batch_writes_nothing(s: &dyn Store) {
    let r1 = two_held_runs(s).await;
    assert_eq!(s.claim_run("r2", &lease("b"), true).await.expect("b takes r2"), Claim::Held);
    let mut a = r1.nodes[0].clone();
    a.state = NodeState::Running;
    let mut all = transitions("r1", 20);
    all.extend(transitions("r2", 1));
    let batch =
        Batch { owner: Some("a".into()), nodes: vec![a.clone()], transitions: all, ..Batch::default() };
    match s.commit(&batch).await {
        Err(StoreError::LeaseLost { owner, runs }) => {
            assert_eq!((owner.as_str(), runs), ("a", vec!["r2".into()]))
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert_eq!(s.load_run("r1").await.expect("load").expect("r1").nodes[0].state, NodeState::Init);
    assert!(s.transitions("r1").await.expect("log").iter().all(|t| t.node.is_none()), "nothing written");
    let own = Batch {
        owner: Some("a".into()),
        nodes: vec![a],
        transitions: transitions("r1", 20),
        ..Batch::default()
    };
    s.commit(&own).await.expect("a commits its own run");
    assert_eq!(s.transitions("r1").await.expect("log").iter().filter(|t| t.node.is_some()).count(), 20);
}

pub(crate) async fn a_large_batch_of_new_runs_is_decided_and_written_whole(s: &dyn Store) {
    // 20 runs (40 node rows) decided in one transaction; r7 repeats r3's key.
    let runs: Vec<NewRun> = (0..20)
        .map(|i| {
            let key = if i == 7 { "k3".to_string() } else { format!("k{i}") };
            let mut run = new_run(&format!("r{i}"), Some(&key), 0, Overlap::Queue);
            run.params = json!({"i": i, "note": "naïve 'quoted'"});
            run.lease = Some(lease("a"));
            run
        })
        .collect();
    let out = s.create_runs(&runs).await.expect("create batch");
    assert_eq!(out[7], CreateOutcome::Existing { run_id: "r3".into(), version: 1 });
    assert!(
        out.iter()
            .enumerate()
            .filter(|(i, _)| *i != 7)
            .all(|(_, o)| matches!(o, CreateOutcome::Created { start: true, .. }))
    );
    assert!(s.load_run("r7").await.expect("load").is_none(), "a repeated key makes no run");
    for i in [0, 3, 19] {
        let stored = s.load_run(&format!("r{i}")).await.expect("load").expect("created");
        assert_eq!(stored.run.state, RunState::Admitted);
        assert_eq!(stored.run.params, runs[i].params);
        assert_eq!(stored.run.idempotency_key.as_deref(), Some(format!("k{i}").as_str()));
        assert_eq!(
            (stored.run.admitted_at, stored.run.trace_context.as_ref()),
            (Some(10), runs[i].trace_context.as_ref())
        );
        assert_eq!(
            stored.nodes.iter().map(|n| (n.node.as_str(), n.state)).collect::<Vec<_>>(),
            [("a", NodeState::Init), ("b", NodeState::Init)]
        );
        let log = s.transitions(&format!("r{i}")).await.expect("log");
        assert_eq!(log.len(), 1, "the creation edge");
        assert_eq!(
            (log[0].edge.from_name(), log[0].edge.to_name(), log[0].edge.cause_name()),
            ("NONE", "ADMITTED", "admitted")
        );
    }
    // Held by the creating replica from birth: another cannot claim them.
    assert!(matches!(s.claim_run("r19", &lease("b"), false).await.expect("claim"), Claim::Other { .. }));
}

#[tokio::test]
async fn sqlite_a_large_commit_on_a_full_database_rolls_back_and_the_next_one_is_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.db");
    let store = SqliteStore::open_path(&path).await.expect("open");
    store.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    store.fill_writer_for_tests().await;
    let full = Batch {
        transitions: transitions("r1", 20),
        logs: vec![LogRecord {
            run_id: "r1".into(),
            node: "a".into(),
            attempt: 1,
            content: "x".repeat(4 << 20),
        }],
        ..Batch::default()
    };
    let e = store.commit(&full).await.expect_err("a 4 MiB log on a full database");
    assert!(e.is_unavailable(), "{e}");
    assert!(store.transitions("r1").await.expect("log").iter().all(|t| t.node.is_none()), "rolled back");
    store
        .commit(&Batch { transitions: transitions("r1", 20), ..Batch::default() })
        .await
        .expect("the next commit");
    drop(store);
    let reopened = SqliteStore::open_path(&path).await.expect("reopen");
    let log = reopened.transitions("r1").await.expect("log");
    assert_eq!(log.iter().filter(|t| t.node.is_some()).count(), 20, "acknowledged but not durable");
}

#[tokio::test]
async fn sqlite_a_large_batch_writes_every_kind_of_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = SqliteStore::open_path(&dir.path().join("m.db")).await.expect("open");
    a_large_batch_writes_every_kind_of_row(&s).await;
}

#[tokio::test]
async fn postgres_a_large_batch_writes_every_kind_of_row() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let s = PostgresStore::open(&db.url).await.expect("open postgres");
    a_large_batch_writes_every_kind_of_row(&s).await;
}

#[tokio::test]
async fn mysql_a_large_batch_writes_every_kind_of_row() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    let s = MySqlStore::open(&db.url).await.expect("open mysql");
    a_large_batch_writes_every_kind_of_row(&s).await;
}

/// SQLite's group commits run on a connection of their own while other writes
/// run on sqlx's writer: with both at once from several threads, each
/// admission's read-then-write transaction would fail (`database is locked`,
/// a stale snapshot) if a commit could write between its read and its write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_group_commits_and_other_writes_at_once_never_collide() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = std::sync::Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("open"));
    s.create_run(&new_run("r0", None, 0, Overlap::Queue)).await.expect("create r0");
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..4u32 {
        let creator = s.clone();
        tasks.spawn(async move {
            for i in 0..25u32 {
                let mut run = new_run(&format!("t{t}-{i}"), None, 1, Overlap::Queue);
                run.flow = format!("f{t}");
                creator.create_run(&run).await.map(drop).map_err(|e| format!("create: {e}"))?;
            }
            Ok::<_, String>(())
        });
        let committer = s.clone();
        tasks.spawn(async move {
            for i in 0..25u32 {
                let batch = Batch { transitions: vec![transition("r0", t * 100 + i)], ..Batch::default() };
                committer.commit(&batch).await.map_err(|e| format!("commit: {e}"))?;
            }
            Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("task").expect("every write");
    }
    let query = RunQuery { limit: 500, ..RunQuery::default() };
    assert_eq!(s.list_runs(&query).await.expect("runs").len(), 101);
    let log = s.transitions("r0").await.expect("log");
    assert_eq!(log.iter().filter(|t| t.node.is_some()).count(), 100, "every committed transition");
}
