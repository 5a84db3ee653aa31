//! The `floor` scenario of `madeira bench`: what this machine allows a node, measured
//! in the same run as the figures it divides (issue 39). Medians of: spawning
//! `/bin/true` and waiting for it (as the sidecar spawns a job: `posix_spawn` in a
//! process group of its own), a durable SQLite commit of one small row (WAL,
//! synchronous=FULL, on the disk the bench's store uses), and the write and
//! `fdatasync` of a small file in place (a sidecar spool slot's), with the CPUs
//! kept awake as the engine's threads keep them during a chain (`Awake`). The floors:
//! a process node cannot cost less than spawn + one commit; with the sidecar's
//! spool kept, this design's own floor is spawn + commit + one more sync; a noop
//! node cannot cost less than one commit.

use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};

const SPAWNS: usize = 300;
const COMMITS: usize = 300;

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

fn spawn_ms() -> Result<f64> {
    let mut times = Vec::with_capacity(SPAWNS);
    for _ in 0..SPAWNS {
        let t = Instant::now();
        let status = std::process::Command::new("/bin/true")
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .status()
            .context("spawning /bin/true")?;
        times.push(t.elapsed());
        anyhow::ensure!(status.success(), "/bin/true failed: {status}");
    }
    Ok(median(times))
}

fn commit_ms(dir: &Path) -> Result<f64> {
    std::fs::create_dir_all(dir)?;
    let db = rusqlite::Connection::open(dir.join("floor.db")).context("opening the floor store")?;
    db.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; \
         CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT);",
    )?;
    let value = "x".repeat(200);
    let mut times = Vec::with_capacity(COMMITS);
    for _ in 0..COMMITS {
        let t = Instant::now();
        db.execute_batch("BEGIN")?;
        db.execute("INSERT INTO t (v) VALUES (?1)", [&value])?;
        db.execute_batch("COMMIT")?;
        times.push(t.elapsed());
    }
    Ok(median(times))
}

fn sync_ms(dir: &Path) -> Result<f64> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("floor.slot"))?;
    let record = [7u8; 300];
    file.write_all_at(&record, 0)?;
    file.sync_all()?;
    let mut times = Vec::with_capacity(COMMITS);
    for _ in 0..COMMITS {
        let t = Instant::now();
        file.write_all_at(&record, 0)?;
        file.sync_data()?;
        times.push(t.elapsed());
    }
    Ok(median(times))
}

/// Keeps the CPUs from going idle while it lives: one thread per CPU that naps
/// 20 µs at a time. On a virtual machine a thread that waits (for a disk flush, a child's
/// exit) on an idle virtual CPU can be woken milliseconds late (measured here: a
/// 0.1 ms `fdatasync` took 4 ms, in steps of the host's tick, unless another
/// thread kept the CPUs busy). The engine's own threads keep the CPUs awake
/// while a chain runs, so the floor is measured the same way; `*_idle_ms` is
/// the commit with nothing else running.
struct Awake {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Awake {
    fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cpus)
            .map(|_| {
                let flag = stop.clone();
                std::thread::spawn(move || {
                    while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Awake {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The floor figures, measured in `dir` (the bench's temporary directory).
pub fn measure(dir: &Path) -> Result<Value> {
    let idle_commit = commit_ms(&dir.join("idle"))?;
    let awake = Awake::start();
    let spawn = spawn_ms()?;
    let commit = commit_ms(dir)?;
    let sync = sync_ms(dir)?;
    drop(awake);
    Ok(json!({
        "durable_commit_idle_ms": idle_commit,
        "scenario": "floor",
        "spawn_true_ms": spawn,
        "durable_commit_ms": commit,
        "slot_sync_ms": sync,
        "proc_node_floor_ms": spawn + commit,
        "proc_node_design_floor_ms": spawn + commit + sync,
        "noop_node_floor_ms": commit,
    }))
}

/// Adds the ratios of the node figures of `results` to `floor` (issue 39: ≤ 1.5).
pub fn ratios(floor: &Value, results: &mut [Value]) {
    let f = |k: &str| floor[k].as_f64().filter(|v| *v > 0.0);
    for r in results.iter_mut() {
        match r["scenario"].as_str() {
            Some("sidecar-chain") => {
                if let (Some(node), Some(floor), Some(design)) =
                    (r["per_node_ms"].as_f64(), f("proc_node_floor_ms"), f("proc_node_design_floor_ms"))
                {
                    r["floor_ratio"] = json!(node / floor);
                    r["design_floor_ratio"] = json!(node / design);
                }
            }
            Some("chain") => {
                if let (Some(node), Some(floor)) = (r["per_node_us"].as_f64(), f("noop_node_floor_ms")) {
                    r["floor_ratio"] = json!(node / 1000.0 / floor);
                }
            }
            _ => {}
        }
    }
}

pub fn print(r: &Value) {
    let v = |k: &str| r[k].as_f64().unwrap_or(0.0);
    println!(
        "floor       spawn /bin/true {:.3} ms, durable SQLite commit {:.3} ms, slot write+fdatasync {:.3} ms: \
         a process node ≥ {:.3} ms (this design, with the spool's sync: {:.3} ms), a noop node ≥ {:.3} ms",
        v("spawn_true_ms"),
        v("durable_commit_ms"),
        v("slot_sync_ms"),
        v("proc_node_floor_ms"),
        v("proc_node_design_floor_ms"),
        v("noop_node_floor_ms"),
    );
}

/// The ratios `ratios` added, one line each.
pub fn print_ratios(results: &[Value]) {
    for r in results {
        let Some(ratio) = r["floor_ratio"].as_f64() else { continue };
        match r["design_floor_ratio"].as_f64() {
            Some(design) => println!(
                "floor ratio {}: {ratio:.2}× spawn + one commit, {design:.2}× spawn + commit + the spool's sync",
                r["scenario"].as_str().unwrap_or("")
            ),
            None => println!(
                "floor ratio {}: {ratio:.2}× one commit per node",
                r["scenario"].as_str().unwrap_or("")
            ),
        }
    }
}
