//! Madeira's sidecar: declares the jobs of its host, runs them as real processes
//! when the control plane assigns them over one long-lived gRPC stream, streams
//! their logs and results back, spools what cannot be delivered, and takes
//! `madeira exec` reports on a Unix socket.
//!
//! `Sidecar::new(options)` builds it; `run(cancel)` owns the link, the exec
//! socket and the jobs until `cancel`, then drains: no new work, running jobs get
//! `shutdown_grace` to finish, then SIGTERM (and SIGKILL after their grace).

pub mod access;
pub mod config;
pub mod daemon;
pub mod execsock;
mod leftovers;
mod link;
pub mod metrics;
pub mod runner;
mod slots;
pub mod spool;
pub mod template;
pub mod tls;
mod worker;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use access::{ExecPolicy, ObserveRule};
pub use config::{ConfigError, JobSpec, SidecarConfig};
pub use execsock::{ExecClient, ExecMessage};
pub use link::{LinkError, LinkOptions, backoff, endpoint as link_endpoint};
pub use metrics::SidecarMetrics;
pub use tls::{LinkTls, TlsSection};
pub use worker::Identity;

/// Errors building a sidecar.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    #[error(transparent)]
    Spool(#[from] spool::SpoolError),
}

/// Everything a sidecar needs, validated.
pub struct SidecarOptions {
    pub identity: Identity,
    pub link: LinkOptions,
    pub jobs: BTreeMap<String, JobSpec>,
    pub spool_dir: PathBuf,
    /// Unix socket for `madeira exec`; `None` for no socket.
    pub socket: Option<PathBuf>,
    /// Who may report on the socket, and to which flows.
    pub exec: ExecPolicy,
    /// On shutdown, how long running jobs may still finish before SIGTERM.
    pub shutdown_grace: Duration,
    /// Sidecar environment variables never passed to jobs (the token's).
    pub hide_env: Vec<String>,
    pub metrics: SidecarMetrics,
}

/// A cheap-to-clone view of a running sidecar.
#[derive(Clone)]
pub struct SidecarHandle {
    connected: watch::Receiver<bool>,
}

impl SidecarHandle {
    /// True while connected with the spool delivered.
    pub fn is_connected(&self) -> bool {
        *self.connected.borrow()
    }

    /// Waits until connected, or `timeout`; true when connected.
    pub async fn wait_connected(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.connected.wait_for(|c| *c)).await.is_ok_and(|r| r.is_ok())
    }
}

pub struct Sidecar {
    shared: Arc<worker::Shared>,
    link: LinkOptions,
    socket: Option<PathBuf>,
    shutdown_grace: Duration,
    connected: watch::Sender<bool>,
}

impl Sidecar {
    pub fn new(options: SidecarOptions) -> Result<Self, SidecarError> {
        // The spool directory holds the socket: others may traverse it (0711), not list it.
        spool::private_dir(&options.spool_dir, 0o711)?;
        let spool = std::sync::Arc::new(spool::Spool::open(
            &options.spool_dir.join("reports"),
            options.metrics.spool_pending.clone(),
        )?);
        let work_root = options.spool_dir.join("work");
        // Jobs run as another `user` must reach their own (0700) attempt directory.
        let switches_user = options.jobs.values().any(|j| j.user.is_some());
        spool::private_dir(&work_root, if switches_user { 0o711 } else { 0o700 })?;
        runner::clear_spares(&work_root);
        let leftovers = leftovers::Leftovers::open(&options.spool_dir.join("jobs"))?;
        let shared = worker::Shared::new(
            options.identity,
            options.jobs,
            (spool, leftovers),
            options.metrics,
            work_root,
            options.hide_env,
            access::ExecAccess::new(options.exec),
        );
        Ok(Self {
            shared: Arc::new(shared),
            link: options.link,
            socket: options.socket,
            shutdown_grace: options.shutdown_grace,
            connected: watch::Sender::new(false),
        })
    }

    pub fn handle(&self) -> SidecarHandle {
        SidecarHandle { connected: self.connected.subscribe() }
    }

    /// Runs until `cancel`, then shuts down gracefully. First stops the jobs an
    /// earlier process left running (`leftovers.rs`) and spools their attempts as
    /// lost, before any new work can come.
    pub async fn run(self, cancel: CancellationToken) {
        self.reclaim_leftovers().await;
        let link_cancel = CancellationToken::new();
        let link = tokio::spawn(link::run(
            self.shared.clone(),
            self.link.clone(),
            self.connected.clone(),
            link_cancel.clone(),
        ));
        let socket_cancel = CancellationToken::new();
        let socket = self.socket.clone().map(|path| {
            let (shared, cancel) = (self.shared.clone(), socket_cancel.clone());
            tokio::spawn(async move {
                if let Err(e) = execsock::serve(&path, shared, cancel).await {
                    warn!(socket = %path.display(), error = %e, "exec socket stopped");
                }
            })
        });
        cancel.cancelled().await;
        self.drain().await;
        socket_cancel.cancel();
        link_cancel.cancel();
        let _ = link.await;
        if let Some(socket) = socket {
            let _ = socket.await;
        }
        info!(spooled = self.shared.spool.len(), "sidecar stopped");
    }

    async fn reclaim_leftovers(&self) {
        let shared = &self.shared;
        let spooled: std::collections::HashSet<String> = shared
            .spool
            .pending()
            .into_iter()
            .filter_map(|(_, m)| match m.msg {
                Some(madeira_proto::SidecarMsg::Result(r)) => Some(r.assignment_id),
                _ => None,
            })
            .collect();
        let grace_of = |job: &str| shared.jobs.get(job).map(|j| j.grace);
        let results = shared.leftovers.reclaim(grace_of, |id| spooled.contains(id)).await;
        for result in results {
            let (id, assignment) = (result.report_id.clone(), result.assignment_id.clone());
            let msg = madeira_proto::SidecarMessage { msg: Some(madeira_proto::SidecarMsg::Result(result)) };
            if let Err(e) = shared.spool.put(&id, &msg) {
                error!(error = %e, "cannot spool the lost attempt of a leftover job on disk: it is kept in memory, and the leftover reclaimed again at the next start");
                continue;
            }
            shared.leftovers.clear(&assignment);
            let dir = shared.work_root.join(runner::work_dir_name(&assignment));
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    async fn drain(&self) {
        let shared = &self.shared;
        shared.draining.store(true, Ordering::Release);
        shared.tasks.close();
        let running = shared.running_count();
        if running > 0 {
            info!(running, grace = ?self.shutdown_grace, "shutting down: letting running jobs finish");
        }
        if tokio::time::timeout(self.shutdown_grace, shared.tasks.wait()).await.is_err() {
            warn!(running = shared.running_count(), "shutdown grace over: stopping running jobs");
            shared.cancel_all();
            shared.tasks.wait().await;
        }
        // Give the link a moment to deliver what the last jobs reported.
        let deadline = Instant::now() + Duration::from_secs(3);
        while !shared.spool.is_empty() && self.connected.borrow().to_owned() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
