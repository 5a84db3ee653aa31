//! What the sidecar shares between its link, its jobs and its exec socket: the
//! declared jobs and their concurrency limits, the attempts running, the spool and
//! the current connection. Assignments are checked against the declared jobs here;
//! anything else is refused and reported.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madeira_proto::v1::{
    Assignment, AttemptResult, ExecReport, LogChunk, Outcome, Refused, RunningAssignment,
};
use madeira_proto::{SidecarMessage, SidecarMsg};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, error, info, info_span, warn};

use crate::config::JobSpec;
use crate::metrics::SidecarMetrics;
use crate::runner::{self, Attempt, RunCtx, Status};
use crate::spool::Spool;

/// The sidecar as the control plane knows it.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub group: String,
    pub version: String,
}

struct Running {
    cancel: CancellationToken,
    job: String,
    idempotency_key: String,
    shard_index: u32,
    epoch: u64,
}

pub(crate) struct Shared {
    pub identity: Identity,
    /// Random per process: tells the control plane a reconnect from a twin.
    pub instance: String,
    pub jobs: BTreeMap<String, JobSpec>,
    limits: HashMap<String, Arc<Semaphore>>,
    running: Mutex<HashMap<String, Running>>,
    pub spool: Arc<Spool>,
    pub metrics: SidecarMetrics,
    /// The connection reports go to, when there is one.
    pub outbox: watch::Sender<Option<mpsc::Sender<SidecarMessage>>>,
    /// Set on shutdown: new assignments are refused.
    pub draining: AtomicBool,
    pub tasks: TaskTracker,
    pub work_root: PathBuf,
    pub hide_env: Vec<String>,
    pub exec: crate::access::ExecAccess,
    /// The process groups of running jobs, recorded for the next start.
    pub leftovers: crate::leftovers::Leftovers,
}

