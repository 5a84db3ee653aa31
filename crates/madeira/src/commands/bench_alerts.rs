//! `madeira bench --scenarios alerts`: 10,000 failure events through the alert
//! component's aggregation — each a FAILED run of a 10-node flow whose root failed
//! after 3 attempts with 6 nodes skipped, handed to the engine observer as the
//! engine would — on a durable SQLite store. 50 flows × 4 error classes give 200
//! alerts. Reports the time to aggregate and persist every event, the time until
//! every alert fired, and peak RSS. Time is a manual clock, so `group_wait` costs
//! nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use madeira_alert::{AlertMetrics, ManualClock, Settings};
use madeira_core::{Action, Command, PlanCtx, RunSnapshot};
use madeira_store::sqlite::SqliteStore;
use madeira_store::{AlertQuery, AlertStore};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const ERRORS: [&str; 4] = ["timeout after 30s", "connection refused", "HTTP 503 from ledger", "disk full"];

pub async fn run(events: usize) -> Result<Value> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let store = Arc::new(SqliteStore::open_path(&dir.path().join("alerts.db")).await?);
    let clock = ManualClock::new(madeira_engine::now_ms());
    let settings = Settings { group_wait: Duration::from_secs(30), ..Settings::default() };
    let (task, handle) =
        madeira_alert::build(settings, store.clone(), AlertMetrics::default(), Arc::new(clock.clone()))?;
    let cancel = CancellationToken::new();
    let running = tokio::spawn(task.run(cancel.clone()));
    let templates = templates()?;
    let observer = handle.observer();
    super::bench_engines::reset_peak_rss();
    let started = Instant::now();
    for i in 0..events {
        let mut snap = templates[(i % 50) * 4 + (i / 50) % 4].clone();
        snap.run_id = format!("run-{i}");
        observer.run_finished(&snap);
    }
    handle.settled().await?;
    let aggregated = started.elapsed();
    clock.advance(Duration::from_secs(31));
    handle.settled().await?;
    let fired = started.elapsed();
    let peak = super::bench_engines::rss_kb("VmHWM") as f64 / 1024.0;
    let firing = AlertQuery { status: Some("firing".into()), flow: None, limit: 100_000, before: None };
    let alerts = store.list_alerts(&firing).await?.len();
    cancel.cancel();
    let _ = running.await;
    Ok(json!({
        "scenario": "alerts",
        "events": events,
        "alerts": alerts,
        "aggregate_ms": aggregated.as_secs_f64() * 1000.0,
        "events_per_s": events as f64 / aggregated.as_secs_f64(),
        "all_fired_ms": fired.as_secs_f64() * 1000.0,
        "peak_rss_mb": peak,
    }))
}

pub fn print(r: &Value) {
    println!(
        "alerts      {} failure events -> {} alerts: aggregated and persisted in {:.1} ms ({:.0} events/s), all fired after {:.1} ms, peak RSS {:.1} MB",
        r["events"],
        r["alerts"],
        r["aggregate_ms"].as_f64().unwrap_or(0.0),
        r["events_per_s"].as_f64().unwrap_or(0.0),
        r["all_fired_ms"].as_f64().unwrap_or(0.0),
        r["peak_rss_mb"].as_f64().unwrap_or(0.0),
    );
}

/// One FAILED run per (flow, error class): root failed 3 times, 6 nodes skipped.
fn templates() -> Result<Vec<RunSnapshot>> {
    let mut out = Vec::new();
    for f in 0..50 {
        let mut yaml = format!(
            "flow: bench-alerts-{f}\nlabels: {{team: t{}}}\ndefaults:\n  retry: {{attempts: 3, backoff: 1s}}\nnodes:\n  root: {{run: {{builtin: noop}}}}\n  side: {{run: {{builtin: noop}}}}\n  tail: {{needs: [side], run: {{builtin: noop}}}}\n",
            f % 5
        );
        for i in 0..6 {
            let up = if i == 0 { "root".to_string() } else { format!("d{}", i - 1) };
            yaml.push_str(&format!("  d{i}: {{needs: [{up}], run: {{builtin: noop}}}}\n"));
        }
        let flow = Arc::new(
            madeira_core::spec::parse_flow("bench.yaml", &yaml).map_err(|e| anyhow::anyhow!("{e}"))?,
        );
        for error in ERRORS {
            let mut snap = RunSnapshot::new("template".into(), flow.clone(), json!({}));
            fail_root(&mut snap, error);
            out.push(snap);
        }
    }
    Ok(out)
}

/// Drives the run through the planner: `root` fails every attempt, others succeed.
fn fail_root(snap: &mut RunSnapshot, error: &str) {
    let ctx = PlanCtx { now_ms: 0, jitter_unit: 0.0 };
    let failing = HashMap::from([("root", error)]);
    let mut commands = vec![Command::Start];
    while let Some(cmd) = commands.pop() {
        let Ok(plan) = madeira_core::plan::apply(snap, &cmd, &ctx) else { continue };
        for action in plan.actions {
            match action {
                Action::Ready { node } => commands.push(Command::Dispatch { node }),
                Action::ScheduleRetry { node, .. } => commands.push(Command::RetryDue { node }),
                Action::Execute { node, attempt, .. } => {
                    commands.push(match failing.get(snap.flow.nodes[node].id.as_str()) {
                        Some(e) => {
                            Command::AttemptFailed { node, attempt, error: e.to_string(), retryable: true }
                        }
                        None => Command::AttemptSucceeded { node, attempt, outputs: Default::default() },
                    })
                }
                _ => {}
            }
        }
    }
}
