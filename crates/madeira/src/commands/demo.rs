//! `madeira demo`: the daily-settlement example end to end on a temporary embedded
//! store — live progress, a retried node, a skipped branch, the manual step
//! auto-confirmed — then a failing flow and the alert it would raise, and a summary.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use madeira_engine::{ActionRequest, EngineHandle, NodeActionKind, RunEvent, TriggerRequest};
use madeira_server::AuthConfig;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use crate::app::{ControlPlane, PlaneOptions, sqlite_url_in};
use crate::cli::Output;
use crate::sidecars::{FleetSetup, LocalSidecar};
use madeira_sidecar::SidecarConfig;

const SETTLEMENT: &str = include_str!("../../../../examples/daily-settlement.yaml");
const STOCK_SYNC: &str = include_str!("../../../../examples/stock-sync.yaml");
const JOBS: &str = include_str!("../../../../examples/jobs/local.yaml");
const DEADLINE: Duration = Duration::from_secs(60);

/// Set by `--output json`: the narrative goes to stderr, stdout gets one JSON summary.
static NARRATE_ON_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `println!` for the narrative (stderr under `--output json`).
macro_rules! say {
    ($($arg:tt)*) => {
        if NARRATE_ON_STDERR.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!($($arg)*)
        } else {
            println!($($arg)*)
        }
    };
}

pub async fn run(args: crate::cli::DemoArgs) -> Result<ExitCode> {
    let http: std::net::SocketAddr = args.http.parse().with_context(|| format!("--http `{}`", args.http))?;
    if !http.ip().is_loopback() {
        bail!("--http {http}: the demo has no authentication and listens on loopback only; use 127.0.0.1");
    }
    NARRATE_ON_STDERR.store(args.output == Output::Json, std::sync::atomic::Ordering::Relaxed);
    let telemetry = madeira_telemetry::TelemetryOptions { metrics: false, ..Default::default() };
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let jobs = SidecarConfig::parse("examples/jobs/local.yaml", JOBS)?.jobs("examples/jobs/local.yaml")?;
    let fleet = FleetSetup {
        grpc: "127.0.0.1:0".parse()?,
        options: Default::default(),
        tls: None,
        local: Some(LocalSidecar { jobs, dir: dir.path().join("sidecar"), socket: None }),
    };
    let plane = ControlPlane::start(PlaneOptions {
        shutdown_grace: std::time::Duration::from_secs(30),
        datasources: Vec::new(),
        xxl: None,
        observers: Vec::new(),
        telemetry: telemetry.clone(),
        store_url: sqlite_url_in(dir.path())?,
        engine: Default::default(),
        auth: AuthConfig::default(),
        http: Some(http),
        http_tls: None,
        alerts: Default::default(),
        fleet: Some(fleet),
        sources: Vec::new(),
        scheduler_clock: None,
    })
    .await?;
    if let Some(mut local) = plane.fleet.as_ref().and_then(|f| f.local.clone())
        && !local.wait_connected(Duration::from_secs(10)).await
    {
        bail!("the in-process sidecar did not connect");
    }
    let engine = plane.engine.clone();
    say!("Madeira demo — embedded SQLite at {}", dir.path().join("madeira.db").display());
    say!("Jobs run as real processes on the in-process sidecar (group `local`, examples/jobs/local.yaml).");
    if let Some(addr) = plane.http_addr {
        let lasts = if args.keep {
            "until Ctrl-C"
        } else {
            "while the demo runs; `madeira demo --keep` keeps it open"
        };
        say!("Web console: http://{addr}/   (API: http://{addr}/api/v1/runs; {lasts})\n");
    }
    engine.apply_flow("examples/daily-settlement.yaml", SETTLEMENT).await?;
    engine.apply_flow("examples/stock-sync.yaml", STOCK_SYNC).await?;
    print_dag(&engine, "daily-settlement").await?;

    let started = Instant::now();
    let settlement = watch_run(&engine, "daily-settlement", true).await?;
    print_logs(plane.store.as_ref(), &settlement.run_id, &["pull_refunds", "receivables", "export"]).await?;
    let stock = watch_run(&engine, "stock-sync", false).await?;
    print_alert(&engine, &stock.run_id).await?;

    let stats = engine.stats().snapshot(false);
    say!("\nSummary");
    say!(
        "  daily-settlement  {}  ({} transitions, {:.2}s)",
        settlement.status,
        settlement.transitions,
        settlement.seconds
    );
    say!("  stock-sync        {}  ({} transitions, {:.2}s)", stock.status, stock.transitions, stock.seconds);
    say!(
        "  {} transitions in {} group commits, {:.2}s in all",
        stats.transitions,
        stats.commits,
        started.elapsed().as_secs_f64()
    );
    let console_run = plane.http_addr.map(|addr| format!("http://{addr}/runs/{}", settlement.run_id));
    if args.output == Output::Json {
        let run = |r: &Outcome| json!({"run_id": r.run_id, "status": r.status, "transitions": r.transitions, "seconds": r.seconds});
        println!(
            "{}",
            json!({"daily-settlement": run(&settlement), "stock-sync": run(&stock),
                   "transitions": stats.transitions, "commits": stats.commits, "console": console_run})
        );
    }
    match (&console_run, args.keep) {
        (Some(url), true) => {
            say!("  console: {url}");
            let server = url.split("/runs/").next().unwrap_or_default();
            say!("  inspect: madeira show {} --server {server}", settlement.run_id);
            say!("\nServing the console until Ctrl-C (--keep).");
            crate::app::shutdown_signal().await;
        }
        (Some(_), false) | (None, _) => say!(
            "  inspect: the demo's store is gone when it exits; run `madeira demo --keep` to browse \
             these runs in the console and with `madeira show RUN --server URL`"
        ),
    }
    plane.shutdown().await;
    if settlement.status != "SUCCESS" || stock.status != "FAILED" {
        bail!("demo ended unexpectedly: daily-settlement {}, stock-sync {}", settlement.status, stock.status);
    }
    Ok(ExitCode::SUCCESS)
}

