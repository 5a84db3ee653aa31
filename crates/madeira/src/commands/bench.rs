//! `madeira bench`: the engine with durable commits, on a temporary SQLite store
//! (WAL, synchronous=FULL) or the store given by `--store` (e.g. PostgreSQL), with
//! `--replicas N` engines sharing it (each holding the runs it claims, as separate
//! replicas would). Scenarios: idle RSS; a chain of 100 noop nodes; a fan-out of
//! 1,000; N concurrent runs of the 8-node settlement DAG, triggered across the
//! replicas in turn. Reports wall time, per-node overhead, transitions/s, dispatch
//! latency p50/p99 and peak RSS.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::future::try_join_all;
use madeira_engine::{EngineHandle, EngineOptions, RunEvent, TriggerRequest};
use madeira_server::AuthConfig;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use crate::app::{ControlPlane, PlaneOptions, redact, sqlite_url_in};
use crate::cli::{BenchArgs, Output};

pub async fn run(args: BenchArgs) -> Result<ExitCode> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let (store_url, store_label) = match &args.store {
        Some(url) if url.starts_with("sqlite:") => {
            (url.clone(), "sqlite (WAL, synchronous=FULL)".to_string())
        }
        Some(url) => (url.clone(), format!("{} (synchronous_commit as configured)", redact(url))),
        None => (sqlite_url_in(dir.path())?, "sqlite (WAL, synchronous=FULL)".to_string()),
    };
    let mut planes = Vec::new();
    for i in 0..args.replicas.max(1) {
        let engine = EngineOptions {
            replica_id: format!("bench-{}-{i}", std::process::id()),
            global_permits: store_url.starts_with("postgres"),
            ..Default::default()
        };
        planes.push(
            ControlPlane::start(PlaneOptions {
                observers: Vec::new(),
                store_url: store_url.clone(),
                engine,
                auth: AuthConfig::default(),
                http: None,
            })
            .await?,
        );
    }
    let engines = Engines(planes.iter().map(|p| p.engine.clone()).collect());
    let mut results = Vec::new();
    for scenario in &args.scenarios {
        let result = match scenario.as_str() {
            "idle" => idle().await?,
            "chain" => one_run(&engines, "bench-chain", &chain_flow(100), 100).await?,
            "fanout" => one_run(&engines, "bench-fanout", &fanout_flow(1000), 1001).await?,
            "settlement" => settlement(&engines, args.runs).await?,
            "steady" => steady(&engines, args.runs, args.rate).await?,
            other => bail!("unknown scenario `{other}`: use idle, chain, fanout, settlement or steady"),
        };
        if args.output == Output::Text {
            print_result(&result);
        }
        results.push(result);
    }
    if args.output == Output::Json {
        println!("{}", json!({"store": store_label, "replicas": engines.0.len(), "results": results}));
    } else {
        println!("store: {store_label}; replicas: {}", engines.0.len());
    }
    for plane in planes {
        plane.shutdown().await;
    }
    Ok(ExitCode::SUCCESS)
}

/// The replicas' engines.
struct Engines(Vec<EngineHandle>);

impl Engines {
    /// The engine that takes the `i`-th trigger.
    fn pick(&self, i: usize) -> &EngineHandle {
        &self.0[i % self.0.len()]
    }

    /// Every replica's run events, merged (a lag is reported as an error).
    fn subscribe(&self) -> mpsc::UnboundedReceiver<Result<RunEvent, String>> {
        let (tx, rx) = mpsc::unbounded_channel();
        for engine in &self.0 {
            let mut events = engine.subscribe();
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    let item = match events.recv().await {
                        Ok(e) => Ok(e),
                        Err(RecvError::Lagged(n)) => Err(format!("event stream lagged by {n}")),
                        Err(RecvError::Closed) => return,
                    };
                    if tx.send(item).is_err() {
                        return;
                    }
                }
            });
        }
        rx
    }

    /// Counters summed and latencies pooled over every replica.
    fn stats(&self) -> madeira_engine::StatsSnapshot {
        let mut total = madeira_engine::StatsSnapshot::default();
        for s in self.0.iter().map(|e| e.stats().snapshot(true)) {
            total.transitions += s.transitions;
            total.commits += s.commits;
            total.dispatch_latency_us.extend(s.dispatch_latency_us);
        }
        total
    }
}

fn chain_flow(n: usize) -> String {
    let mut yaml = String::from("flow: bench-chain\nnodes:\n  n0: {run: {builtin: noop}}\n");
    for i in 1..n {
        yaml.push_str(&format!("  n{i}: {{needs: [n{}], run: {{builtin: noop}}}}\n", i - 1));
    }
    yaml
}

fn fanout_flow(n: usize) -> String {
    let mut yaml = String::from("flow: bench-fanout\nnodes:\n  root: {run: {builtin: noop}}\n");
    for i in 0..n {
        yaml.push_str(&format!("  leaf{i}: {{needs: [root], run: {{builtin: noop}}}}\n"));
    }
    yaml
}

const SETTLEMENT_DAG: &str = "flow: bench-settlement
nodes:
  pull_payments: {run: {builtin: noop, outputs: {n: 1}}}
  pull_refunds: {run: {builtin: noop, outputs: {refund_count: 2}}}
  verify: {needs: [pull_payments, pull_refunds], run: {builtin: noop}}
  coupons: {needs: [pull_payments], run: {builtin: noop}}
  receivables: {needs: [verify, coupons], run: {builtin: noop}}
  refund_check: {needs: [verify], when: 'nodes.pull_refunds.outputs.refund_count > 0', run: {builtin: noop}}
  notify: {needs: [{node: receivables, kind: weak}], run: {builtin: noop}}
  export: {needs: [receivables, refund_check], run: {builtin: noop}}
