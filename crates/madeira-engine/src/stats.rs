//! Cheap engine counters and a dispatch-latency reservoir, read by benchmarks and
//! (later) exported as metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

const MAX_SAMPLES: usize = 1 << 20;

#[derive(Default)]
pub struct EngineStats {
    transitions: AtomicU64,
    commits: AtomicU64,
    dispatch_latency_us: Mutex<Vec<u32>>,
    /// Attempts running inside this process (http, builtin): what a graceful
    /// shutdown waits for. Sidecar attempts are not counted.
    in_process: watch::Sender<usize>,
    /// Runs this replica's archiver folded (`archiver`).
    folded: Arc<AtomicU64>,
}

#[derive(Debug, Clone, Default)]
pub struct StatsSnapshot {
    pub transitions: u64,
    pub commits: u64,
    /// Ready -> running latencies in microseconds (capped sample).
    pub dispatch_latency_us: Vec<u32>,
}

impl EngineStats {
    pub(crate) fn committed(&self, transitions: usize) {
        self.transitions.fetch_add(transitions as u64, Ordering::Relaxed);
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dispatched(&self, latency: Duration) {
        if let Ok(mut samples) = self.dispatch_latency_us.lock()
            && samples.len() < MAX_SAMPLES
        {
            samples.push(latency.as_micros().min(u128::from(u32::MAX)) as u32);
        }
    }

    pub(crate) fn set_in_process(&self, n: usize) {
        self.in_process.send_if_modified(|v| std::mem::replace(v, n) != n);
    }

    /// Runs this replica's archiver folded since it started.
    pub fn folded(&self) -> u64 {
        self.folded.load(Ordering::Relaxed)
    }

    pub(crate) fn folded_counter(&self) -> Arc<AtomicU64> {
        self.folded.clone()
    }

    /// Attempts running in this process now (http, builtin; not sidecar ones).
    pub fn in_process(&self) -> usize {
        *self.in_process.borrow()
    }

    /// Waits until no in-process attempt runs, or `timeout`; true when none does.
    pub async fn wait_in_process_idle(&self, timeout: Duration) -> bool {
        let mut rx = self.in_process.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|n| *n == 0)).await.is_ok_and(|r| r.is_ok())
    }

    /// Current counters; `reset` clears the latency samples.
    pub fn snapshot(&self, reset: bool) -> StatsSnapshot {
        let mut samples = match self.dispatch_latency_us.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let dispatch_latency_us = if reset { std::mem::take(&mut *samples) } else { samples.clone() };
        StatsSnapshot {
            transitions: self.transitions.load(Ordering::Relaxed),
            commits: self.commits.load(Ordering::Relaxed),
            dispatch_latency_us,
        }
    }
}
