//! `madeira bench --scenarios history --store URL --runs N --days D`: a store
//! with history, then the routes people use measured on it under live load.
//!
//! 1. Template runs, made by the engine itself: the 8-node settlement as it
//!    usually ends (85%), with a retried node (8%), failed with its downstream
//!    skipped (3%), and ten 3-node cron flows (4%); one alert their failures raised.
//! 2. `N` copies of them over the last `D` days (`bench_history_sql`: bulk
//!    `INSERT … SELECT`, one day per group of statements), logs for failed
//!    attempts and last nodes, an audit row per failed run, an alert per hour.
//! 3. With settlement runs started at `--rate` per second across the replicas:
//!    p50/p99 of the API's list/filter/detail routes and the console's pages (as
//!    timed by a client on loopback), dispatch p50/p99, the scheduler's cron
//!    look-ups, and retention pruning the oldest day while the load runs (the
//!    dispatch p99 during the prune), plus the bytes per node the history takes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use madeira_engine::EngineHandle;
use serde_json::{Value, json};

use super::bench_engines::{Engines, trigger};
use super::bench_history_sql::{self as hsql, Db, Template};

const DAY_MS: i64 = 86_400_000;
/// Requests per route.
const SAMPLES: usize = 40;

const SETTLEMENT_RETRY: &str = "flow: hist-settlement-retry
nodes:
  pull_payments: {run: {builtin: noop, outputs: {n: 1}}}
  pull_refunds: {run: {builtin: noop, outputs: {refund_count: 2}}}
  verify: {needs: [pull_payments, pull_refunds], retry: {attempts: 3, backoff: 10ms}, run: {builtin: fail, times: 1, message: 'ledger not loaded yet'}}
  coupons: {needs: [pull_payments], run: {builtin: noop}}
  receivables: {needs: [verify, coupons], run: {builtin: noop}}
  refund_check: {needs: [verify], when: 'nodes.pull_refunds.outputs.refund_count > 0', run: {builtin: noop}}
  notify: {needs: [{node: receivables, kind: weak}], run: {builtin: noop}}
  export: {needs: [receivables, refund_check], run: {builtin: noop}}
";

fn failing_settlement() -> String {
    SETTLEMENT_RETRY
        .replace("hist-settlement-retry", "hist-settlement-fail")
        .replace("attempts: 3", "attempts: 2")
        .replace("times: 1, message: 'ledger not loaded yet'", "message: 'payments 1204 != ledger 1203'")
}

fn etl_flow(k: usize) -> String {
    format!(
        "flow: hist-etl-{k}\nnodes:\n  extract: {{run: {{builtin: noop, outputs: {{rows: 1000}}}}}}\n  \
         load: {{needs: [extract], run: {{builtin: noop}}}}\n  report: {{needs: [load], run: {{builtin: noop}}}}\n"
    )
}

/// What the scenario needs besides the engines.
pub(super) struct HistoryArgs<'a> {
    pub store_url: &'a str,
    /// The first replica's store (`ControlPlane::store`), measured directly.
    pub store: &'a dyn madeira_store::Store,
    pub api: std::net::SocketAddr,
    pub runs: usize,
    pub days: u32,
    pub rate: u32,
}

pub(super) async fn run(engines: &Engines, args: HistoryArgs<'_>) -> Result<Value> {
    if args.days == 0 || args.runs < 1000 {
        bail!("history needs --days ≥ 1 and --runs ≥ 1000 (got {} and {})", args.days, args.runs);
    }
    let db = Db::connect(args.store_url).await?;
    let templates = templates(engines, args.store).await?;
    let filled = fill(&db, args.store, &templates, args.runs, args.days).await?;
    let result = measure(engines, &db, &args, filled).await;
    hsql::finish(&db).await?;
    db.close().await;
    result
}