async fn print_dag(engine: &EngineHandle, flow: &str) -> Result<()> {
    let def = engine.flow(flow, None).await?;
    say!("Flow {flow} ({} nodes):", def.nodes.len());
    for &i in &def.topo {
        let node = &def.nodes[i];
        let needs: Vec<String> = node
            .needs
            .iter()
            .map(|n| {
                let weak = if n.kind == madeira_core::DepKind::Weak { " (weak)" } else { "" };
                format!("{}{weak}", def.nodes[n.upstream].id)
            })
            .collect();
        let when = node.when.as_ref().map(|w| format!("  when {}", w.source())).unwrap_or_default();
        let arrow = if needs.is_empty() { String::new() } else { format!(" ← {}", needs.join(", ")) };
        say!("  {:<14}{arrow}{when}", node.id);
    }
    say!();
    Ok(())
}

struct Outcome {
    run_id: String,
    status: String,
    transitions: usize,
    seconds: f64,
}

/// Triggers a run of `flow` and prints its transitions live until it finishes,
/// confirming manual steps when `auto_confirm`.
async fn watch_run(engine: &EngineHandle, flow: &str, auto_confirm: bool) -> Result<Outcome> {
    let mut events = engine.subscribe();
    let run = engine
        .trigger(TriggerRequest {
            flow: flow.into(),
            params: json!({"date": chrono::Utc::now().format("%Y-%m-%d").to_string()}),
            idempotency_key: None,
            trigger: "manual".into(),
            actor: "demo".into(),
            version: None,
            biz_date: None,
            at_ms: None,
        })
        .await?;
    say!("▶ run {} of {flow} v{}", run.run_id, run.version);
    let started = Instant::now();
    let mut transitions = 0;
    let mut since: HashMap<String, Instant> = HashMap::new();
    loop {
        let event =
            match tokio::time::timeout(DEADLINE.saturating_sub(started.elapsed()), events.recv()).await {
                Ok(Ok(e)) => e,
                Ok(Err(RecvError::Lagged(_))) => continue,
                Ok(Err(RecvError::Closed)) => bail!("engine stopped"),
                Err(_) => bail!("run {} did not finish within {DEADLINE:?}", run.run_id),
            };
        if event.run_id != run.run_id {
            continue;
        }
        transitions += 1;
        print_event(&event, started, &mut since);
        match (event.node.as_deref(), event.to.as_str()) {
            (Some(node), "MANUAL_CONFIRM") if auto_confirm => {
                let view = engine.snapshot(&run.run_id).await?;
                let outputs = view.nodes_json(0..view.nodes.len());
                say!("           ⏸ {node} waits for a person: {}", render(&view, node, &outputs));
                say!("           ✔ auto-confirming (demo)");
                engine
                    .act(ActionRequest {
                        run_id: run.run_id.clone(),
                        node: Some(node.to_string()),
                        kind: Some(NodeActionKind::Confirm),
                        actor: "demo".into(),
                        reason: Some("auto-confirmed in the demo".into()),
                    })
                    .await?;
            }
            (None, to @ ("SUCCESS" | "FAILED" | "CANCELLED")) => {
                say!("■ run {} {to} in {:.2}s\n", run.run_id, started.elapsed().as_secs_f64());
                return Ok(Outcome {
                    run_id: run.run_id,
                    status: to.to_string(),
                    transitions,
                    seconds: started.elapsed().as_secs_f64(),
                });
            }
            _ => {}
        }
    }
}

