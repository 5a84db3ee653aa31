//! SQL nodes end to end on the real binary, against PostgreSQL and MariaDB (a
//! fresh database per test): a first row reaching the downstream node, verbatim
//! binds, server-side timeouts with no session left behind, no retry overlapping a
//! statement that ignores its cancel, deadlock vs syntax error, the pool limit
//! seen from the database, and secrets absent from logs and the API.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use madeira_sql::Kind;
use madeira_sql::testing::TestDb;
use serde_json::{Value, json};

use crate::support::{Dev, sigterm_and_wait, start_logged, status_of, wait_until};

/// The env variable the test servers read their datasource URL from.
pub(crate) const URL_ENV: &str = "MADEIRA_E2E_SQL_URL";

/// A dev server whose config has datasource `db` on `url` (from env).
fn dev_on(dir: &Path, url: &str, max_connections: u32) -> (Dev, Arc<Mutex<String>>) {
    dev_named(dir, "db", url, max_connections)
}

/// As `dev_on`, the datasource called `name`.
fn dev_named(dir: &Path, name: &str, url: &str, max_connections: u32) -> (Dev, Arc<Mutex<String>>) {
    let config = write_config(dir, "", &format!("name: {name}, max_connections: {max_connections}"));
    start_logged(dir, &config, &[(URL_ENV, url)])
}

/// `dir/config.yaml`: `head` (other settings, or nothing), then one datasource
/// with `fields` (`name: db, max_connections: 2`) whose URL is in env `URL_ENV`.
pub(crate) fn write_config(dir: &Path, head: &str, fields: &str) -> PathBuf {
    let config = dir.join("config.yaml");
    let text = format!("{head}datasources:\n  - {{{fields}, url_env: {URL_ENV}}}\n");
    std::fs::write(&config, text).expect("config");
    config
}

/// A PostgreSQL statement that ignores its cancellation for a minute (it catches
/// `query_canceled`), polling a 0.1 s sleep (`STUBBORN_POLL` is how it shows in
/// the server's activity).
const STUBBORN_POLL: &str = "pg_sleep(0.1)";
const PG_STUBBORN: &str = "DO $$ BEGIN FOR i IN 1..600 LOOP BEGIN PERFORM pg_sleep(0.1); \
                           EXCEPTION WHEN query_canceled THEN NULL; END; END LOOP; END $$";

async fn db(kind: Kind) -> Option<TestDb> {
    TestDb::create(kind).await.expect("test database")
}

fn sleep_fn(kind: Kind) -> &'static str {
    match kind {
        Kind::Postgres => "pg_sleep",
        Kind::Mysql => "SLEEP",
    }
}

async fn logs_of(dev: &Dev, run_id: &str, node: &str) -> String {
    let (status, body) = dev.get(&format!("/runs/{run_id}/nodes/{node}/logs")).await;
    assert_eq!(status, 200, "{body}");
    body.to_string()
}

