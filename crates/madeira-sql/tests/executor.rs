//! The SQL executor against the real PostgreSQL and MariaDB of this machine (and
//! CI's): outputs, binds, server-side timeouts with the activity-view check,
//! retry classification and the pool limit. Each test runs on a fresh database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use madeira_core::ExecutorDef;
use madeira_engine::{AttemptResult, Executor, Job};
use madeira_sql::testing::TestDb;
use madeira_sql::{DatasourceConfig, Kind, SqlExecutor};
use serde_json::{Value as Json, json};
use tokio_util::sync::CancellationToken;

/// The fresh database and an executor with datasource `db` on it (`None`: skip).
async fn setup(kind: Kind, max_connections: u32) -> Option<(TestDb, Arc<SqlExecutor>)> {
    let db = TestDb::create(kind).await.expect("test database")?;
    let config =
        DatasourceConfig { name: "db".into(), url: db.url.clone(), max_connections, read_only: false };
    let mut registry = prometheus_client::registry::Registry::default();
    let exec = SqlExecutor::new(vec![config], &mut registry).expect("executor");
    Some((db, Arc::new(exec)))
}

/// A job for the `sql:` body `body` (YAML flow mapping), with `params`.
fn job(body: &str, timeout: Duration, params: Json) -> Job {
    let yaml = format!("flow: f\nnodes:\n  n:\n    run:\n      sql: {body}\n");
    let flow = madeira_core::spec::parse_flow("t.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let madeira_core::NodeAction::Run(ExecutorDef::Sql(def)) = flow.nodes[0].action.clone() else {
        panic!("sql node")
    };
    Job {
        run_id: "run-1".into(),
        flow: "f".into(),
        node: "n".into(),
        attempt: 1,
        idempotency_key: "run-1:n:v1".into(),
        executor: ExecutorDef::Sql(def),
        no_retry_exit_codes: Vec::new(),
        input: json!({"params": params, "nodes": {}}),
        timeout,
        traceparent: None,
        resumed: false,
    }
}

async fn run(exec: &SqlExecutor, job: Job) -> AttemptResult {
    exec.execute(job, CancellationToken::new()).await
}

fn outputs(result: AttemptResult) -> serde_json::Map<String, Json> {
    match result {
        AttemptResult::Success { outputs, .. } => outputs,
        AttemptResult::Failure { error, log, .. } => panic!("failed: {error}\n{log}"),
    }
}

fn failure(result: AttemptResult) -> (String, bool, String) {
    match result {
        AttemptResult::Failure { error, retryable, log } => (error, retryable, log),
        AttemptResult::Success { outputs, .. } => panic!("succeeded with {outputs:?}"),
    }
}

const SECOND: Duration = Duration::from_secs(1);

async fn first_row_and_verbatim_binds(kind: Kind) {
    let Some((db, exec)) = setup(kind, 2).await else { return };
    db.exec("CREATE TABLE notes (id INT PRIMARY KEY, body TEXT, run_id TEXT)").await.expect("table");
    let evil = "'; DROP TABLE notes; --";
    let insert = job(
        "{datasource: db, statement: \"INSERT INTO notes VALUES (1, :body, :run_id)\", params: {body: \"params.body\"}}",
        10 * SECOND,
        json!({"body": evil}),
    );
    assert_eq!(Json::Object(outputs(run(&exec, insert).await)), json!({"affected": 1}));
    let select = job(
        "{datasource: db, statement: \"SELECT id, body, run_id, 2.5 AS ratio FROM notes WHERE id = :id\", params: {id: \"1\"}, outputs: first_row}",
        10 * SECOND,
        json!({}),
    );
    let row = outputs(run(&exec, select).await);
    assert_eq!(row["id"], json!(1));
    assert_eq!(row["body"], json!(evil));
    assert_eq!(row["run_id"], json!("run-1"));
    assert_eq!(row["ratio"].as_f64(), Some(2.5));
    assert_eq!(db.strings("SELECT body FROM notes").await.expect("still there"), [evil]);
}

#[tokio::test]
async fn pg_first_row_and_verbatim_binds() {
    first_row_and_verbatim_binds(Kind::Postgres).await;
}

#[tokio::test]
async fn mysql_first_row_and_verbatim_binds() {
    first_row_and_verbatim_binds(Kind::Mysql).await;
}

