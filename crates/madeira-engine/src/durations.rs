//! `max_duration` (issue #35): a run of a flow with `max_duration:` that is
//! still RUNNING that long after it started, or a node with `max_duration:`
//! still unfinished that long after the first attempt of its series started
//! (retries, their backoff and a manual wait included), raises one warning
//! `MadeiraMaxDuration` naming the run's running nodes (or the node) and how
//! long. Nothing is stopped: `timeout` is what kills. Once a second the watcher
//! reads the RUNNING runs from the store (so any replica sees every run), and
//! the store records each warning's key first (`RunStore::record_once`), so it
//! fires once across restarts and replicas.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::DateTime;
use madeira_core::{FlowDef, NodeState};
use madeira_store::{RunQuery, RunRow, StoredRun};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::deadlines::{raise, short};
use crate::{BusinessAlert, EngineHandle, EngineObserver, WallClock};

/// How often the RUNNING runs are looked at.
const EVERY: Duration = Duration::from_secs(1);
/// At most this many RUNNING runs are looked at per look (newest first).
const SCAN: u32 = 1000;

pub struct DurationWatcher {
    engine: EngineHandle,
    observers: Vec<Arc<dyn EngineObserver>>,
    wall: WallClock,
    /// Keys already decided here (raised here or by another replica).
    decided: Mutex<HashSet<String>>,
}

/// One overrun found: the alert's key, node and text.
struct Overrun {
    key: String,
    node: Option<String>,
    summary: String,
}

impl DurationWatcher {
    pub fn new(engine: EngineHandle, observers: Vec<Arc<dyn EngineObserver>>) -> Self {
        Self { engine, observers, wall: Arc::new(crate::now_ms), decided: Mutex::default() }
    }

    /// Reads the wall clock from `wall` instead of the system (tests).
    pub fn with_wall_clock(mut self, wall: WallClock) -> Self {
        self.wall = wall;
        self
    }

    pub async fn run(self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => self.look().await,
            }
        }
    }

    /// One look, what each tick of `run` does; tests call it at the wall time
    /// they set (`with_wall_clock`) instead of waiting for ticks.
    pub async fn look(&self) {
        let query = RunQuery { state: Some("RUNNING".into()), limit: SCAN, ..Default::default() };
        let runs = match self.engine.store().list_runs(&query).await {
            Ok(runs) => runs,
            Err(e) => {
                debug!(error = %e, "max_duration: cannot list running runs; trying again");
                return;
            }
        };
        let now = (self.wall)();
        for run in runs {
            let Ok(def) = self.engine.flow(&run.flow, Some(run.version)).await else { continue };
            if def.max_duration.is_none() && def.nodes.iter().all(|n| n.max_duration.is_none()) {
                continue;
            }
            let stored = match self.engine.store().load_run(&run.id).await {
                Ok(Some(stored)) => stored,
                Ok(None) => continue,
                Err(e) => {
                    debug!(run_id = %run.id, error = %e, "max_duration: cannot load the run; trying again");
                    continue;
                }
            };
            for overrun in overruns(&def, &stored, now) {
                self.report(&run, overrun, now).await;
            }
        }
    }

    async fn report(&self, run: &RunRow, overrun: Overrun, now: i64) {
        if lock(&self.decided).contains(&overrun.key) {
            return;
        }
        match self.engine.store().record_once(&run.flow, &overrun.key, now).await {
            Ok(first) => {
                lock(&self.decided).insert(overrun.key.clone());
                if !first {
                    return;
                }
            }
            Err(e) => {
                warn!(run_id = %run.id, error = %e, "max_duration: cannot record a warning; trying again");
                return;
            }
        }
        info!(run_id = %run.id, flow = %run.flow, node = ?overrun.node, "past its max_duration");
        let alert = BusinessAlert {
            key: &overrun.key,
            alertname: "MadeiraMaxDuration",
            critical: false,
            flow: &run.flow,
            node: overrun.node.as_deref(),
            biz_date: run.biz_date.as_deref().unwrap_or_default(),
            summary: &overrun.summary,
            run_id: Some(&run.id),
            held_by: None,
        };
        raise(self.engine.store().as_ref(), &self.observers, alert, "max_duration", "max_duration_exceeded")
            .await;
    }
}

/// The run's and its nodes' overruns of their `max_duration` at `now` (ms).
fn overruns(def: &FlowDef, stored: &StoredRun, now: i64) -> Vec<Overrun> {
    let run = &stored.run;
    let since = |start: i64| Duration::from_millis(u64::try_from(now.saturating_sub(start)).unwrap_or(0));
    let stamp = |ms: i64| {
        DateTime::from_timestamp_millis(ms)
            .map(|t| t.with_timezone(&def.business.timezone).format("%H:%M:%S %Z").to_string())
            .unwrap_or_default()
    };
    let date = run.biz_date.as_deref().map(|d| format!(" (business date {d})")).unwrap_or_default();
    let mut out = Vec::new();
    // Each unfinished node and when its series' first attempt (or its manual wait) started.
    let unfinished: Vec<(&str, NodeState, u32, i64)> = stored
        .nodes
        .iter()
        .filter(|n| !matches!(n.state, NodeState::Success | NodeState::Failed | NodeState::Skipped))
        .filter_map(|n| {
            let first = stored
                .attempts
                .iter()
                .filter(|a| a.node == n.node && a.attempt > n.series_start)
                .map(|a| a.started_at)
                .min();
            let start = match (first, n.started_at) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b)?,
            };
            Some((n.node.as_str(), n.state, n.attempt, start))
        })
        .collect();
    if let (Some(max), Some(started)) = (def.max_duration, run.started_at)
        && since(started) >= max
    {
        let running: Vec<String> = unfinished
            .iter()
            .map(|(node, state, _, start)| {
                format!("{node} ({} since {}, {})", state.as_str(), stamp(*start), short(since(*start)))
            })
            .collect();
        let running = match running.is_empty() {
            true => "no node is running (it waits between nodes)".to_string(),
            false => format!("unfinished: {}", running.join(", ")),
        };
        out.push(Overrun {
            key: format!("max_duration:{}", run.id),
            node: None,
            summary: format!(
                "flow {}: run {}{date} has been running for {} (since {}), past its max_duration {}; \
                 {running}. It is not stopped.",
                def.name,
                run.id,
                short(since(started)),
                stamp(started),
                short(max)
            ),
        });
    }
    for (node, state, attempt, start) in unfinished {
        let Some(max) = def.node_index(node).and_then(|i| def.nodes[i].max_duration) else { continue };
        if since(start) < max {
            continue;
        }
        out.push(Overrun {
            key: format!("max_duration:{}:{node}", run.id),
            node: Some(node.to_string()),
            summary: format!(
                "flow {}: node {node} of run {}{date} has been unfinished for {} (since {}; now {}, attempt \
                 {attempt}), past its max_duration {}. It is not stopped.",
                def.name,
                run.id,
                short(since(start)),
                stamp(start),
                state.as_str(),
                short(max)
            ),
        });
    }
    out
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
