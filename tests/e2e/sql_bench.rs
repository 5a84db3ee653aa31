//! SQL node overhead benchmark (ignored by default; run with `--ignored --nocapture`)
//! on the real binary through its REST API, for PostgreSQL and MariaDB (a fresh
//! database each): `madeira dev` with datasource `db`, a chain of 50 SQL nodes
//! `SELECT 1` and the same chain of builtin noop nodes (the engine's own per-node
//! cost: dispatch and durable commits), each run triggered with `POST
//! /flows/F/runs` and waited on with `GET /runs/ID`; per-node wall time from the
//! run's own timestamps (first node started to last node finished, over 50). The
//! statement's own round trip is measured directly with a client on a warm
//! connection, prepared, as the executor sends it. Overhead per SQL node = SQL per
//! node − noop per node − the statement's own time.
//!
//! The server is the binary `cargo test` built, or `MADEIRA_TEST_BIN` (a release build):
//! `CI=true MADEIRA_TEST_BIN=target/release/madeira cargo test -p madeira --test e2e
//! sql_bench -- --ignored --nocapture`.

use madeira_sql::Kind;
use madeira_sql::testing::TestDb;
use serde_json::{Value, json};

use crate::sql::{URL_ENV, write_config};
use crate::support::Dev;

const NODES: usize = 50;
const RUNS: usize = 20;

/// A chain of `NODES` nodes, each running `run` (a YAML flow mapping).
fn chain(flow: &str, run: &str) -> String {
    let mut yaml = format!("flow: {flow}\nnodes:\n  n0: {{run: {run}}}\n");
    for i in 1..NODES {
        yaml.push_str(&format!("  n{i}: {{needs: [n{}], run: {run}}}\n", i - 1));
    }
    yaml
}

fn millis(text: &Value) -> i64 {
    let text = text.as_str().unwrap_or_else(|| panic!("no timestamp: {text}"));
    chrono::DateTime::parse_from_rfc3339(text).expect("RFC 3339").timestamp_millis()
}

/// Milliseconds per node of one finished run: its first node's start to its last
/// node's end, over the number of nodes.
fn per_node_ms(run: &Value) -> f64 {
    let first = millis(&run["nodes"]["n0"]["started_at"]);
    let last = millis(&run["nodes"][format!("n{}", NODES - 1)]["finished_at"]);
    (last - first) as f64 / NODES as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Triggers `flow` `RUNS` times one after the other (after one warm-up run); the
/// median milliseconds per node.
async fn measure(dev: &Dev, flow: &str) -> f64 {
    let mut figures = Vec::new();
    for i in 0..=RUNS {
        let run_id = dev.trigger(flow, json!({})).await;
        let run = dev
            .wait_run(&run_id, 120, |r| {
                matches!(r["status"].as_str(), Some("SUCCESS" | "FAILED" | "CANCELLED"))
            })
            .await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
        if i > 0 {
            figures.push(per_node_ms(&run));
        }
    }
    median(figures)
}

async fn overhead(kind: Kind) {
    let Some(db) = TestDb::create(kind).await.expect("test database") else { return };
    let profile = match std::env::var("MADEIRA_TEST_BIN") {
        Ok(bin) => format!("server {bin}"),
        Err(_) => "debug build".to_string(),
    };
    let version = match kind {
        Kind::Postgres => db.strings("SHOW server_version").await,
        Kind::Mysql => db.strings("SELECT VERSION()").await,
    };
    let version = version.expect("server version").join("");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), "", "name: db, max_connections: 4");
    let config = config.to_str().expect("utf-8 path");
    let dev = Dev::start_with_all(&dir.path().join("data"), &["--config", config], &[(URL_ENV, &db.url)]);
    let sql = r#"{sql: {datasource: db, statement: "SELECT 1 AS one", outputs: first_row}}"#;
    dev.put_flow(&chain("bench-sql", sql)).await;
    dev.put_flow(&chain("bench-noop", "{builtin: noop}")).await;

    // Alternate so that a slow spell of the shared machine hits both alike.
    let (mut sql_ms, mut noop_ms) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        noop_ms.push(measure(&dev, "bench-noop").await);
        sql_ms.push(measure(&dev, "bench-sql").await);
    }
    let (sql_ms, noop_ms) = (median(sql_ms), median(noop_ms));
    let own = db.statement_time("SELECT 1 AS one", 2000).await.expect("statement alone");
    let own_ms = own.as_secs_f64() * 1000.0;
    let (_, listed) = dev.get("/datasources").await;
    let overhead = sql_ms - noop_ms - own_ms;
    eprintln!(
        "BENCH sql-node-overhead ({profile}, {kind:?} {version}, chain of {NODES} nodes, median of 3x{RUNS} runs, \
         dev store SQLite): SQL node {sql_ms:.2} ms/node, builtin noop {noop_ms:.2} ms/node, \
         `SELECT 1` alone {own_ms:.3} ms => overhead {overhead:.2} ms per SQL node over the statement \
         ({:.2} ms over noop; target <= 2 ms); pool {}",
        sql_ms - noop_ms,
        listed["datasources"][0]
    );
    assert!(
        listed["datasources"][0]["open"].as_u64().unwrap_or(0) <= 4,
        "the pool stays within max_connections: {listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run explicitly"]
async fn sql_bench_node_overhead_postgres() {
    overhead(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run explicitly"]
async fn sql_bench_node_overhead_mariadb() {
    overhead(Kind::Mysql).await;
}
