//! The fleet's state: connected sidecars (declared jobs, heartbeats, readiness),
//! assignments in flight and who waits for them, results that arrived with nobody
//! waiting (the inbox: spooled results after a control-plane restart), attempts a
//! reconnecting sidecar still runs (orphans, adopted by a matching dispatch), the
//! report ids already taken (so a redelivered report changes nothing), and for
//! fencing each attempt's latest epoch and the assignments moved off lost sidecars,
//! and the results taken but not yet acknowledged (waiting for their commit).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant, SystemTime};

use madeira_proto::ControlMessage;
use madeira_proto::v1::{AttemptResult, JobDecl};
use serde::Serialize;
use tokio::sync::mpsc;

/// Report ids remembered for deduplication.
const SEEN_MAX: usize = 100_000;
/// How long an unclaimed result waits in the inbox.
pub(crate) const INBOX_TTL: Duration = Duration::from_secs(3600);

pub(crate) type Outbound = mpsc::Sender<Result<ControlMessage, tonic::Status>>;

/// What happened to an assignment, for whoever waits on it.
#[derive(Debug)]
pub(crate) enum Event {
    Result(Box<AttemptResult>),
    Refused { sidecar: String, reason: String },
    Lost { sidecar: String },
}

pub(crate) struct Sidecar {
    pub group: String,
    pub version: String,
    pub jobs: Vec<JobDecl>,
    /// Connection number; a reconnect replaces it.
    pub conn: u64,
    pub tx: Option<Outbound>,
    /// The spool is delivered: work may be routed here.
    pub ready: bool,
    pub last_seen: Instant,
    pub last_seen_at: SystemTime,
    pub reported_running: u32,
    /// Assignments the hello said are still running here.
    pub hello_running: HashSet<String>,
    /// The sidecar process (random per process; empty from older sidecars).
    pub instance: String,
    pub peer: Option<std::net::SocketAddr>,
    pub attached_at: Instant,
    /// Results of moved attempts it delivered, refused (fencing).
    pub stale_refused: u64,
    /// Flows its `madeira exec` reports may name (its hello's `observe`).
    pub observe: Vec<String>,
    /// Its hello's `observe_max_flows` (0: not said).
    pub observe_max_flows: u32,
}

impl Sidecar {
    pub fn live(&self) -> bool {
        self.ready && self.tx.is_some()
    }

    /// Connected and heard from within three heartbeats: its name is taken. A
    /// silent one (a frozen host, a half-open connection) gives the name up.
    pub fn holds_name(&self, heartbeat: Duration) -> bool {
        self.tx.is_some() && self.last_seen.elapsed() < (heartbeat * 3).max(Duration::from_secs(1))
    }

    pub fn declares(&self, job: &str) -> bool {
        self.jobs.iter().any(|j| j.name == job)
    }
}

pub(crate) struct Pending {
    pub sidecar: String,
    /// (run id, node, attempt): where its live output goes.
    pub attempt: madeira_engine::livelog::AttemptKey,
    /// (idempotency key, shard) it was placed under: its result must name them.
    pub key: (String, u32),
    pub events: mpsc::UnboundedSender<Event>,
}

pub(crate) struct Orphan {
    pub sidecar: String,
    pub assignment_id: String,
    pub since: Instant,
    pub epoch: u64,
}

/// One sidecar as `GET /api/v1/sidecars` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SidecarInfo {
    pub name: String,
    pub group: String,
    pub version: String,
    pub jobs: Vec<String>,
    /// Attempts running there now.
    pub running: u32,
    pub last_heartbeat_age_seconds: f64,
    pub connected: bool,
    pub ready: bool,
    /// Results of attempts moved away from it that it delivered anyway: refused.
    pub stale_results_refused: u64,
}

