//! Sidecar scenarios of `madeira bench`: a chain of 40 sidecar nodes each running
//! `/bin/true` through the in-process sidecar (total and per-node overhead, the
//! process spawn included), and a real `madeira sidecar` daemon's RSS idle and with
//! 200 jobs running at once.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use madeira_engine::EngineHandle;
use madeira_fleet::Fleet;
use serde_json::{Value, json};

use super::bench_engines::{Engines, trigger, wait_all};

/// The in-process sidecar's jobs in the bench.
pub const JOBS: &str = "jobs:\n  true:\n    command: [\"/bin/true\"]\n";

const CHAIN: usize = 40;
const PARALLEL: usize = 200;

fn chain_flow(n: usize) -> String {
    let mut yaml = String::from(
        "flow: bench-sidecar-chain\nnodes:\n  n0: {run: {sidecar: {group: local, job: true}}}\n",
    );
    for i in 1..n {
        yaml.push_str(&format!(
            "  n{i}: {{needs: [n{}], run: {{sidecar: {{group: local, job: true}}}}}}\n",
            i - 1
        ));
    }
    yaml
}

/// Measured runs of the chain after its warm-up: one run's figure spreads ±10% on
/// a two-CPU virtual machine, more than most changes it is meant to show.
const CHAIN_RUNS: usize = 5;