/// The template runs (each waited until it ended) and the slots they fill.
async fn templates(engines: &Engines, store: &dyn madeira_store::Store) -> Result<Vec<Template>> {
    let engine = engines.pick(0);
    engine.apply_flow("bench-settlement", super::bench_engines::SETTLEMENT_DAG).await?;
    engine.apply_flow("hist-settlement-retry", SETTLEMENT_RETRY).await?;
    engine.apply_flow("hist-settlement-fail", &failing_settlement()).await?;
    let t = |run_id: String, lo, hi, flow: &str, cron| Template {
        run_id,
        lo,
        hi,
        flow: flow.to_string(),
        trigger: if cron { "cron" } else { "api" }.into(),
        actor: if cron { "scheduler" } else { "settlement-bot" }.into(),
        cron,
    };
    let mut out = vec![
        t(trigger(engine, "bench-settlement").await?, 0, 849, "bench-settlement", false),
        t(trigger(engine, "hist-settlement-retry").await?, 850, 929, "bench-settlement", false),
        t(trigger(engine, "hist-settlement-fail").await?, 930, 959, "bench-settlement", false),
    ];
    for k in 0..10u32 {
        let flow = format!("hist-etl-{k}");
        engine.apply_flow(&flow, &etl_flow(k as usize)).await?;
        out.push(t(trigger(engine, &flow).await?, 960 + 4 * k, 963 + 4 * k, &flow, true));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for tpl in &out {
        loop {
            let run = store.load_run(&tpl.run_id).await?.context("template run vanished")?;
            if run.run.finished_at.is_some() {
                break;
            }
            if Instant::now() > deadline {
                bail!("template run {} did not end within 60 s", tpl.run_id);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(out)
}

/// Writes the history, then folds its finished runs (the archiver's work, timed)
/// and rebuilds the tables it emptied (the space a store in service reuses);
/// returns what was written, the sizes before and after the fold, and how long
/// each took.
async fn fill(
    db: &Db,
    store: &dyn madeira_store::Store,
    templates: &[Template],
    runs: usize,
    days: u32,
) -> Result<Value> {
    let started = Instant::now();
    hsql::prepare(db, templates).await?;
    // The alert the failing template raised (the aggregator may take a moment).
    let mut alert = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while alert.is_none() && Instant::now() < deadline {
        alert = db.texts("SELECT id FROM alerts ORDER BY id LIMIT 1").await?.into_iter().next();
        if alert.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let end = madeira_engine::now_ms() - 3_600_000;
    let start = end - i64::from(days) * DAY_MS;
    let per_day = (runs as u64).div_ceil(u64::from(days));
    // The days written need their time partitions (PostgreSQL; the keeper makes
    // only yesterday's to a week ahead).
    let made = store.keep_partitions(start, end).await?;
    tracing::info!(made, "time partitions of the history made");
    let mut written = 0;
    for day in 0..days {
        let day_start = start + i64::from(day) * DAY_MS;
        written += hsql::fill_day(db, day, day_start, per_day).await?;
        if let Some(alert) = &alert {
            hsql::alerts_day(db, alert, day, day_start).await?;
        }
        tracing::info!(day, written, "history day written");
        eprintln!(
            "history: day {}/{days} written ({written} runs, {:.0} s)",
            day + 1,
            started.elapsed().as_secs_f64()
        );
    }
    let load_s = started.elapsed().as_secs_f64();
    hsql::analyze(db).await?;
    let unfolded = sizes(db).await?;
    let fold = fold_all(store).await?;
    eprintln!("history: {fold}");
    // Rows the last batches deleted stay while a statement that started before
    // them runs (the engine's sweeps, seconds on a busy machine): let those end.
    tokio::time::sleep(Duration::from_secs(5)).await;
    hsql::compact(db).await?;
    hsql::analyze(db).await?;
    let folded = sizes(db).await?;
    Ok(json!({
        "history_runs": written,
        "history_days": days,
        "history_start_ms": start,
        "load_s": load_s,
        "runs_per_s_loaded": written as f64 / load_s,
        "node_rows": folded["node_rows"],
        "store_bytes": folded["store_bytes"],
        "bytes_per_node": folded["bytes_per_node"],
        "table_bytes": folded["table_bytes"],
        "unfolded": unfolded,
        "fold": fold,
        "alerts": alert.is_some(),
    }))
}

/// Every finished run folded, in batches of 500 (the archiver's statement group).
async fn fold_all(store: &dyn madeira_store::Store) -> Result<Value> {
    let started = Instant::now();
    let (mut runs, mut worst) = (0u64, 0f64);
    loop {
        let t = Instant::now();
        let n = store.fold_finished(madeira_engine::now_ms(), 500).await?;
        worst = worst.max(t.elapsed().as_secs_f64() * 1000.0);
        runs += n;
        if n < 500 {
            break;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    Ok(json!({"runs": runs, "wall_s": wall, "runs_per_s": runs as f64 / wall, "slowest_batch_ms": worst}))
}

/// Table sizes and bytes per node (node rows and the nodes folded into the archive).
async fn sizes(db: &Db) -> Result<Value> {
    let tables = hsql::table_bytes(db).await?;
    let cast = if db.is_pg() { "BIGINT" } else { "SIGNED" };
    let nodes = db.scalar("SELECT COUNT(*) FROM nodes").await?
        + db.scalar(&format!("SELECT CAST(COALESCE(SUM(nodes), 0) AS {cast}) FROM run_archive")).await?;
    let total: i64 = tables.iter().map(|(_, b)| b).sum();
    Ok(json!({
        "node_rows": nodes,
        "store_bytes": total,
        "bytes_per_node": total as f64 / nodes.max(1) as f64,
        "table_bytes": tables.into_iter().map(|(t, b)| (t, json!(b))).collect::<serde_json::Map<String, Value>>(),
    }))
}

/// Settlement runs started at `rate` per second until `stop`; counts starts and failures.
fn live_load(
    engines: &Engines,
    rate: u32,
    stop: Arc<AtomicBool>,
) -> (tokio::task::JoinHandle<()>, Arc<AtomicU64>) {
    let started = Arc::new(AtomicU64::new(0));
    let engines: Vec<EngineHandle> = engines.0.clone();
    let count = started.clone();
    let task = tokio::spawn(async move {
        let mut pace = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
        let mut i = 0usize;
        while !stop.load(Ordering::Relaxed) {
            pace.tick().await;
            let engine = engines[i % engines.len()].clone();
            i += 1;
            let count = count.clone();
            tokio::spawn(async move {
                match trigger(&engine, "bench-settlement").await {
                    Ok(_) => {
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => tracing::warn!(error = %e, "live load trigger failed"),
                }
            });
        }
    });
    (task, started)
}

/// Dispatch latency under the live load in four windows of 15 s, alternately
/// without and with an archiver folding the live runs as they become foldable
/// (off, on, off, on: the machine's other load shared by both).
async fn fold_under_load(engines: &Engines, store_url: &str) -> Result<Value> {
    let (store, _) = crate::app::open_store(store_url).await?;
    let folded = Arc::new(AtomicU64::new(0));
    let (mut off, mut on) = (Vec::new(), Vec::new());
    dispatch(engines);
    for window in 0..4 {
        let stop = Arc::new(AtomicBool::new(false));
        let archiver = (window % 2 == 1).then(|| live_archiver(store.clone(), stop.clone(), folded.clone()));
        tokio::time::sleep(Duration::from_secs(15)).await;
        stop.store(true, Ordering::Relaxed);
        if let Some(archiver) = archiver {
            archiver.await.ok();
        }
        let samples = dispatch_samples(engines);
        if window % 2 == 1 { on.extend(samples) } else { off.extend(samples) }
    }
    let (off_n, on_n) = (off.len(), on.len());
    let ((a50, a99), (b50, b99)) = (percentiles(off), percentiles(on));
    Ok(json!({
        "without": {"dispatch_p50_ms": a50, "dispatch_p99_ms": a99, "dispatches": off_n},
        "with": {"dispatch_p50_ms": b50, "dispatch_p99_ms": b99, "dispatches": on_n},
        "runs_folded": folded.load(Ordering::Relaxed),
    }))
}

/// The archiver under the live load, as the engine's runs it (batches of 200, 20
/// ms apart, until a short one), every second with no delay after a run's end
/// (a run folds once its holder's lease has lapsed), until `stop`: on its own
/// connection pool to the store, as another replica's would be.
fn live_archiver(
    store: Arc<dyn madeira_store::Store>,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            loop {
                match store.fold_finished(madeira_engine::now_ms(), 200).await {
                    Ok(n) => {
                        count.fetch_add(n, Ordering::Relaxed);
                        if n < 200 {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "live archiver failed");
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let pick = |p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1))).copied().unwrap_or(0.0)
    };
    (pick(0.50), pick(0.99))
}

/// The dispatch latencies (ms) since the last look, of every replica.
fn dispatch_samples(engines: &Engines) -> Vec<f64> {
    let mut all = Vec::new();
    for e in &engines.0 {
        all.extend(e.stats().snapshot(true).dispatch_latency_us.into_iter().map(|u| f64::from(u) / 1000.0));
    }
    all
}

fn dispatch(engines: &Engines) -> (f64, f64, usize) {
    let all = dispatch_samples(engines);
    let n = all.len();
    let (p50, p99) = percentiles(all);
    (p50, p99, n)
}

async fn measure(engines: &Engines, db: &Db, args: &HistoryArgs<'_>, filled: Value) -> Result<Value> {
    let stop = Arc::new(AtomicBool::new(false));
    let (load, started) = live_load(engines, args.rate, stop.clone());
    // Let the load settle, then start counting dispatches afresh.
    tokio::time::sleep(Duration::from_secs(3)).await;
    dispatch(engines);
    let hist_start = filled["history_start_ms"].as_i64().unwrap_or(0);
    let routes = routes(db, args, hist_start).await;
    let (d50, d99, dn) = dispatch(engines);
    let cron = cron_lookups(args.store).await;
    dispatch(engines);
    let prune = prune_day(args.store, hist_start).await;
    let (p50, p99, pn) = dispatch(engines);
    let folding = fold_under_load(engines, args.store_url).await;
    stop.store(true, Ordering::Relaxed);
    load.await.ok();
    Ok(json!({
        "fold_under_load": folding?,
        "scenario": "history",
        "replicas": engines.0.len(),
        "live_rate_per_s": args.rate,
        "live_runs_started": started.load(Ordering::Relaxed),
        "fill": filled,
        "routes": routes?,
        "dispatch_p50_ms": d50, "dispatch_p99_ms": d99, "dispatches": dn,
        "cron": cron?,
        "prune": prune?,
        "prune_dispatch_p50_ms": p50, "prune_dispatch_p99_ms": p99, "prune_dispatches": pn,
    }))
}

/// A route's name and its path for the i-th request.
type Route<'a> = (&'static str, Box<dyn Fn(usize) -> String + 'a>);

/// Times each route `SAMPLES` times; ids of runs spread over the history.
async fn routes(db: &Db, args: &HistoryArgs<'_>, hist_start: i64) -> Result<Value> {
    let base = format!("http://{}", args.api);
    let client = reqwest::Client::new();
    let span = i64::from(args.days) * DAY_MS;
    let mut ids = Vec::new();
    for k in 0..20 {
        let bound = madeira_core::timebound::id_bound(hist_start + span * k / 20 + DAY_MS / 3);
        ids.extend(
            db.texts(&format!("SELECT id FROM runs WHERE id < '{bound}' ORDER BY id DESC LIMIT 1")).await?,
        );
    }
    let failed = db
        .texts(&format!(
            "SELECT id FROM runs WHERE flow = 'bench-settlement' AND state = 'FAILED' AND id > '{}' ORDER BY id LIMIT 1",
            madeira_core::timebound::id_bound(hist_start + span / 2)
        ))
        .await?;
    let id = |i: usize| ids[i % ids.len()].clone();
    let fid = failed.first().cloned().unwrap_or_else(|| id(0));
    let day = |d: i64| {
        chrono::DateTime::from_timestamp_millis(hist_start + d * DAY_MS)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default()
    };
    let mid = madeira_core::timebound::id_bound(hist_start + span / 2);
    let list: Vec<Route<'_>> = vec![
        ("api runs", Box::new(|_| "/api/v1/runs?limit=50".into())),
        ("api runs flow", Box::new(|_| "/api/v1/runs?flow=bench-settlement&limit=50".into())),
        ("api runs rare flow", Box::new(|i| format!("/api/v1/runs?flow=hist-etl-{}&limit=50", i % 10))),
        ("api runs status=FAILED", Box::new(|_| "/api/v1/runs?status=FAILED&limit=50".into())),
        (
            "api runs flow+status",
            Box::new(|_| "/api/v1/runs?flow=bench-settlement&status=FAILED&limit=50".into()),
        ),
        (
            "api runs since/until",
            Box::new(move |i| {
                let d = (i % 5) as i64 + 2;
                format!("/api/v1/runs?flow=bench-settlement&since={}&until={}&limit=50", day(d), day(d + 1))
            }),
        ),
        ("api runs deep cursor", Box::new(move |_| format!("/api/v1/runs?cursor={mid}&limit=50"))),
        ("api run detail", Box::new(move |i| format!("/api/v1/runs/{}", id(i)))),
        ("api run transitions", Box::new(move |i| format!("/api/v1/runs/{}/transitions", id(i)))),
        ("api node logs", Box::new(move |_| format!("/api/v1/runs/{fid}/nodes/verify/logs"))),
        ("api audit", Box::new(|_| "/api/v1/audit?limit=50".into())),
        ("api audit run", Box::new(move |i| format!("/api/v1/audit?run_id={}", id(i)))),
        ("api alerts", Box::new(|_| "/api/v1/alerts".into())),
        ("api flows", Box::new(|_| "/api/v1/flows".into())),
        ("console overview", Box::new(|_| "/".into())),
        ("console runs", Box::new(|_| "/runs".into())),
        ("console runs flow+state", Box::new(|_| "/runs?flow=bench-settlement&state=FAILED".into())),
        ("console runs flow", Box::new(|_| "/runs?flow=bench-settlement".into())),
        ("console run", Box::new(move |i| format!("/runs/{}", id(i)))),
        ("console flows", Box::new(|_| "/flows".into())),
        ("console flow", Box::new(|_| "/flows/bench-settlement".into())),
        ("console audit", Box::new(|_| "/audit".into())),
        ("console alerts", Box::new(|_| "/alerts".into())),
        ("console approvals", Box::new(|_| "/approvals".into())),
    ];
    let mut out = serde_json::Map::new();
    for (name, path) in list {
        let mut times = Vec::with_capacity(SAMPLES);
        for i in 0..SAMPLES {
            let url = format!("{base}{}", path(i));
            let t = Instant::now();
            let resp = client.get(&url).send().await.with_context(|| format!("GET {url}"))?;
            let status = resp.status();
            let body = resp.bytes().await?;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            if !status.is_success() {
                bail!("GET {url}: {status}: {}", String::from_utf8_lossy(&body[..body.len().min(300)]));
            }
        }
        let (p50, p99) = percentiles(times);
        out.insert(name.into(), json!({"p50_ms": p50, "p99_ms": p99}));
    }
    Ok(Value::Object(out))
}

/// The scheduler's look-ups on start and after a gap: the last cron key of a
/// flow, and the latest 100 runs of a flow (`missed`).
async fn cron_lookups(store: &dyn madeira_store::Store) -> Result<Value> {
    let (mut keys, mut lists) = (Vec::new(), Vec::new());
    for i in 0..SAMPLES {
        let flow = format!("hist-etl-{}", i % 10);
        let t = Instant::now();
        let key = store.last_cron_key(&flow).await?;
        keys.push(t.elapsed().as_secs_f64() * 1000.0);
        if key.is_none() {
            bail!("no cron key for {flow}: the history has none");
        }
        let t = Instant::now();
        let q = madeira_store::RunQuery { flow: Some(flow), limit: 100, ..Default::default() };
        store.list_runs(&q).await?;
        lists.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (k50, k99) = percentiles(keys);
    let (l50, l99) = percentiles(lists);
    Ok(
        json!({"last_cron_key_p50_ms": k50, "last_cron_key_p99_ms": k99, "flow_runs_p50_ms": l50, "flow_runs_p99_ms": l99}),
    )
}

/// Retention's own loop (batches of 200, 20 ms apart) over the oldest day.
async fn prune_day(store: &dyn madeira_store::Store, hist_start: i64) -> Result<Value> {
    let cutoff = hist_start + DAY_MS;
    let started = Instant::now();
    // Whole days first, as the engine's retention does (time partitions).
    let days_dropped = store.drop_days(cutoff).await?;
    let drop_s = started.elapsed().as_secs_f64();
    let (mut runs, mut batches, mut worst) = (0u64, 0u64, 0f64);
    loop {
        let t = Instant::now();
        let n = store.prune(cutoff, 200).await?;
        worst = worst.max(t.elapsed().as_secs_f64() * 1000.0);
        runs += n;
        batches += 1;
        if n < 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(json!({
        "runs": runs,
        "batches": batches,
        "wall_s": started.elapsed().as_secs_f64(),
        "runs_per_s": runs as f64 / started.elapsed().as_secs_f64(),
        "slowest_batch_ms": worst,
        "days_dropped": days_dropped,
        "days_drop_s": drop_s,
    }))
}

pub(super) fn print(r: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let fill = &r["fill"];
    println!(
        "history     {} runs over {} days loaded in {:.0} s ({:.0} runs/s); {} node rows, {:.2} GB, {:.0} B/node",
        fill["history_runs"],
        fill["history_days"],
        f(&fill["load_s"]),
        f(&fill["runs_per_s_loaded"]),
        fill["node_rows"],
        f(&fill["store_bytes"]) / 1e9,
        f(&fill["bytes_per_node"])
    );
    if let Some(tables) = fill["table_bytes"].as_object() {
        let n = f(&fill["node_rows"]).max(1.0);
        let parts: Vec<String> = tables.iter().map(|(t, b)| format!("{t} {:.0}", f(b) / n)).collect();
        println!("            B/node by table: {}", parts.join(", "));
    }
    let (unfolded, fold) = (&fill["unfolded"], &fill["fold"]);
    if let Some(tables) = unfolded["table_bytes"].as_object() {
        let n = f(&unfolded["node_rows"]).max(1.0);
        let parts: Vec<String> = tables.iter().map(|(t, b)| format!("{t} {:.0}", f(b) / n)).collect();
        println!(
            "            before the fold: {:.0} B/node: {}",
            f(&unfolded["bytes_per_node"]),
            parts.join(", ")
        );
    }
    println!(
        "            fold: {} runs in {:.1} s ({:.0} runs/s, slowest batch of 500 {:.0} ms)",
        fold["runs"],
        f(&fold["wall_s"]),
        f(&fold["runs_per_s"]),
        f(&fold["slowest_batch_ms"]),
    );
    let under = &r["fold_under_load"];
    println!(
        "            live load, 2 × 15 s without folding: dispatch p50 {:.2} ms p99 {:.2} ms; 2 × 15 s with the archiver ({} runs folded): p50 {:.2} ms p99 {:.2} ms",
        f(&under["without"]["dispatch_p50_ms"]),
        f(&under["without"]["dispatch_p99_ms"]),
        under["runs_folded"],
        f(&under["with"]["dispatch_p50_ms"]),
        f(&under["with"]["dispatch_p99_ms"]),
    );
    println!(
        "            live load {} runs/s on {} replica(s) ({} started); dispatch p50 {:.2} ms p99 {:.2} ms ({} dispatches)",
        r["live_rate_per_s"],
        r["replicas"],
        r["live_runs_started"],
        f(&r["dispatch_p50_ms"]),
        f(&r["dispatch_p99_ms"]),
        r["dispatches"]
    );
    if let Some(routes) = r["routes"].as_object() {
        for (name, v) in routes {
            println!(
                "            {name:<26} p50 {:>7.2} ms  p99 {:>7.2} ms",
                f(&v["p50_ms"]),
                f(&v["p99_ms"])
            );
        }
    }
    let c = &r["cron"];
    println!(
        "            cron: last key p50 {:.2} ms p99 {:.2} ms; latest 100 runs of a flow p50 {:.2} ms p99 {:.2} ms",
        f(&c["last_cron_key_p50_ms"]),
        f(&c["last_cron_key_p99_ms"]),
        f(&c["flow_runs_p50_ms"]),
        f(&c["flow_runs_p99_ms"])
    );
    let p = &r["prune"];
    println!(
        "            prune of the oldest day: {} day partitions dropped in {:.2} s, {} runs in {:.1} s ({:.0} runs/s, slowest batch {:.1} ms); dispatch meanwhile p50 {:.2} ms p99 {:.2} ms",
        p["days_dropped"],
        f(&p["days_drop_s"]),
        p["runs"],
        f(&p["wall_s"]),
        f(&p["runs_per_s"]),
        f(&p["slowest_batch_ms"]),
        f(&r["prune_dispatch_p50_ms"]),
        f(&r["prune_dispatch_p99_ms"])
    );
}