async fn first_row_downstream_binds_and_secrets(kind: Kind, url: &str, db: &TestDb) {
    db.exec("CREATE TABLE payments (day VARCHAR(10), amount INT)").await.expect("payments");
    db.exec("INSERT INTO payments VALUES ('2026-12-01', 10), ('2026-12-01', 20), ('2026-11-30', 99)")
        .await
        .expect("rows");
    db.exec("CREATE TABLE settlements (total BIGINT, note TEXT, run_id TEXT)").await.expect("settlements");
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, logs) = dev_on(dir.path(), url, 2);
    dev.put_flow(
        r#"flow: sql-chain
nodes:
  total:
    run:
      sql:
        datasource: db
        statement: "SELECT COUNT(*) AS n, SUM(amount) AS total FROM payments WHERE day = :day"
        params: {day: "params.day"}
        outputs: first_row
  record:
    needs: [total]
    run:
      sql:
        datasource: db
        statement: "INSERT INTO settlements (total, note, run_id) VALUES (:total, :note, :run_id)"
        params: {total: "nodes.total.outputs.total", note: "params.note"}
"#,
    )
    .await;
    let evil = "'; DROP TABLE settlements; --";
    let run_id = dev.trigger("sql-chain", json!({"day": "2026-12-01", "note": evil})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    let cast = match kind {
        Kind::Postgres => "SELECT total::text || '|' || note || '|' || run_id FROM settlements",
        Kind::Mysql => "SELECT CONCAT(total, '|', note, '|', run_id) FROM settlements",
    };
    assert_eq!(db.strings(cast).await.expect("settlements"), [format!("30|{evil}|{run_id}")]);
    // Secrets: not in the API (datasources, run, logs) nor in the server's log.
    let (status, listed) = dev.get("/datasources").await;
    assert_eq!(status, 200);
    let kind_name = if kind == Kind::Postgres { "postgres" } else { "mysql" };
    assert_eq!(listed["datasources"][0]["name"], "db", "{listed}");
    assert_eq!(listed["datasources"][0]["kind"], kind_name, "{listed}");
    assert_eq!(listed["datasources"][0]["max_connections"], 2, "{listed}");
    let texts = [
        listed.to_string(),
        run.to_string(),
        logs_of(&dev, &run_id, "total").await,
        logs.lock().expect("logs").clone(),
    ];
    let password =
        url.split_once("://").and_then(|(_, r)| r.split_once('@')).and_then(|(u, _)| u.split_once(':'));
    for text in &texts {
        assert!(!text.contains(url), "the URL leaked: {text}");
        if let Some((_, password)) = password {
            assert!(!text.contains(password), "the password leaked: {text}");
        }
    }
}

#[tokio::test]
async fn pg_first_row_reaches_downstream_binds_verbatim_no_secrets() {
    let Some(db) = db(Kind::Postgres).await else { return };
    // The local server trusts the connection, so a password in the URL is accepted
    // and must never show up.
    let url = db.url.replacen("postgres://postgres@", "postgres://postgres:e2e-s3cret-pw@", 1);
    assert!(url.contains("e2e-s3cret-pw"), "MADEIRA_TEST_PG_URL has the form postgres://postgres@host/db");
    first_row_downstream_binds_and_secrets(Kind::Postgres, &url, &db).await;
}

#[tokio::test]
async fn mysql_first_row_reaches_downstream_binds_verbatim_no_secrets() {
    let Some(db) = db(Kind::Mysql).await else { return };
    // A user of its own with a password (MariaDB checks it), for this database only.
    let name = db.url.rsplit('/').next().expect("database name").to_string();
    let user = format!("e2e_{}", &name[name.len().saturating_sub(12)..]);
    db.exec(&format!(
        "CREATE USER '{user}'@'%' IDENTIFIED BY 'e2e-s3cret-pw'; GRANT ALL ON {name}.* TO '{user}'@'%'"
    ))
    .await
    .expect("user");
    let url = db.url.replacen("mysql://root@", &format!("mysql://{user}:e2e-s3cret-pw@"), 1);
    assert!(url.contains("e2e-s3cret-pw"), "MADEIRA_TEST_MYSQL_URL has the form mysql://root@host");
    first_row_downstream_binds_and_secrets(Kind::Mysql, &url, &db).await;
    db.exec(&format!("DROP USER '{user}'@'%'")).await.expect("drop user");
}

async fn timeout_fails_within_grace(kind: Kind) {
    let Some(db) = db(kind).await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, _) = dev_on(dir.path(), &db.url, 2);
    let sleep = sleep_fn(kind);
    dev.put_flow(&format!(
        "flow: sql-timeout\nnodes:\n  slow:\n    timeout: 2s\n    retry: {{attempts: 1}}\n    run: {{sql: {{datasource: db, statement: \"SELECT {sleep}(30)\", outputs: first_row, grace: 3s}}}}\n"
    ))
    .await;
    let started = Instant::now();
    let run_id = dev.trigger("sql-timeout", json!({})).await;
    let run = dev.finished(&run_id).await;
    let took = started.elapsed();
    assert_eq!(status_of(&run, "slow"), "FAILED", "{run}");
    assert!(took < Duration::from_secs(2 + 3 + 2), "FAILED within timeout + grace: {took:?}");
    assert_eq!(db.active_statements(&format!("{sleep}(30)")).await.expect("activity"), 0);
    let logs = logs_of(&dev, &run_id, "slow").await;
    assert!(logs.contains("is gone from the activity view"), "{logs}");
}

