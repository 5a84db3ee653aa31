//! `madeira bench`: the engine with durable commits, on a temporary SQLite store
//! (WAL, synchronous=FULL) or the store given by `--store` (e.g. PostgreSQL), with
//! `--replicas N` engines sharing it (each holding the runs it claims, as separate
//! replicas would). Scenarios: idle RSS; a chain of 100 noop nodes and a fan-out of
//! 1,000 (each measured after warm-up runs of it); N concurrent runs of the
//! 8-node settlement DAG, triggered across the replicas in turn; `steady` (runs started at `--rate`); `throttle`; `cron`;
//! 10,000 failure events through alert aggregation (`alerts`, see `bench_alerts`).
//! Reports wall time, per-node overhead, transitions/s, dispatch latency p50/p99
//! and peak RSS; on the temporary SQLite store, the settlement scenario also the
//! bytes per node its runs left in the store (`bench_storage`). `--telemetry
//! both` runs the chain and fan-out on two sets of engines side by side, one with
//! metrics and tracing off and one with them on (spans built and exported to
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, or discarded after the batch processor when it
//! is unset), `--repeat` times in alternating order, and reports the median
//! overhead.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::future::try_join_all;
use madeira_engine::{EngineHandle, EngineOptions};
use madeira_server::AuthConfig;
use serde_json::{Value, json};

use crate::app::{ControlPlane, PlaneOptions, redact, sqlite_url_in};
use madeira_telemetry::{TelemetryOptions, TraceOptions};

use super::bench_engines::{Engines, reset_peak_rss, rss_kb, trigger, wait_all};
use super::{bench_floor, bench_history, bench_sidecar, bench_storage};
use crate::cli::{BenchArgs, Output, TelemetryMode};
use crate::sidecars::{FleetSetup, LocalSidecar};

pub async fn run(args: BenchArgs, telemetry: TelemetryOptions) -> Result<ExitCode> {
    let on = TelemetryOptions {
        metrics: true,
        traces: Some(telemetry.traces.clone().unwrap_or_else(|| TraceOptions::new(""))),
        ..telemetry
    };
    let off = TelemetryOptions { metrics: false, traces: None, ..on.clone() };
    let store_label = match &args.store {
        Some(url) if url.starts_with("sqlite:") => "sqlite (WAL, synchronous=FULL)".to_string(),
        Some(url) => format!("{} (synchronous_commit as configured)", redact(url)),
        None => "sqlite (WAL, synchronous=FULL)".to_string(),
    };
    let first = if args.telemetry == TelemetryMode::On { on.clone() } else { off };
    let (dir, planes) = start_planes(&args, first, "a").await?;
    let mut second = None;
    if args.telemetry == TelemetryMode::Both {
        second = Some(start_planes(&args, on, "b").await?);
    }
    let engines = Engines(planes.iter().map(|p| p.engine.clone()).collect());
    let with = second.as_ref().map(|(_, planes)| Engines(planes.iter().map(|p| p.engine.clone()).collect()));
    // The temporary SQLite store, whose space the settlement scenario reports.
    let store_file = args.store.is_none().then(|| dir.path().join("madeira.db"));
    let mut results = Vec::new();
    for scenario in &args.scenarios {
        if let (Some(with), "chain" | "fanout") = (&with, scenario.as_str()) {
            let result = side_by_side(scenario, &engines, with, args.repeat).await?;
            if args.output == Output::Text {
                print_comparison(&result);
            }
            results.push(result);
            continue;
        }
        let result = match scenario.as_str() {
            "idle" => idle().await?,
            "floor" => tokio::task::block_in_place(|| bench_floor::measure(dir.path()))?,
            "chain" => {
                one_run(&engines, "bench-chain", &chain_flow(100), 100, args.warmups.unwrap_or(CHAIN_WARMUPS))
                    .await?
            }
            "fanout" => {
                one_run(&engines, "bench-fanout", &fanout_flow(1000), 1001, args.warmups.unwrap_or(1)).await?
            }
            "settlement" => {
                let before = match &store_file {
                    Some(file) => Some(bench_storage::measure(file).await?),
                    None => None,
                };
                let mut result = settlement(&engines, args.runs).await?;
                if let (Some(file), Some(before)) = (&store_file, &before) {
                    bench_storage::add(&mut result, before, &bench_storage::measure(file).await?);
                    if !args.no_fold {
                        let folded = bench_storage::fold_all(planes[0].store.as_ref()).await?;
                        let after = bench_storage::measure(file).await?;
                        bench_storage::add_folded(&mut result, before, &after, folded);
                    }
                }
                result
            }
            "steady" => steady(&engines, args.runs, args.rate).await?,
            "history" => {
                let store_url = args
                    .store
                    .as_deref()
                    .context("the history scenario needs --store (PostgreSQL or MariaDB)")?;
                let api = planes[0].http_addr.context("the history scenario's API did not start")?;
                let history = bench_history::HistoryArgs {
                    store_url,
                    store: planes[0].store.as_ref(),
                    api,
                    runs: args.runs,
                    days: args.days,
                    rate: args.rate,
                };
                bench_history::run(&engines, history).await?
            }
            "cron" => cron(engines.pick(0), planes[0].store.as_ref(), args.flows).await?,
            "throttle" => throttle(&engines, 1000).await?,
            "alerts" => super::bench_alerts::run(10_000).await?,
            "sidecar-chain" | "sidecar-rss" => {
                let parts = planes[0].fleet.as_ref().context("the sidecar link did not start")?;
                if let Some(mut local) = parts.local.clone() {
                    local.wait_connected(Duration::from_secs(10)).await;
                }
                if scenario == "sidecar-chain" {
                    bench_sidecar::chain(engines.pick(0)).await?
                } else {
                    bench_sidecar::rss(engines.pick(0), &parts.fleet, parts.grpc_addr, dir.path()).await?
                }
            }
            other => bail!(
                "unknown scenario `{other}`: use idle, chain, fanout, settlement, steady, throttle, cron, \
                 alerts, history, floor, sidecar-chain or sidecar-rss"
            ),
        };
        if args.output == Output::Text && result["scenario"] == "floor" {
            bench_floor::print(&result);
        } else if args.output == Output::Text && result["scenario"] == "history" {
            bench_history::print(&result);
        } else if args.output == Output::Text && result["scenario"] == "alerts" {
            super::bench_alerts::print(&result);
        } else if args.output == Output::Text && !bench_sidecar::print(&result) {
            print_result(&result);
            bench_storage::print(&result);
        }
        results.push(result);
    }
    if let Some(floor) = results.iter().find(|r| r["scenario"] == "floor").cloned() {
        bench_floor::ratios(&floor, &mut results);
        if args.output == Output::Text {
            bench_floor::print_ratios(&results);
        }
    }
    if args.output == Output::Json {
        println!("{}", json!({"store": store_label, "replicas": engines.0.len(), "results": results}));
    } else {
        println!("store: {store_label}; replicas: {}", engines.0.len());
    }
    for plane in planes {
        plane.shutdown().await;
    }
    if let Some((_, planes)) = second {
        for plane in planes {
            plane.shutdown().await;
        }
    }
    drop(dir);
    Ok(ExitCode::SUCCESS)
}

