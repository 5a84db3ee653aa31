//! Message-trigger benchmark (ignored by default; run with `--ignored --nocapture`):
//! a one-node flow on SQLite (`madeira dev`) consuming RabbitMQ.
//! - throughput: 5,000 messages published first, then the flow applied; messages →
//!   runs per second until the last run exists;
//! - latency: 1,500 messages published at 500 msg/s (confirms awaited at the end),
//!   each carrying its publish time; publish-to-RUNNING (`started_at` of the run) p50/p99.
//!
//! The server is the binary `cargo test` built, or `MADEIRA_TEST_BIN` (a release build).
//! The publisher runs in this test process, so the latency figure is the server's
//! only when the test itself is a release build too:
//! `CI=true MADEIRA_TEST_BIN=$PWD/target/release/madeira cargo test --release -p madeira --test e2e messages_bench -- --ignored --nocapture --test-threads=1`.

use crate::support::wait_until;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::brokers::{amqp_url, count, dev_with_source, flow_yaml, fresh, runs_of, wait_outcomes};
use crate::messages::{channel, publish};

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run explicitly"]
async fn bench_rabbitmq_messages_to_runs_on_sqlite() {
    let Some(url) = amqp_url() else { return };
    let profile = match std::env::var("MADEIRA_TEST_BIN") {
        Ok(bin) => format!("server {bin}"),
        Err(_) => "debug".to_string(),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dev_with_source(dir.path(), "rabbitmq", &url);
    let (_conn, ch) = channel(&url).await;

    // Throughput: a backlog of 5,000, consumed as fast as the control plane makes runs.
    let (flow, queue) = (fresh("bench-tp"), fresh("madeira.bench.q"));
    let n = 5000usize;
    let backlog: Vec<(String, Vec<u8>)> =
        (0..n).map(|i| (format!("k{i}"), json!({"id": format!("k{i}")}).to_string().into_bytes())).collect();
    publish(&ch, &queue, &backlog).await;
    let started = Instant::now();
    dev.put_flow(&flow_yaml(&flow, &format!("queue: {queue}"), ", max_in_flight: 256", "")).await;
    wait_outcomes(&dev, &flow, 600, |o| count(o, "run") >= n as u64).await;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "BENCH throughput ({profile} build, SQLite, RabbitMQ, 1-node flow): {n} messages -> runs in {secs:.2}s = {:.0} runs/s",
        n as f64 / secs
    );

    // Latency at 500 msg/s.
    let (flow, queue) = (fresh("bench-lat"), fresh("madeira.bench.q"));
    dev.put_flow(&flow_yaml(&flow, &format!("queue: {queue}"), "", "")).await;
    publish(&ch, &queue, &[]).await;
    wait_outcomes(&dev, &flow, 30, |o| !o.is_null()).await;
    let m = 1500usize;
    let start = Instant::now();
    let mut confirms = Vec::new();
    for i in 0..m {
        let due = start + Duration::from_millis(i as u64 * 2);
        tokio::time::sleep_until(due.into()).await;
        let body = json!({"id": format!("l{i}"), "t": now_ms()}).to_string().into_bytes();
        let props = lapin::BasicProperties::default().with_delivery_mode(2);
        let options = lapin::options::BasicPublishOptions::default();
        confirms.push(
            ch.basic_publish("".into(), queue.as_str().into(), options, &body, props).await.expect("publish"),
        );
    }
    let rate = m as f64 / start.elapsed().as_secs_f64();
    for c in confirms {
        c.await.expect("confirmed");
    }
    wait_outcomes(&dev, &flow, 120, |o| count(o, "run") >= m as u64).await;
    let runs = runs_of(&dev, &flow).await;
    let mut latencies = Vec::new();
    for chunk in runs.chunks(50) {
        let details = futures::future::join_all(chunk.iter().map(|r| {
            let id = r["run_id"].as_str().unwrap_or("").to_string();
            let dev = &dev;
            async move { dev.get(&format!("/runs/{id}")).await.1 }
        }))
        .await;
        for d in details {
            let t = d["params"]["t"].as_i64().expect("publish time in params");
            let started = d["started_at"].as_str().and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok());
            latencies.push(started.expect("started_at").timestamp_millis() - t);
        }
    }
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    assert_eq!(latencies.len(), m);
    eprintln!(
        "BENCH latency ({profile} build, SQLite, RabbitMQ, {rate:.0} msg/s published): publish -> RUNNING p50 {} ms, p99 {} ms, max {} ms",
        pct(0.50),
        pct(0.99),
        latencies[latencies.len() - 1]
    );
}

/// Throughput on PostgreSQL: two `madeira serve` replicas consume one queue as
/// competing consumers; a backlog of 5,000 messages → runs per second until the
/// last run exists (counted over both replicas).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run explicitly"]
async fn bench_rabbitmq_messages_to_runs_on_postgres_with_two_replicas() {
    let Some(url) = amqp_url() else { return };
    let Some(db) = madeira_store::testing::PgTestDb::create().await.expect("PostgreSQL test database") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::messages_replicas::config(dir.path(), &db.url);
    let r1 = crate::messages_replicas::replica(&config, "r1", &url);
    let r2 = crate::messages_replicas::replica(&config, "r2", &url);
    let (_conn, ch) = channel(&url).await;
    let (flow, queue) = (fresh("bench-pg"), fresh("madeira.bench.q"));
    let n = 5000u64;
    let backlog: Vec<(String, Vec<u8>)> =
        (0..n).map(|i| (format!("k{i}"), json!({"id": format!("k{i}")}).to_string().into_bytes())).collect();
    publish(&ch, &queue, &backlog).await;
    let started = Instant::now();
    r1.put_flow(&flow_yaml(&flow, &format!("queue: {queue}"), ", max_in_flight: 256", "")).await;
    let what = format!("{n} runs");
    let (o1, o2) = wait_until(Duration::from_secs(600), &what, async || {
        let (o1, o2) =
            (crate::brokers::outcomes(&r1, &flow).await, crate::brokers::outcomes(&r2, &flow).await);
        if count(&o1, "run") + count(&o2, "run") >= n {
            Ok((o1, o2))
        } else {
            Err(format!("r1 {o1} r2 {o2}"))
        }
    })
    .await;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "BENCH throughput (PostgreSQL, 2 replicas, RabbitMQ, 1-node flow): {n} messages -> runs in {secs:.2}s = {:.0} runs/s (r1 {} runs, r2 {} runs)",
        n as f64 / secs,
        count(&o1, "run"),
        count(&o2, "run")
    );
}