#[tokio::test]
async fn pg_timeout_fails_within_grace_and_leaves_no_session() {
    timeout_fails_within_grace(Kind::Postgres).await;
}

#[tokio::test]
async fn mysql_timeout_fails_within_grace_and_leaves_no_session() {
    timeout_fails_within_grace(Kind::Mysql).await;
}

/// The statement ignores its cancellation (PostgreSQL: it catches
/// `query_canceled`; MariaDB: a procedure with a CONTINUE handler, which neither
/// `max_statement_time` nor `KILL QUERY` stops): the attempt waits for it through
/// `grace`, kills the session, and only then is the retry scheduled; the database
/// never shows two of them at once.
async fn retry_never_overlaps_a_stubborn_statement(kind: Kind) {
    let Some(db) = db(kind).await else { return };
    let statement = match kind {
        Kind::Postgres => PG_STUBBORN,
        Kind::Mysql => {
            db.exec(
                "CREATE PROCEDURE stubborn() BEGIN DECLARE i INT DEFAULT 0; \
                 DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END; \
                 WHILE i < 600 DO DO SLEEP(0.1); SET i = i + 1; END WHILE; END",
            )
            .await
            .expect("procedure");
            "CALL stubborn()"
        }
    };
    let needle = format!("{}(0.1)", sleep_fn(kind));
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, _) = dev_on(dir.path(), &db.url, 4);
    dev.put_flow(&format!(
        "flow: sql-stubborn
nodes:
  stubborn:
    timeout: 1s
    retry: {{attempts: 2, backoff: 50ms, factor: 1, max_backoff: 50ms, jitter: 0s}}
    run:
      sql:
        datasource: db
        statement: \"{statement}\"
        grace: 2s
"
    ))
    .await;
    let run_id = dev.trigger("sql-stubborn", json!({})).await;
    let mut peak = 0;
    let run = wait_until(Duration::from_secs(40), "the run to finish", async || {
        peak = peak.max(db.active_statements(&needle).await.expect("activity"));
        let (_, run) = dev.get(&format!("/runs/{run_id}")).await;
        let done = matches!(run["status"].as_str(), Some("SUCCESS" | "FAILED" | "CANCELLED"));
        if done { Ok(run) } else { Err(run.to_string()) }
    })
    .await;
    assert_eq!(status_of(&run, "stubborn"), "FAILED", "{run}");
    assert_eq!(run["nodes"]["stubborn"]["attempts"], 2, "{run}");
    assert_eq!(peak, 1, "never two attempts' statements in the database at once");
    let logs = logs_of(&dev, &run_id, "stubborn").await;
    assert!(logs.contains("still in the database after the cancel"), "{logs}");
    assert!(logs.contains("killing session"), "{logs}");
    assert_eq!(db.active_statements(&needle).await.expect("activity"), 0);
}

#[tokio::test]
async fn pg_a_retry_never_overlaps_a_statement_ignoring_cancel() {
    retry_never_overlaps_a_stubborn_statement(Kind::Postgres).await;
}

#[tokio::test]
async fn mysql_a_retry_never_overlaps_a_statement_ignoring_cancel() {
    retry_never_overlaps_a_stubborn_statement(Kind::Mysql).await;
}