/// Unmeasured chain runs before the measured one: two chains of 100 write more
/// than SQLite's 1,000-page auto-checkpoint, so the measured chain's commits
/// overwrite the restarted WAL in place, as in a store in service, instead of
/// growing a new file.
const CHAIN_WARMUPS: usize = 2;

/// `--replicas` control planes on the bench store (a temporary SQLite file unless
/// `--store` is given), with `telemetry`; `set` tells two sets apart.
async fn start_planes(
    args: &BenchArgs,
    telemetry: TelemetryOptions,
    set: &str,
) -> Result<(tempfile::TempDir, Vec<ControlPlane>)> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let store_url = match &args.store {
        Some(url) => url.clone(),
        None => sqlite_url_in(dir.path())?,
    };
    let mut planes = Vec::new();
    for i in 0..args.replicas.max(1) {
        let engine = EngineOptions {
            replica_id: format!("bench-{}-{set}{i}", std::process::id()),
            shared_store: crate::app::is_shared_store(&store_url),
            // The history scenario folds finished runs itself (timed); the others
            // are too short for the archiver's delay.
            archive_after: None,
            ..Default::default()
        };
        // The first replica of the first set carries an in-process sidecar for the
        // sidecar scenarios.
        let fleet = if set == "a" && i == 0 {
            let jobs = madeira_sidecar::SidecarConfig::parse("bench", bench_sidecar::JOBS)?.jobs("bench")?;
            Some(FleetSetup {
                grpc: "127.0.0.1:0".parse()?,
                options: Default::default(),
                tls: None,
                local: Some(LocalSidecar { jobs, dir: dir.path().join("sidecar"), socket: None }),
            })
        } else {
            None
        };
        planes.push(
            ControlPlane::start(PlaneOptions {
                shutdown_grace: std::time::Duration::from_secs(30),
                datasources: Vec::new(),
                xxl: None,
                fleet,
                observers: Vec::new(),
                telemetry: telemetry.clone(),
                store_url: store_url.clone(),
                engine,
                auth: AuthConfig::default(),
                // The history scenario times the API and the console of the first replica.
                http: (set == "a" && i == 0 && args.scenarios.iter().any(|s| s == "history"))
                    .then(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
                http_tls: None,
                alerts: Default::default(),
                sources: Vec::new(),
                scheduler_clock: None,
            })
            .await?,
        );
    }
    Ok((dir, planes))
}