fn print_event(event: &RunEvent, started: Instant, since: &mut HashMap<String, Instant>) {
    let Some(node) = &event.node else { return };
    let elapsed = started.elapsed().as_secs_f64();
    let took = match event.from.as_str() {
        "RUNNING" => {
            since.get(node).map(|t| format!(" (ran {} ms)", t.elapsed().as_millis())).unwrap_or_default()
        }
        _ => String::new(),
    };
    if event.to == "RUNNING" {
        since.insert(node.clone(), Instant::now());
    }
    let mark = match event.to.as_str() {
        "SUCCESS" => "✓",
        "FAILED" => "✗",
        "RETRYING" => "↻",
        "SKIPPED" => "⤼",
        "RUNNING" => "…",
        _ => "·",
    };
    let reason = event.reason.as_ref().map(|r| format!("  ({r})")).unwrap_or_default();
    let attempt = if event.to == "RUNNING" { format!(" attempt {}", event.attempt) } else { String::new() };
    say!("  +{elapsed:5.2}s {mark} {node:<14} {} → {}{attempt}{took}{reason}", event.from, event.to);
}

/// The manual node's prompt with `{{ nodes.X.outputs.K }}` filled in.
fn render(snap: &madeira_core::RunSnapshot, node: &str, nodes: &serde_json::Value) -> String {
    let Some(def) = snap.flow.nodes.iter().find(|n| n.id == node) else {
        return String::new();
    };
    let madeira_core::NodeAction::Manual(manual) = &def.action else {
        return String::new();
    };
    let mut text = manual.prompt.clone();
    while let (Some(start), Some(end)) = (text.find("{{"), text.find("}}")) {
        if end < start {
            break;
        }
        let path: Vec<&str> = text[start + 2..end].trim().split('.').collect();
        let value = match path.as_slice() {
            ["nodes", n, "outputs", k] => nodes[*n]["outputs"][*k].clone(),
            _ => serde_json::Value::Null,
        };
        let value = value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
        text.replace_range(start..end + 2, &value);
    }
    text
}

/// Prints the alert a failed run raises: one message, naming the root cause.
async fn print_alert(engine: &EngineHandle, run_id: &str) -> Result<()> {
    let snap = engine.snapshot(run_id).await?;
    say!("Alert that would be sent (critical, grouped by root cause):");
    for cause in madeira_core::rootcause::root_causes(&snap) {
        say!("  ┌ [critical] MadeiraRunFailed · flow {} · root cause: node {}", snap.flow.name, cause.node);
        say!("  │ error: {} (after {} attempts)", cause.error.as_deref().unwrap_or("-"), cause.attempts);
        say!(
            "  │ skipped because of it: {}",
            if cause.skipped.is_empty() { "-".into() } else { cause.skipped.join(", ") }
        );
        say!("  │ logs:  madeira logs {run_id} {}", cause.node);
        say!(
            "  └ act:   madeira rerun {run_id} {} --downstream --reason \"…\"   |   madeira mark-success {run_id} {} --reason \"…\"",
            cause.node,
            cause.node
        );
    }
    Ok(())
}

/// Lines of each attempt's output the demo prints; it says how many more there are.
const SHOWN_LINES: usize = 4;

/// Prints what the sidecar kept of some nodes' output (the last 64 KiB per attempt).
async fn print_logs(store: &dyn madeira_store::Store, run_id: &str, nodes: &[&str]) -> Result<()> {
    say!("Output kept from the job processes (madeira logs RUN NODE):");
    for node in nodes {
        for log in store.logs(run_id, node).await? {
            let lines: Vec<&str> = log.content.lines().filter(|l| !l.trim().is_empty()).collect();
            for line in lines.iter().take(SHOWN_LINES) {
                say!("  {node:<13} #{} │ {line}", log.attempt);
            }
            if lines.len() > SHOWN_LINES {
                say!(
                    "  {node:<13} #{} │ … {} more line(s): madeira logs {run_id} {node}",
                    log.attempt,
                    lines.len() - SHOWN_LINES
                );
            }
        }
    }
    say!();
    Ok(())
}