/// 40 chained nodes, each a real `/bin/true` process on the in-process sidecar:
/// one warm-up run (first spawn, page cache), then `CHAIN_RUNS` measured ones,
/// reported by their median (and their fastest and slowest).
pub async fn chain(engine: &EngineHandle) -> Result<Value> {
    engine.apply_flow("bench-sidecar-chain", &chain_flow(CHAIN)).await?;
    let mut walls = Vec::with_capacity(CHAIN_RUNS);
    for round in 0..=CHAIN_RUNS {
        let mut events = Engines(vec![engine.clone()]).subscribe();
        let started = Instant::now();
        let run_id = trigger(engine, "bench-sidecar-chain").await?;
        wait_all(&mut events, HashSet::from([run_id])).await?;
        if round > 0 {
            walls.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    walls.sort_by(f64::total_cmp);
    let wall = walls[walls.len() / 2];
    Ok(json!({
        "scenario": "sidecar-chain",
        "nodes": CHAIN,
        "runs": CHAIN_RUNS,
        "wall_ms": wall,
        "per_node_ms": wall / CHAIN as f64,
        "per_node_min_ms": walls[0] / CHAIN as f64,
        "per_node_max_ms": walls[walls.len() - 1] / CHAIN as f64,
    }))
}

fn parallel_flow() -> String {
    let mut yaml = String::from("flow: bench-sidecar-parallel\nnodes:\n");
    for i in 0..PARALLEL {
        yaml.push_str(&format!("  p{i}: {{run: {{sidecar: {{group: bench, job: hold}}}}}}\n"));
    }
    yaml
}

/// A real sidecar daemon's RSS when idle, then the peak with 200 jobs running:
/// `madeira sidecar`, and the slim `madeira-sidecar` when it sits next to this
/// binary (as `cargo build` leaves it).
pub async fn rss(
    engine: &EngineHandle,
    fleet: &Fleet,
    grpc: std::net::SocketAddr,
    dir: &Path,
) -> Result<Value> {
    let exe = std::env::current_exe().context("locating the madeira binary")?;
    let mut result =
        daemon_rss(engine, fleet, grpc, dir, "bench-01", Command::new(&exe).arg("sidecar")).await?;
    let slim = exe.with_file_name("madeira-sidecar");
    if slim.is_file() {
        let r = daemon_rss(engine, fleet, grpc, dir, "bench-02", &mut Command::new(slim)).await?;
        result["slim_idle_rss_mb"] = r["idle_rss_mb"].clone();
        result["slim_rss_with_jobs_mb"] = r["rss_with_jobs_mb"].clone();
    }
    Ok(result)
}

async fn daemon_rss(
    engine: &EngineHandle,
    fleet: &Fleet,
    grpc: std::net::SocketAddr,
    dir: &Path,
    name: &str,
    program: &mut Command,
) -> Result<Value> {
    let release = dir.join("release");
    let _ = std::fs::remove_file(&release);
    let config = dir.join("bench-sidecar.yaml");
    let text = format!(
        "name: {name}\ngroup: bench\ncontrol_plane: http://{grpc}\nspool_dir: {}\njobs:\n  hold:\n    command: [\"/bin/sh\", \"-c\", \"i=0; while [ ! -e {} ] && [ $i -lt 3000 ]; do sleep 0.05; i=$((i+1)); done\"]\n",
        dir.join(format!("spool-{name}")).display(),
        release.display()
    );
    std::fs::write(&config, text)?;
    let mut child = program
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {:?}", program.get_program()))?;
    let pid = child.id();
    let result = measure(engine, fleet, pid, &release).await;
    // Whatever happened, the jobs end: on release, or after 150 s on their own
    // (should this process be killed before it could release them).
    let _ = std::fs::write(&release, b"go");
    let _ = child.kill();
    let _ = child.wait();
    // The next daemon serves the same job: wait until this one is gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    while fleet.wait_live("bench", "hold", Duration::ZERO).await {
        if Instant::now() > deadline {
            bail!("the bench sidecar still shows as live 20 s after it was killed");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    result
}

async fn measure(engine: &EngineHandle, fleet: &Fleet, pid: u32, release: &Path) -> Result<Value> {
    if !fleet.wait_live("bench", "hold", Duration::from_secs(20)).await {
        bail!("the bench sidecar did not connect");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_kb(pid, "VmRSS");
    engine.apply_flow("bench-sidecar-parallel", &parallel_flow()).await?;
    let mut events = Engines(vec![engine.clone()]).subscribe();
    let run_id = trigger(engine, "bench-sidecar-parallel").await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut peak = idle;
    while children(pid) < PARALLEL {
        peak = peak.max(rss_kb(pid, "VmRSS"));
        if Instant::now() > deadline {
            bail!("only {} of {PARALLEL} jobs started", children(pid));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..10 {
        peak = peak.max(rss_kb(pid, "VmRSS"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::write(release, b"go")?;
    wait_all(&mut events, HashSet::from([run_id])).await?;
    Ok(json!({
        "scenario": "sidecar-rss",
        "idle_rss_mb": idle as f64 / 1024.0,
        "jobs_running": PARALLEL,
        "rss_with_jobs_mb": peak as f64 / 1024.0,
    }))
}

/// Direct children of `pid` (Linux: /proc/*/stat, field 4 is the parent).
fn children(pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            stat.rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()))
                == Some(pid)
        })
        .count()
}

fn rss_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

pub fn print(r: &Value) -> bool {
    match r["scenario"].as_str() {
        Some("sidecar-chain") => println!(
            "sidecar-chain {} nodes of /bin/true: {:.1} ms wall, {:.2} ms/node (spawn included; median of {} runs, {:.2}–{:.2})",
            r["nodes"],
            r["wall_ms"].as_f64().unwrap_or(0.0),
            r["per_node_ms"].as_f64().unwrap_or(0.0),
            r["runs"],
            r["per_node_min_ms"].as_f64().unwrap_or(0.0),
            r["per_node_max_ms"].as_f64().unwrap_or(0.0)
        ),
        Some("sidecar-rss") => {
            println!(
                "sidecar-rss `madeira sidecar` RSS idle {:.1} MB, with {} jobs running {:.1} MB",
                r["idle_rss_mb"].as_f64().unwrap_or(0.0),
                r["jobs_running"],
                r["rss_with_jobs_mb"].as_f64().unwrap_or(0.0)
            );
            if let Some(idle) = r["slim_idle_rss_mb"].as_f64() {
                println!(
                    "sidecar-rss `madeira-sidecar` RSS idle {idle:.1} MB, with {} jobs running {:.1} MB",
                    r["jobs_running"],
                    r["slim_rss_with_jobs_mb"].as_f64().unwrap_or(0.0)
                );
            }
        }
        _ => return false,
    }
    true
}