/// Runs `scenario` alternately with telemetry off and on, `repeat` times each.
async fn side_by_side(scenario: &str, off: &Engines, on: &Engines, repeat: usize) -> Result<Value> {
    let mut walls: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut last = [Value::Null, Value::Null];
    let engines = [off, on];
    for rep in 0..repeat.max(1) {
        // Alternate which goes first, and let the previous run's background work
        // (WAL checkpoint, span export) settle, so neither side pays for the other.
        for i in if rep % 2 == 0 { [0, 1] } else { [1, 0] } {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let engine = engines[i];
            let r = match scenario {
                "chain" => one_run(engine, "bench-chain", &chain_flow(100), 100, 0).await?,
                _ => one_run(engine, "bench-fanout", &fanout_flow(1000), 1001, 0).await?,
            };
            walls[i].push(r["wall_ms"].as_f64().unwrap_or(0.0));
            last[i] = r;
        }
    }
    let [off_ms, on_ms] = walls.map(|mut w| {
        w.sort_by(f64::total_cmp);
        w[w.len() / 2]
    });
    Ok(json!({
        "scenario": scenario,
        "repeat": repeat.max(1),
        "telemetry_off_median_wall_ms": off_ms,
        "telemetry_on_median_wall_ms": on_ms,
        "overhead_pct": (on_ms - off_ms) / off_ms * 100.0,
        "off": last[0],
        "on": last[1],
    }))
}

fn print_comparison(r: &Value) {
    let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
    println!(
        "{:<11} telemetry off {:.1} ms, on {:.1} ms (median of {}): overhead {:+.1}%",
        r["scenario"].as_str().unwrap_or(""),
        f("telemetry_off_median_wall_ms"),
        f("telemetry_on_median_wall_ms"),
        r["repeat"],
        f("overhead_pct"),
    );
    print_result(&r["off"]);
    print_result(&r["on"]);
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

/// One run of `flow`, measured after `warmups` unmeasured runs of it (caches
/// warm; after enough of them the WAL has restarted, see `CHAIN_WARMUPS`).
async fn one_run(engines: &Engines, flow: &str, yaml: &str, nodes: usize, warmups: usize) -> Result<Value> {
    engines.pick(0).apply_flow(flow, yaml).await?;
    for _ in 0..warmups {
        let mut events = engines.subscribe();
        let run_id = trigger(engines.pick(0), flow).await?;
        wait_all(&mut events, HashSet::from([run_id])).await?;
    }
    reset_peak_rss();
    let before = engines.stats();
    let mut events = engines.subscribe();
    let started = Instant::now();
    let run_id = trigger(engines.pick(0), flow).await?;
    wait_all(&mut events, HashSet::from([run_id])).await?;
    let wall = started.elapsed();
    let mut result = report(flow.trim_start_matches("bench-"), engines, before, wall, nodes, 1);
    result["warmup_runs"] = json!(warmups);
    Ok(result)
}

async fn settlement(engines: &Engines, runs: usize) -> Result<Value> {
    engines.pick(0).apply_flow("bench-settlement", super::bench_engines::SETTLEMENT_DAG).await?;
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
    engines.pick(0).apply_flow("bench-settlement", super::bench_engines::SETTLEMENT_DAG).await?;
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

/// `flows` flows all firing at second 0 of every minute: the lateness of their
/// runs' start after the first minute boundary once all are loaded, and the RSS
/// with all of them scheduled.
async fn cron(engine: &EngineHandle, store: &dyn madeira_store::Store, flows: usize) -> Result<Value> {
    let started = Instant::now();
    for i in 0..flows {
        let yaml = format!(
            "flow: cron-{i}\ntriggers:\n  - cron: \"0 * * * * *\"\n    misfire: skip\nnodes:\n  a: {{run: {{builtin: noop}}}}\n"
        );
        engine.apply_flow(&format!("cron-{i}.yaml"), &yaml).await?;
    }
    let applied = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await; // let the scheduler finish loading
    let rss_loaded_mb = rss_kb("VmRSS") as f64 / 1024.0;
    let now = chrono::Utc::now();
    let boundary = now + chrono::Duration::seconds(60 - i64::from(chrono::Timelike::second(&now)));
    let boundary = chrono::DurationRound::duration_trunc(boundary, chrono::Duration::minutes(1))?;
    let key_suffix = boundary.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let deadline = Instant::now() + Duration::from_secs(200);
    let lateness = loop {
        let query = madeira_store::RunQuery { limit: (flows * 3) as u32, ..Default::default() };
        let runs = store.list_runs(&query).await?;
        let of_tick: Vec<_> = runs
            .iter()
            .filter(|r| r.idempotency_key.as_deref().is_some_and(|k| k.ends_with(&key_suffix)))
            .collect();
        if of_tick.len() >= flows && of_tick.iter().all(|r| r.started_at.is_some()) {
            let tick_ms = boundary.timestamp_millis();
            let mut late: Vec<i64> =
                of_tick.iter().filter_map(|r| r.started_at.map(|s| s - tick_ms)).collect();
            late.sort_unstable();
            break late;
        }
        if Instant::now() > deadline {
            bail!("only {} of {flows} runs for {key_suffix} after 200 s", of_tick.len());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let pct = |p: f64| lateness[((lateness.len() as f64 * p) as usize).min(lateness.len() - 1)];
    Ok(json!({
        "scenario": "cron",
        "flows": flows,
        "apply_s": applied.as_secs_f64(),
        "rss_with_flows_loaded_mb": rss_loaded_mb,
        "lateness_p50_ms": pct(0.50),
        "lateness_p99_ms": pct(0.99),
        "lateness_max_ms": lateness.last().copied().unwrap_or(0),
    }))
}

/// `runs` runs contending for one node with `max_permits: 4`, against the same flow
/// unthrottled: throughput, time in queue (ready → running), overhead per attempt.
async fn throttle(engines: &Engines, runs: usize) -> Result<Value> {
    let mut results = Vec::new();
    for (flow, throttle) in
        [("bench-free", ""), ("bench-gated", "    throttle: {max_permits: 4, queue_size: 100000}\n")]
    {
        let yaml = format!("flow: {flow}\nnodes:\n  hot:\n{throttle}    run: {{builtin: noop}}\n");
        engines.pick(0).apply_flow(flow, &yaml).await?;
        engines.stats();
        let mut events = engines.subscribe();
        let started = Instant::now();
        let ids = try_join_all((0..runs).map(|i| trigger(engines.pick(i), flow))).await?;
        wait_all(&mut events, ids.into_iter().collect()).await?;
        let wall = started.elapsed();
        let mut lat = engines.stats().dispatch_latency_us;
        lat.sort_unstable();
        let p99 = lat.get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1))).copied().unwrap_or(0);
        results.push((wall, p99));
    }
    let (free, gated) = (results[0], results[1]);
    Ok(json!({
        "scenario": "throttle",
        "runs": runs,
        "throughput_runs_per_s": runs as f64 / gated.0.as_secs_f64(),
        "queue_p99_ms": gated.1 as f64 / 1000.0,
        "unthrottled_wall_ms": free.0.as_secs_f64() * 1000.0,
        "throttled_wall_ms": gated.0.as_secs_f64() * 1000.0,
        "overhead_per_attempt_us": (gated.0.as_secs_f64() - free.0.as_secs_f64()) * 1e6 / runs as f64,
    }))
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
        "rss_after_mb": rss_kb("VmRSS") as f64 / 1024.0,
    })
}

