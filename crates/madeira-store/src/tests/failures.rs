//! Commit failure and rollback, injected: SQLite's database filled up (its
//! `max_page_count` lowered to the current size on the writer connection and the
//! group commits' one) and a
//! row PostgreSQL refuses (NUL in text). Each time the failed batch leaves nothing
//! behind, and the next commit is durable and visible to readers (the writer
//! connection is not left inside a dead transaction). And on every backend: a
//! commit abandoned midway (its caller gone, as a request whose client hung up)
//! writes all or nothing, and the next commit succeeds.

use madeira_core::{NodeState, RunState};

use super::suite::new_run;
use crate::sqlite::SqliteStore;
use crate::*;

fn node_success(stored: &StoredRun, idx: usize) -> NodeRow {
    let mut node = stored.nodes[idx].clone();
    node.state = NodeState::Success;
    node.data_version = 1;
    node
}

fn log(content: String) -> LogRecord {
    LogRecord { run_id: "r1".into(), node: "a".into(), attempt: 1, content }
}

#[tokio::test]
async fn sqlite_a_commit_on_a_full_database_rolls_back_and_the_next_one_is_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.db");
    let store = SqliteStore::open_path(&path).await.expect("open");
    store.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let stored = store.load_run("r1").await.expect("load").expect("r1");
    store.fill_writer_for_tests().await;

    let full = Batch {
        nodes: vec![node_success(&stored, 0)],
        logs: vec![log("x".repeat(4 << 20))],
        ..Batch::default()
    };
    let e = store.commit(&full).await.expect_err("a 4 MiB log on a full database");
    assert!(e.is_unavailable(), "{e}");
    let after = store.load_run("r1").await.expect("load").expect("r1");
    assert_eq!(after.nodes[0].state, NodeState::Init, "the failed batch left its node row");

    let small = Batch { nodes: vec![node_success(&stored, 1)], ..Batch::default() };
    store.commit(&small).await.expect("the next commit");
    let seen = store.load_run("r1").await.expect("load").expect("r1");
    assert_eq!((seen.nodes[0].state, seen.nodes[1].state), (NodeState::Init, NodeState::Success));
    drop(store);
    let reopened = SqliteStore::open_path(&path).await.expect("reopen");
    let durable = reopened.load_run("r1").await.expect("load").expect("r1");
    assert_eq!(durable.nodes[1].state, NodeState::Success, "acknowledged but not durable");
    assert_eq!(durable.run.state, RunState::Admitted);
}

#[tokio::test]
async fn sqlite_a_store_in_memory_is_refused_with_the_fix() {
    for url in ["sqlite::memory:", "sqlite://:memory:", "sqlite://file:m?mode=memory&cache=shared"] {
        let Err(e) = SqliteStore::open(url).await else { panic!("{url} opened") };
        let message = e.to_string();
        assert!(matches!(e, StoreError::BadUrl { .. }), "{url}: {message}");
        assert!(message.contains("sqlite:///"), "{url}: the error names no file URL: {message}");
    }
}

#[tokio::test]
async fn postgres_a_refused_row_rolls_back_its_batch_and_the_next_commit_is_durable() {
    let Some(f) = super::postgres().await else { return };
    let s = f.store.as_ref();
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let stored = s.load_run("r1").await.expect("load").expect("r1");
    let poison =
        Batch { nodes: vec![node_success(&stored, 0)], logs: vec![log("a\0b".into())], ..Batch::default() };
    let e = s.commit(&poison).await.expect_err("PostgreSQL refuses NUL in text");
    assert!(!e.is_unavailable() && !e.is_transient(), "{e}");
    assert_eq!(s.load_run("r1").await.expect("load").expect("r1").nodes[0].state, NodeState::Init);
    s.commit(&Batch { nodes: vec![node_success(&stored, 1)], ..Batch::default() })
        .await
        .expect("next commit");
    let seen = s.load_run("r1").await.expect("load").expect("r1");
    assert_eq!((seen.nodes[0].state, seen.nodes[1].state), (NodeState::Init, NodeState::Success));
}

#[tokio::test]
async fn mysql_a_refused_row_rolls_back_its_batch_and_the_next_commit_is_durable() {
    let Some(f) = super::mysql().await else { return };
    let s = f.store.as_ref();
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let stored = s.load_run("r1").await.expect("load").expect("r1");
    // Strict mode: a key longer than its column is refused, never truncated.
    let long = LogRecord { node: "n".repeat(300), ..log("x".into()) };
    let poison = Batch { nodes: vec![node_success(&stored, 0)], logs: vec![long], ..Batch::default() };
    let e = s.commit(&poison).await.expect_err("MySQL refuses a node name over 255 characters");
    assert!(!e.is_unavailable() && !e.is_transient(), "{e}");
    assert_eq!(s.load_run("r1").await.expect("load").expect("r1").nodes[0].state, NodeState::Init);
    s.commit(&Batch { nodes: vec![node_success(&stored, 1)], ..Batch::default() })
        .await
        .expect("next commit");
    let seen = s.load_run("r1").await.expect("load").expect("r1");
    assert_eq!((seen.nodes[0].state, seen.nodes[1].state), (NodeState::Init, NodeState::Success));
}

/// A commit whose future is dropped while its statements run (`timeout` of a
/// few microseconds to milliseconds) writes all of its batch or none of it, and
/// leaves the writer able to commit the next batch.
pub(crate) async fn a_commit_abandoned_midway_is_all_or_nothing_and_the_next_one_commits(s: &dyn Store) {
    const ROWS: usize = 5_000;
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let stored = s.load_run("r1").await.expect("load").expect("r1");
    let audit = |i: usize| AuditRecord {
        at: i as i64,
        actor: "abandoned".into(),
        action: "test".into(),
        run_id: None,
        node: None,
        reason: None,
        details: None,
    };
    let big = Batch {
        nodes: vec![node_success(&stored, 0)],
        audit: (0..ROWS).map(audit).collect(),
        ..Batch::default()
    };
    for micros in [0, 50, 200, 1_000, 5_000, 20_000] {
        let _ = tokio::time::timeout(std::time::Duration::from_micros(micros), s.commit(&big)).await;
        let small = Batch { nodes: vec![node_success(&stored, 1)], ..Batch::default() };
        s.commit(&small)
            .await
            .unwrap_or_else(|e| panic!("the commit after one abandoned at {micros} µs: {e}"));
    }
    let kept = s
        .audit(&AuditQuery {
            run_id: None,
            actor: Some("abandoned".into()),
            since_ms: None,
            limit: 1_000_000,
        })
        .await
        .expect("audit");
    let node0 = s.load_run("r1").await.expect("load").expect("r1").nodes[0].state;
    assert_eq!(
        kept.len() % ROWS,
        0,
        "an abandoned commit wrote part of its batch ({} audit rows)",
        kept.len()
    );
    assert_eq!(node0 == NodeState::Success, !kept.is_empty(), "the node row and the audit rows of one batch");
}