async fn deadlock_retried_syntax_not(kind: Kind) {
    let Some(db) = db(kind).await else { return };
    db.exec("CREATE TABLE acc (id INT PRIMARY KEY, n INT)").await.expect("table");
    db.exec("INSERT INTO acc VALUES (1, 0), (2, 0)").await.expect("rows");
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, _) = dev_on(dir.path(), &db.url, 4);
    let sleep = sleep_fn(kind);
    let script = |a: u32, b: u32| {
        format!(
            "{{sql: {{datasource: db, script: \"UPDATE acc SET n = n + 1 WHERE id = {a}; SELECT {sleep}(0.5); UPDATE acc SET n = n + 1 WHERE id = {b}\"}}}}"
        )
    };
    dev.put_flow(&format!(
        "flow: sql-deadlock\ndefaults:\n  retry: {{attempts: 3, backoff: 50ms, factor: 1, max_backoff: 50ms, jitter: 0s}}\nnodes:\n  one: {{run: {}}}\n  two: {{run: {}}}\n  typo: {{run: {{sql: {{datasource: db, statement: \"SELEC 1\"}}}}}}\n",
        script(1, 2),
        script(2, 1)
    ))
    .await;
    let run_id = dev.trigger("sql-deadlock", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(status_of(&run, "one"), "SUCCESS", "{run}");
    assert_eq!(status_of(&run, "two"), "SUCCESS", "{run}");
    let attempts = |n: &str| run["nodes"][n]["attempts"].as_u64().unwrap_or(0);
    assert_eq!(attempts("one") + attempts("two"), 3, "the deadlock victim was retried once: {run}");
    assert_eq!(status_of(&run, "typo"), "FAILED", "{run}");
    assert_eq!(attempts("typo"), 1, "a syntax error is not retried: {run}");
    let sum = match kind {
        Kind::Postgres => "SELECT SUM(n)::text FROM acc",
        Kind::Mysql => "SELECT CAST(SUM(n) AS CHAR) FROM acc",
    };
    assert_eq!(db.strings(sum).await.expect("sum"), ["4"], "each script's two updates committed once");
}

#[tokio::test]
async fn pg_deadlock_is_retried_syntax_error_is_not() {
    deadlock_retried_syntax_not(Kind::Postgres).await;
}

#[tokio::test]
async fn mysql_deadlock_is_retried_syntax_error_is_not() {
    deadlock_retried_syntax_not(Kind::Mysql).await;
}

async fn pool_limit_holds(kind: Kind) {
    let Some(db) = db(kind).await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, _) = dev_on(dir.path(), &db.url, 2);
    let sleep = sleep_fn(kind);
    let nodes: String = (1..=5)
        .map(|i| {
            format!("  n{i}: {{run: {{sql: {{datasource: db, statement: \"SELECT {sleep}(1.2)\"}}}}}}\n")
        })
        .collect();
    dev.put_flow(&format!("flow: sql-pool\nnodes:\n{nodes}")).await;
    let run_id = dev.trigger("sql-pool", json!({})).await;
    let (mut peak, mut in_use_peak) = (0, 0);
    let run = wait_until(Duration::from_secs(30), "the run to finish", async || {
        peak = peak.max(db.active_statements(&format!("{sleep}(1.2)")).await.expect("activity"));
        let (_, listed) = dev.get("/datasources").await;
        in_use_peak = in_use_peak.max(listed["datasources"][0]["in_use"].as_i64().unwrap_or(0));
        let (_, run) = dev.get(&format!("/runs/{run_id}")).await;
        if run["status"] == "SUCCESS" || run["status"] == "FAILED" { Ok(run) } else { Err(run.to_string()) }
    })
    .await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(peak, 2, "at most max_connections statements in the database, and the pool used fully");
    assert!(in_use_peak <= 2, "in_use {in_use_peak}");
    let value: Value = dev.get("/datasources").await.1;
    assert_eq!(value["datasources"][0]["in_use"], 0, "{value}");
    let scrape = dev.http.get(format!("{}/metrics", dev.base)).send().await.expect("scrape");
    let scrape = scrape.text().await.expect("metrics");
    for line in [
        "madeira_sql_pool_max{datasource=\"db\"} 2",
        "madeira_sql_pool_in_use{datasource=\"db\"} 0",
        "madeira_sql_pool_waiting{datasource=\"db\"} 0",
    ] {
        assert!(scrape.lines().any(|l| l == line), "no `{line}` on /metrics");
    }
}