fn print_result(r: &Value) {
    if r["scenario"] == "cron" {
        println!(
            "cron        {} flows firing at one instant: start lateness p50 {} ms p99 {} ms max {} ms; RSS with all loaded {:.1} MB (applied in {:.1} s)",
            r["flows"],
            r["lateness_p50_ms"],
            r["lateness_p99_ms"],
            r["lateness_max_ms"],
            r["rss_with_flows_loaded_mb"].as_f64().unwrap_or(0.0),
            r["apply_s"].as_f64().unwrap_or(0.0)
        );
        return;
    }
    if r["scenario"] == "throttle" {
        println!(
            "throttle    {} runs on one node, max_permits 4: {:.0} runs/s, time in queue p99 {:.1} ms, throttle overhead {:.0} µs/attempt ({:.0} ms vs {:.0} ms unthrottled)",
            r["runs"],
            r["throughput_runs_per_s"].as_f64().unwrap_or(0.0),
            r["queue_p99_ms"].as_f64().unwrap_or(0.0),
            r["overhead_per_attempt_us"].as_f64().unwrap_or(0.0),
            r["throttled_wall_ms"].as_f64().unwrap_or(0.0),
            r["unthrottled_wall_ms"].as_f64().unwrap_or(0.0)
        );
        return;
    }
    if r["scenario"] == "idle" {
        println!("idle        RSS {:.1} MB", r["rss_mb"].as_f64().unwrap_or(0.0));
        return;
    }
    println!(
        "{:<11} {} run(s), {} nodes: {:.1} ms wall, {:.0} µs/node, {} transitions ({:.0}/s) in {} commits, dispatch p50 {} µs p99 {} µs, peak RSS {:.1} MB ({:.1} MB after)",
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
        r["rss_after_mb"].as_f64().unwrap_or(0.0),
    );
    if let Some(n) = r["warmup_runs"].as_u64().filter(|n| *n > 0) {
        println!("            (measured after {n} unmeasured warm-up run(s) of the same flow)");
    }
}