impl Shared {
    pub fn new(
        identity: Identity,
        jobs: BTreeMap<String, JobSpec>,
        (spool, leftovers): (Arc<Spool>, crate::leftovers::Leftovers),
        metrics: SidecarMetrics,
        work_root: PathBuf,
        hide_env: Vec<String>,
        exec: crate::access::ExecAccess,
    ) -> Self {
        let limits = jobs
            .iter()
            .filter(|(_, j)| j.max_concurrency > 0)
            .map(|(name, j)| (name.clone(), Arc::new(Semaphore::new(j.max_concurrency as usize))))
            .collect();
        Self {
            identity,
            instance: uuid::Uuid::now_v7().to_string(),
            jobs,
            limits,
            running: Mutex::new(HashMap::new()),
            spool,
            metrics,
            outbox: watch::Sender::new(None),
            draining: AtomicBool::new(false),
            tasks: TaskTracker::new(),
            work_root,
            hide_env,
            exec,
            leftovers,
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn running_count(&self) -> u32 {
        u32::try_from(self.running().len()).unwrap_or(u32::MAX)
    }

    pub fn running_list(&self) -> Vec<RunningAssignment> {
        self.running()
            .iter()
            .map(|(id, r)| RunningAssignment {
                assignment_id: id.clone(),
                job: r.job.clone(),
                idempotency_key: r.idempotency_key.clone(),
                shard_index: r.shard_index,
                epoch: r.epoch,
            })
            .collect()
    }

    /// Sends on the current connection; false when there is none or it closed.
    pub async fn send(&self, msg: SidecarMessage) -> bool {
        let tx = self.outbox.borrow().clone();
        match tx {
            Some(tx) => tx.send(msg).await.is_ok(),
            None => false,
        }
    }

    /// Spools a report and sends it; it stays spooled until acknowledged. It is
    /// written into its slot before it is sent (a sidecar killed after the send
    /// delivers it again from there), and the slot's sync runs on the blocking
    /// pool while it travels: the control plane's commit does not wait for this
    /// disk flush, and acknowledges only what it committed. Returns once the
    /// report is durable (or kept in memory, the disk having refused it).
    pub async fn report(&self, id: &str, msg: SidecarMessage) {
        const REFUSED: &str = "cannot spool a report on disk; it is kept in memory until the control plane acknowledges it (lost if this sidecar stops first)";
        let sync = match self.spool.begin(id, &msg) {
            Ok(unsynced) => unsynced.map(crate::spool::Unsynced::start),
            Err(e) => {
                error!(error = %e, "{REFUSED}");
                None
            }
        };
        self.send(msg).await;
        if let Some(sync) = sync {
            let synced = match sync.await {
                Ok(synced) => synced.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = synced {
                error!(error = %e, "{REFUSED}");
            }
        }
    }

    pub fn acked(&self, report_id: &str) {
        if let Err(e) = self.spool.remove(report_id) {
            warn!(error = %e, "cannot remove an acknowledged report from the spool");
        }
    }

    /// A `madeira exec` report.
    pub async fn report_exec(&self, report: ExecReport) {
        let id = report.report_id.clone();
        self.report(&id, SidecarMessage { msg: Some(SidecarMsg::Exec(report)) }).await;
    }

    pub fn cancel(&self, assignment_id: &str, reason: &str) {
        if let Some(r) = self.running().get(assignment_id) {
            info!(assignment = %assignment_id, job = %r.job, reason = %reason, "cancel requested");
            r.cancel.cancel();
        }
    }

    /// Cancels every running attempt (shutdown after the grace).
    pub fn cancel_all(&self) {
        for r in self.running().values() {
            r.cancel.cancel();
        }
    }

    /// Takes an assignment: refused unless its job is declared here (and the sidecar
    /// is not draining); otherwise run as a task.
    pub async fn assign(self: &Arc<Self>, a: Assignment) {
        let refusal = if self.draining.load(Ordering::Acquire) {
            Some("the sidecar is shutting down".to_string())
        } else if !self.jobs.contains_key(&a.job) {
            Some(format!(
                "job `{}` is not declared in this sidecar's config; it runs only its own jobs",
                a.job
            ))
        } else {
            None
        };
        if let Some(reason) = refusal {
            warn!(assignment = %a.assignment_id, job = %a.job, run_id = %a.run_id, reason = %reason, "assignment refused");
            self.metrics
                .job_runs
                .get_or_create(&crate::metrics::JobStatusLabels {
                    job: if self.jobs.contains_key(&a.job) { a.job.clone() } else { "undeclared".into() },
                    status: "refused".into(),
                })
                .inc();
            let id = uuid::Uuid::now_v7().to_string();
            let msg = SidecarMsg::Refused(Refused {
                report_id: id.clone(),
                assignment_id: a.assignment_id,
                job: a.job,
                reason,
                run_id: a.run_id,
                node: a.node,
            });
            self.report(&id, SidecarMessage { msg: Some(msg) }).await;
            return;
        }
        let cancel = CancellationToken::new();
        {
            let mut running = self.running();
            if running.contains_key(&a.assignment_id) {
                return;
            }
            running.insert(
                a.assignment_id.clone(),
                Running {
                    cancel: cancel.clone(),
                    job: a.job.clone(),
                    idempotency_key: a.idempotency_key.clone(),
                    shard_index: a.shard_index,
                    epoch: a.epoch,
                },
            );
        }
        let span = info_span!("job", job = %a.job, run_id = %a.run_id, node = %a.node, attempt = a.attempt);
        let shared = self.clone();
        self.tasks.spawn(async move { shared.execute(a, cancel).await }.instrument(span));
    }

    async fn execute(self: Arc<Self>, a: Assignment, cancel: CancellationToken) {
        let Some(job) = self.jobs.get(&a.job).cloned() else {
            return;
        };
        let _permit = match self.limits.get(&a.job) {
            Some(sem) => tokio::select! {
                permit = sem.clone().acquire_owned() => permit.ok(),
                _ = cancel.cancelled() => None,
            },
            None => None,
        };
        let labels = crate::metrics::JobLabels { job: a.job.clone() };
        self.metrics.jobs_running.get_or_create(&labels).inc();
        let attempt = attempt_of(&a);
        let (log_tx, log_rx) = mpsc::channel::<Vec<u8>>(64);
        let forward = tokio::spawn(forward_logs(self.clone(), a.assignment_id.clone(), log_rx));
        // No `Started` is sent: the control plane never used it, and its frame cost
        // both processes a write, a read and a task wake-up per job, during the spawn.
        let outcome = if cancel.is_cancelled() {
            drop(log_tx);
            runner::Outcome {
                status: Status::Retryable,
                exit_code: None,
                signal: None,
                error: "cancelled before it started".into(),
                outputs: Default::default(),
                log_tail: Vec::new(),
                duration: Duration::ZERO,
                cancelled: true,
            }
        } else {
            let (leftovers, assignment) = (&self.leftovers, &a);
            let ctx = RunCtx {
                work_root: &self.work_root,
                hide_env: &self.hide_env,
                log_sink: Some(log_tx),
                on_spawn: Some(Box::new(move |pgid| leftovers.record(assignment, pgid))),
                // Removed once the result is on its way, not before.
                keep_dir: true,
            };
            runner::run(&job, &attempt, ctx, cancel).await
        };
        let _ = forward.await;
        self.metrics.jobs_running.get_or_create(&labels).dec();
        let status = match (outcome.cancelled, outcome.status) {
            (true, _) => "cancelled",
            (false, Status::Success) => "success",
            (false, Status::Failed) => "failed",
            (false, Status::Retryable) => "retryable",
        };
        self.metrics.finished(&a.job, status, outcome.duration.as_secs_f64());
        info!(status, exit_code = ?outcome.exit_code, duration_ms = outcome.duration.as_millis() as u64, "job finished");
        let id = uuid::Uuid::now_v7().to_string();
        let result = AttemptResult {
            report_id: id.clone(),
            assignment_id: a.assignment_id.clone(),
            run_id: a.run_id,
            node: a.node,
            attempt: a.attempt,
            idempotency_key: a.idempotency_key,
            shard_index: a.shard_index,
            outcome: match outcome.status {
                Status::Success => Outcome::Success,
                Status::Failed => Outcome::Failed,
                Status::Retryable => Outcome::Retryable,
            } as i32,
            exit_code: outcome.exit_code,
            error: outcome.error,
            outputs_json: serde_json::Value::Object(outcome.outputs).to_string(),
            log_tail: outcome.log_tail,
            duration_ms: u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
            job: a.job,
            epoch: a.epoch,
        };
        self.report(&id, SidecarMessage { msg: Some(SidecarMsg::Result(result)) }).await;
        runner::remove_work_dir(&self.work_root, &a.assignment_id);
        self.leftovers.clear(&a.assignment_id);
        self.running().remove(&a.assignment_id);
    }
}

fn attempt_of(a: &Assignment) -> Attempt {
    Attempt {
        assignment_id: a.assignment_id.clone(),
        run_id: a.run_id.clone(),
        flow: a.flow.clone(),
        node: a.node.clone(),
        attempt: a.attempt,
        idempotency_key: a.idempotency_key.clone(),
        input: serde_json::from_str(&a.input_json).unwrap_or_else(|_| serde_json::json!({})),
        timeout: (a.timeout_ms > 0).then(|| Duration::from_millis(a.timeout_ms)),
        traceparent: (!a.traceparent.is_empty()).then(|| a.traceparent.clone()),
        shard: (a.shard_total > 0).then_some((a.shard_index, a.shard_total)),
        no_retry_exit_codes: a.no_retry_exit_codes.clone(),
    }
}

/// Forwards live output to the control plane in chunks of at most 32 KiB.
async fn forward_logs(shared: Arc<Shared>, assignment_id: String, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(mut data) = rx.recv().await {
        while data.len() < 32 * 1024 {
            match rx.try_recv() {
                Ok(more) => data.extend(more),
                Err(_) => break,
            }
        }
        let chunk = LogChunk { assignment_id: assignment_id.clone(), data };
        shared.send(SidecarMessage { msg: Some(SidecarMsg::Log(chunk)) }).await;
    }
}