#[derive(Default)]
pub(crate) struct State {
    pub sidecars: HashMap<String, Sidecar>,
    pub pending: HashMap<String, Pending>,
    pub inbox: HashMap<(String, u32), (AttemptResult, Instant)>,
    pub orphans: HashMap<(String, u32), Orphan>,
    seen: HashSet<String>,
    seen_order: VecDeque<String>,
    pub round_robin: HashMap<(String, String), u64>,
    pub next_conn: u64,
    /// (idempotency key, shard) → the epoch of its latest placement.
    pub epochs: HashMap<(String, u32), (u64, Instant)>,
    last_epoch: u64,
    /// Sidecar → assignments moved off it while it was lost: killed when it returns.
    pub moved: HashMap<String, HashSet<String>>,
    /// (idempotency key, shard) → a result taken but not acknowledged until the
    /// engine commits its attempt's end (`acks.rs`).
    pub unacked: HashMap<(String, u32), crate::acks::Unacked>,
}

impl State {
    /// True the first time `report_id` is seen.
    pub fn first_time(&mut self, report_id: &str) -> bool {
        if report_id.is_empty() || !self.seen.insert(report_id.to_string()) {
            return report_id.is_empty();
        }
        self.seen_order.push_back(report_id.to_string());
        if self.seen_order.len() > SEEN_MAX
            && let Some(old) = self.seen_order.pop_front()
        {
            self.seen.remove(&old);
        }
        true
    }

    /// Whether `report_id` was taken before (nothing is recorded).
    pub fn seen(&self, report_id: &str) -> bool {
        !report_id.is_empty() && self.seen.contains(report_id)
    }

    /// A result with this report id waits for its commit to be acknowledged.
    pub fn awaits_commit(&self, report_id: &str) -> bool {
        self.unacked.values().any(|u| u.report_id == report_id)
    }

    /// A new epoch for a placement of `key`: larger than any before, also across
    /// control-plane restarts (it starts from the wall clock in milliseconds).
    pub fn place_epoch(&mut self, key: &(String, u32)) -> u64 {
        let now = SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        self.last_epoch = (self.last_epoch + 1).max(now);
        self.epochs.insert(key.clone(), (self.last_epoch, Instant::now()));
        self.last_epoch
    }

    /// True when a newer placement of `key` than `epoch` exists (a fenced result).
    pub fn is_stale(&self, key: &(String, u32), epoch: u64) -> bool {
        epoch != 0 && self.epochs.get(key).is_some_and(|(current, _)| epoch < *current)
    }

    /// Assignments in flight on `sidecar`.
    pub fn busy(&self, sidecar: &str) -> u32 {
        u32::try_from(self.pending.values().filter(|p| p.sidecar == sidecar).count()).unwrap_or(u32::MAX)
    }

    /// Tells everyone waiting on `sidecar` that it is lost; their attempts move.
    pub fn lose(&mut self, sidecar: &str) {
        let ids: Vec<String> =
            self.pending.iter().filter(|(_, p)| p.sidecar == sidecar).map(|(id, _)| id.clone()).collect();
        for id in ids {
            if let Some(p) = self.pending.remove(&id) {
                let _ = p.events.send(Event::Lost { sidecar: sidecar.to_string() });
            }
            self.moved.entry(sidecar.to_string()).or_default().insert(id);
        }
        self.orphans.retain(|_, o| o.sidecar != sidecar);
    }

    pub fn info(&self) -> Vec<SidecarInfo> {
        let mut out: Vec<SidecarInfo> = self
            .sidecars
            .iter()
            .map(|(name, s)| SidecarInfo {
                name: name.clone(),
                group: s.group.clone(),
                version: s.version.clone(),
                jobs: s.jobs.iter().map(|j| j.name.clone()).collect(),
                running: s.reported_running.max(self.busy(name)),
                last_heartbeat_age_seconds: s.last_seen.elapsed().as_secs_f64(),
                connected: s.tx.is_some(),
                ready: s.ready,
                stale_results_refused: s.stale_refused,
            })
            .collect();
        out.sort_by(|a, b| (&a.group, &a.name).cmp(&(&b.group, &b.name)));
        out
    }

    /// Connected sidecars per group (every group ever seen, 0 included).
    pub fn connected_by_group(&self) -> HashMap<String, i64> {
        let mut counts: HashMap<String, i64> = HashMap::new();
        for s in self.sidecars.values() {
            *counts.entry(s.group.clone()).or_default() += i64::from(s.tx.is_some());
        }
        counts
    }
}