#[tokio::test]
async fn pg_pool_limit_holds_in_the_database() {
    pool_limit_holds(Kind::Postgres).await;
}

#[tokio::test]
async fn mysql_pool_limit_holds_in_the_database() {
    pool_limit_holds(Kind::Mysql).await;
}

/// `validate --config` and `PUT /flows` name an unknown datasource with its line;
/// `madeira datasources` lists the configured ones without their URLs (pools
/// connect on first use, so no database is needed here).
#[tokio::test]
async fn validate_checks_datasources_and_the_cli_lists_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), "", "name: finance, read_only: true");
    let flow = dir.path().join("flow.yaml");
    let write_flow = |ds: &str| {
        std::fs::write(
            &flow,
            format!("flow: v\nnodes:\n  a:\n    run:\n      sql:\n        datasource: {ds}\n        statement: \"SELECT 1\"\n"),
        )
        .expect("flow")
    };
    let validate = || {
        std::process::Command::new(crate::support::BIN)
            .arg("validate")
            .arg("--config")
            .arg(&config)
            .arg(&flow)
            .output()
            .expect("validate")
    };
    write_flow("financ");
    let out = validate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{}:6: node a: unknown datasource `financ`; the server config has: finance",
            flow.display()
        )),
        "{stdout}"
    );
    write_flow("finance");
    assert_eq!(validate().status.code(), Some(0));

    let secret_url = "postgres://app:cli-s3cret-pw@127.0.0.1:1/finance";
    let (dev, logs) = start_logged(dir.path(), &config, &[(URL_ENV, secret_url)]);
    // Applying checks the names against the server's own datasources.
    let typo = "flow: v\nnodes:\n  a:\n    run:\n      sql:\n        datasource: financ\n        statement: \"SELECT 1\"\n";
    let resp = dev.http.put(dev.url("/flows/v")).body(typo).send().await.expect("apply");
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.expect("json");
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("v.yaml:6: node a: unknown datasource `financ`; the server config has: finance"),
        "{body}"
    );
    dev.put_flow(&typo.replace("financ", "finance")).await;
    let out = std::process::Command::new(crate::support::BIN)
        .args(["datasources", "--server", &dev.base, "--output", "json"])
        .output()
        .expect("datasources");
    let body: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(body["datasources"][0]["name"], "finance", "{body}");
    assert_eq!(body["datasources"][0]["read_only"], true, "{body}");
    let text = std::process::Command::new(crate::support::BIN)
        .args(["datasources", "--server", &dev.base])
        .output()
        .expect("datasources");
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(text.contains("finance") && text.contains("read-only"), "{text}");
    for shown in [body.to_string(), text, logs.lock().expect("logs").clone()] {
        assert!(!shown.contains("cli-s3cret-pw"), "the password leaked: {shown}");
    }
}

/// Cancelling the run cancels the statement on the server: the activity view
/// shows no session of it within the grace.
async fn cancelling_a_run_cancels_its_statement(kind: Kind) {
    let Some(db) = db(kind).await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, _) = dev_on(dir.path(), &db.url, 2);
    let sleep = format!("{}(60)", sleep_fn(kind));
    dev.put_flow(&format!(
        "flow: sql-cancel\nnodes:\n  slow: {{run: {{sql: {{datasource: db, statement: \"SELECT {sleep}\", grace: 3s}}}}}}\n",
    ))
    .await;
    let run_id = dev.trigger("sql-cancel", json!({})).await;
    wait_until(Duration::from_secs(20), "the statement to start", async || {
        db.active_statements(&sleep).await.expect("activity") > 0
    })
    .await;
    let (status, body) =
        dev.post(&format!("/runs/{run_id}/cancel"), json!({"reason": "too slow"}), &[]).await;
    assert!(status < 300, "{status} {body}");
    let cancelled = Instant::now();
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "CANCELLED", "{run}");
    let left = Duration::from_secs(3 + 2).saturating_sub(cancelled.elapsed());
    wait_until(left, "the statement to leave the database within the cancel and grace", async || {
        db.active_statements(&sleep).await.expect("activity") == 0
    })
    .await;
}