async fn timeout_in_the_database(kind: Kind, sleep: &str) {
    let Some((db, exec)) = setup(kind, 2).await else { return };
    let started = Instant::now();
    let body =
        format!("{{datasource: db, statement: \"SELECT {sleep}(30)\", outputs: first_row, grace: 3s}}");
    let (error, retryable, log) = failure(run(&exec, job(&body, 2 * SECOND, json!({}))).await);
    let took = started.elapsed();
    assert!(error.contains("timed out after 2s"), "{error}\n{log}");
    assert!(retryable, "a timeout is retryable");
    assert!(took < 2 * SECOND + 3 * SECOND, "ended within grace: {took:?}\n{log}");
    assert!(log.contains("is gone from the activity view"), "{log}");
    assert_eq!(db.active_statements(&format!("{sleep}(30)")).await.expect("activity"), 0, "{log}");
}

#[tokio::test]
async fn pg_timeout_is_enforced_in_the_database() {
    timeout_in_the_database(Kind::Postgres, "pg_sleep").await;
}

#[tokio::test]
async fn mysql_timeout_is_enforced_in_the_database() {
    timeout_in_the_database(Kind::Mysql, "SLEEP").await;
}

/// A statement that ignores cancellation (it catches `query_canceled`) is waited
/// for until `grace`, then its session is terminated; only then does the attempt end.
#[tokio::test]
async fn pg_a_statement_ignoring_cancel_is_killed_after_grace() {
    let Some((db, exec)) = setup(Kind::Postgres, 2).await else { return };
    let stubborn = "DO $$ BEGIN FOR i IN 1..600 LOOP BEGIN PERFORM pg_sleep(0.1); \
                    EXCEPTION WHEN query_canceled THEN NULL; END; END LOOP; END $$";
    let body = format!("{{datasource: db, statement: \"{stubborn}\", grace: 2s}}");
    let started = Instant::now();
    let (error, _, log) = failure(run(&exec, job(&body, SECOND, json!({}))).await);
    let took = started.elapsed();
    assert!(error.contains("timed out after 1s"), "{error}\n{log}");
    assert!(log.contains("still in the database after the cancel"), "{log}");
    assert!(log.contains("killing session"), "{log}");
    assert!(took >= 2 * SECOND, "waited for the grace: {took:?}");
    assert_eq!(db.active_statements("pg_sleep(0.1)").await.expect("activity"), 0, "{log}");
}

async fn deadlock_is_retryable_syntax_is_not(kind: Kind) {
    let Some((db, exec)) = setup(kind, 4).await else { return };
    let (error, retryable, _) =
        failure(run(&exec, job("{datasource: db, statement: \"SELEC 1\"}", 5 * SECOND, json!({}))).await);
    assert!(!retryable, "syntax errors are not retried: {error}");
    db.exec("CREATE TABLE acc (id INT PRIMARY KEY, n INT)").await.expect("table");
    db.exec("INSERT INTO acc VALUES (1, 0), (2, 0)").await.expect("rows");
    let (error, retryable, _) = failure(
        run(
            &exec,
            job("{datasource: db, statement: \"INSERT INTO acc VALUES (1, 0)\"}", 5 * SECOND, json!({})),
        )
        .await,
    );
    assert!(!retryable, "constraint errors are not retried: {error}");
    let sleep = if kind == Kind::Postgres { "SELECT pg_sleep(0.5)" } else { "SELECT SLEEP(0.5)" };
    let script = |a: u32, b: u32| {
        format!(
            "{{datasource: db, script: \"UPDATE acc SET n = n + 1 WHERE id = {a}; {sleep}; UPDATE acc SET n = n + 1 WHERE id = {b}\"}}"
        )
    };
    let (one, two) = tokio::join!(
        run(&exec, job(&script(1, 2), 10 * SECOND, json!({}))),
        run(&exec, job(&script(2, 1), 10 * SECOND, json!({})))
    );
    let failed: Vec<_> = [one, two]
        .into_iter()
        .filter_map(|r| match r {
            AttemptResult::Failure { error, retryable, .. } => Some((error, retryable)),
            AttemptResult::Success { .. } => None,
        })
        .collect();
    assert_eq!(failed.len(), 1, "one of the two is the deadlock victim: {failed:?}");
    assert!(failed[0].1, "a deadlock is retryable: {}", failed[0].0);
    assert!(failed[0].0.to_lowercase().contains("deadlock"), "{}", failed[0].0);
}