";

async fn trigger(engine: &EngineHandle, flow: &str) -> Result<String> {
    let req = TriggerRequest {
        flow: flow.into(),
        params: json!({}),
        idempotency_key: None,
        trigger: "bench".into(),
        actor: "bench".into(),
        version: None,
    };
    Ok(engine.trigger(req).await?.run_id)
}

/// Waits until every run in `ids` has finished; errors past the deadline.
async fn wait_all(
    events: &mut mpsc::UnboundedReceiver<Result<RunEvent, String>>,
    mut ids: HashSet<String>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !ids.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, events.recv()).await {
            Ok(Some(Ok(e)))
                if e.node.is_none() && matches!(e.to.as_str(), "SUCCESS" | "FAILED" | "CANCELLED") =>
            {
                if e.to != "SUCCESS" && ids.contains(&e.run_id) {
                    bail!("run {} ended {}", e.run_id, e.to);
                }
                ids.remove(&e.run_id);
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(lag))) => bail!("{lag}; cannot count completions"),
            Ok(None) => bail!("engines stopped"),
            Err(_) => bail!("{} run(s) unfinished after 300 s", ids.len()),
        }
    }
    Ok(())
}

async fn one_run(engines: &Engines, flow: &str, yaml: &str, nodes: usize) -> Result<Value> {
    engines.pick(0).apply_flow(flow, yaml).await?;
    reset_peak_rss();
    let before = engines.stats();
    let mut events = engines.subscribe();
    let started = Instant::now();
    let run_id = trigger(engines.pick(0), flow).await?;
    wait_all(&mut events, HashSet::from([run_id])).await?;
    let wall = started.elapsed();
    Ok(report(flow.trim_start_matches("bench-"), engines, before, wall, nodes, 1))
}

async fn settlement(engines: &Engines, runs: usize) -> Result<Value> {
    engines.pick(0).apply_flow("bench-settlement", SETTLEMENT_DAG).await?;
    reset_peak_rss();
    let before = engines.stats();
    let mut events = engines.subscribe();
    let started = Instant::now();
    let ids = try_join_all((0..runs).map(|i| trigger(engines.pick(i), "bench-settlement"))).await?;
    wait_all(&mut events, ids.into_iter().collect()).await?;
    let wall = started.elapsed();
    Ok(report("settlement", engines, before, wall, 8 * runs, runs))
}

/// Settlement runs started at a steady `rate` per second across the replicas (not
/// all at once): dispatch latency under sustained load rather than a burst.
async fn steady(engines: &Engines, runs: usize, rate: u32) -> Result<Value> {
    engines.pick(0).apply_flow("bench-settlement", SETTLEMENT_DAG).await?;
    reset_peak_rss();
    let before = engines.stats();
    let mut events = engines.subscribe();
    let started = Instant::now();
    let mut pace = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
    let mut pending = Vec::with_capacity(runs);
    for i in 0..runs {
        pace.tick().await;
        let engine = engines.pick(i).clone();
        pending.push(tokio::spawn(async move { trigger(&engine, "bench-settlement").await }));
    }
    let mut ids = HashSet::new();
    for task in pending {
        ids.insert(task.await.context("trigger task")??);
    }
    wait_all(&mut events, ids).await?;
    let wall = started.elapsed();
    let mut result = report("steady", engines, before, wall, 8 * runs, runs);
    result["rate_per_s"] = json!(rate);
    Ok(result)
}

async fn idle() -> Result<Value> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(json!({"scenario": "idle", "rss_mb": rss_kb("VmRSS") as f64 / 1024.0}))
}

fn report(
    name: &str,
    engines: &Engines,
    before: madeira_engine::StatsSnapshot,
    wall: Duration,
    nodes: usize,
    runs: usize,
) -> Value {
    let after = engines.stats();
    let transitions = after.transitions - before.transitions;
    let mut lat = after.dispatch_latency_us;
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1))).copied().unwrap_or(0)
    };
    json!({
        "scenario": name,
        "runs": runs,
        "nodes": nodes,
        "wall_ms": wall.as_secs_f64() * 1000.0,
        "per_node_us": wall.as_secs_f64() * 1e6 / nodes as f64,
        "transitions": transitions,
        "transitions_per_s": transitions as f64 / wall.as_secs_f64(),
        "commits": after.commits - before.commits,
        "dispatch_p50_us": pct(0.50),
        "dispatch_p99_us": pct(0.99),
        "peak_rss_mb": rss_kb("VmHWM") as f64 / 1024.0,
    })
}

fn print_result(r: &Value) {
    if r["scenario"] == "idle" {
        println!("idle        RSS {:.1} MB", r["rss_mb"].as_f64().unwrap_or(0.0));
        return;
    }
    println!(
        "{:<11} {} run(s), {} nodes: {:.1} ms wall, {:.0} µs/node, {} transitions ({:.0}/s) in {} commits, dispatch p50 {} µs p99 {} µs, peak RSS {:.1} MB",
        r["scenario"].as_str().unwrap_or(""),
        r["runs"],
        r["nodes"],
        r["wall_ms"].as_f64().unwrap_or(0.0),
        r["per_node_us"].as_f64().unwrap_or(0.0),
        r["transitions"],
        r["transitions_per_s"].as_f64().unwrap_or(0.0),
        r["commits"],
        r["dispatch_p50_us"],
        r["dispatch_p99_us"],
        r["peak_rss_mb"].as_f64().unwrap_or(0.0),
    );
}

/// A field of /proc/self/status in kB (0 where unavailable).
fn rss_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets VmHWM so each scenario reports its own peak (Linux `clear_refs` 5).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