#[tokio::test]
async fn pg_cancelling_a_run_cancels_its_statement_in_the_database() {
    cancelling_a_run_cancels_its_statement(Kind::Postgres).await;
}

#[tokio::test]
async fn mysql_cancelling_a_run_cancels_its_statement_in_the_database() {
    cancelling_a_run_cancels_its_statement(Kind::Mysql).await;
}

/// SIGTERM with `shutdown_grace: 1s` while a statement ignores its cancel and has
/// `grace: 7s`: the server cancels it, waits for the kill after the grace and for
/// the session to leave the activity view, and only then exits (the engine's stop
/// waits past its own 5 s for it), so nothing of it outlives the process.
#[tokio::test]
async fn pg_shutdown_waits_for_a_cancelled_statement_to_leave_the_database() {
    let Some(db) = db(Kind::Postgres).await else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), "shutdown_grace: 1s\n", "name: db, max_connections: 2");
    let (mut dev, logs) = start_logged(dir.path(), &config, &[(URL_ENV, &db.url)]);
    let stubborn = PG_STUBBORN;
    dev.put_flow(&format!(
        "flow: sql-stop\nnodes:\n  stubborn: {{timeout: 5m, run: {{sql: {{datasource: db, statement: \"{stubborn}\", grace: 7s}}}}}}\n"
    ))
    .await;
    dev.trigger("sql-stop", json!({})).await;
    wait_until(Duration::from_secs(20), "the statement to start", async || {
        db.active_statements(STUBBORN_POLL).await.expect("activity") > 0
    })
    .await;
    let stopping = Instant::now();
    let status = sigterm_and_wait(&mut dev.child, 40).await;
    let took = stopping.elapsed();
    assert!(status.success(), "{status:?}\n{}", logs.lock().expect("logs"));
    assert_eq!(
        db.active_statements(STUBBORN_POLL).await.expect("activity"),
        0,
        "the statement outlived the server ({took:?})"
    );
    assert!(took >= Duration::from_secs(7), "the server waited for the grace: {took:?}");
}

/// `examples/sql/sql-settlement.yaml` runs as written, with its tables.
async fn the_example_runs(kind: Kind) {
    let Some(db) = db(kind).await else { return };
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/sql/sql-settlement.yaml"
    ))
    .expect("example");
    db.exec("CREATE TABLE payments (day VARCHAR(10), amount BIGINT)").await.expect("payments");
    db.exec(
        "CREATE TABLE settlements (day VARCHAR(10) PRIMARY KEY, total BIGINT, payments BIGINT, run_id VARCHAR(64))",
    )
    .await
    .expect("settlements");
    db.exec("INSERT INTO payments VALUES ('2026-12-01', 1250), ('2026-12-01', 750), ('2026-11-30', 5)")
        .await
        .expect("rows");
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, _) = dev_named(dir.path(), "finance", &db.url, 4);
    dev.put_flow(&example).await;
    for _ in 0..2 {
        let run_id = dev.trigger("sql-settlement", json!({"day": "2026-12-01"})).await;
        let run = dev.finished(&run_id).await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
    }
    let row = match kind {
        Kind::Postgres => "SELECT day || '|' || total || '|' || payments FROM settlements",
        Kind::Mysql => "SELECT CONCAT(day, '|', total, '|', payments) FROM settlements",
    };
    assert_eq!(
        db.strings(row).await.expect("settlements"),
        ["2026-12-01|2000|2"],
        "one row per day, rerun-safe"
    );
}

#[tokio::test]
async fn pg_the_example_runs() {
    the_example_runs(Kind::Postgres).await;
}

#[tokio::test]
async fn mysql_the_example_runs() {
    the_example_runs(Kind::Mysql).await;
}