#[tokio::test]
async fn pg_deadlock_is_retryable_syntax_is_not() {
    deadlock_is_retryable_syntax_is_not(Kind::Postgres).await;
}

#[tokio::test]
async fn mysql_deadlock_is_retryable_syntax_is_not() {
    deadlock_is_retryable_syntax_is_not(Kind::Mysql).await;
}

async fn pool_limit_holds(kind: Kind, sleep: &str) {
    let Some((db, exec)) = setup(kind, 2).await else { return };
    let body = format!("{{datasource: db, statement: \"SELECT {sleep}(1.5)\", outputs: first_row}}");
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let (exec, job) = (exec.clone(), job(&body, 20 * SECOND, json!({})));
            tokio::spawn(async move { run(&exec, job).await })
        })
        .collect();
    let mut peak = 0;
    let until = Instant::now() + 10 * SECOND;
    while !tasks.iter().all(|t| t.is_finished()) && Instant::now() < until {
        peak = peak.max(db.active_statements(&format!("{sleep}(1.5)")).await.expect("activity"));
        let info = &exec.datasources()[0];
        assert!(info.in_use <= 2, "in_use {}", info.in_use);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for t in tasks {
        outputs(t.await.expect("task"));
    }
    assert_eq!(peak, 2, "never more than max_connections statements, and the pool is used fully");
}

#[tokio::test]
async fn pg_pool_limit_holds() {
    pool_limit_holds(Kind::Postgres, "pg_sleep").await;
}

#[tokio::test]
async fn mysql_pool_limit_holds() {
    pool_limit_holds(Kind::Mysql, "SLEEP").await;
}

#[tokio::test]
async fn rows_are_bounded_and_too_large_outputs_fail() {
    let Some((_db, exec)) = setup(Kind::Postgres, 1).await else { return };
    let rows = outputs(
        run(
            &exec,
            job("{datasource: db, statement: \"SELECT g AS n FROM generate_series(1, 10) g\", outputs: rows, max_rows: 3}", 5 * SECOND, json!({})),
        )
        .await,
    );
    assert_eq!(
        Json::Object(rows),
        json!({"count": 3, "truncated": true, "rows": [{"n": 1}, {"n": 2}, {"n": 3}]})
    );
    let (error, retryable, _) = failure(
        run(
            &exec,
            job("{datasource: db, statement: \"SELECT repeat('x', 1000) AS v FROM generate_series(1, 100)\", outputs: rows}", 5 * SECOND, json!({})),
        )
        .await,
    );
    assert!(error.contains("64 KiB output limit") && !retryable, "{error}");
}

/// Overhead of one SQL attempt on a warm pool over the statement's own time (the
/// same prepared statement on a plain connection): `cargo test -p madeira-sql
/// --test executor overhead -- --nocapture` prints the figures.
async fn overhead(kind: Kind) {
    let Some((db, exec)) = setup(kind, 1).await else { return };
    let n = 200;
    let attempt =
        job("{datasource: db, statement: \"SELECT 1 AS one\", outputs: first_row}", 10 * SECOND, json!({}));
    for _ in 0..20 {
        outputs(run(&exec, attempt.clone()).await);
    }
    let started = Instant::now();
    for _ in 0..n {
        outputs(run(&exec, attempt.clone()).await);
    }
    let per_attempt = started.elapsed() / n;
    let own = db.statement_time("SELECT 1 AS one", n).await.expect("baseline");
    let overhead = per_attempt.saturating_sub(own);
    eprintln!(
        "{kind:?}: SQL attempt {per_attempt:?}, statement alone {own:?}, overhead {overhead:?} per node (warm pool, {} build)",
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
    // Loose bound so a slow shared machine does not fail it; the figure is the report.
    assert!(overhead < Duration::from_millis(50), "overhead {overhead:?}");
}

#[tokio::test]
async fn pg_overhead_per_node() {
    overhead(Kind::Postgres).await;
}

#[tokio::test]
async fn mysql_overhead_per_node() {
    overhead(Kind::Mysql).await;
}
