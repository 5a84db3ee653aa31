//! The control plane's side of the sidecar link (SPEC §4, §9): the gRPC `Link`
//! service sidecars attach to with their group's token, the registry of sidecars
//! (declared jobs, heartbeats, lost after `sidecar_lost_after`), routing within a
//! group, and `SidecarExecutor`, the engine's executor for `sidecar` nodes.
//!
//! `Fleet::new` builds it; `Fleet::serve(listener, cancel)` (or `serve_incoming`, for
//! TLS connections) runs the gRPC server
//! and the lost-sidecar sweep; `executor()` plugs into `Executors.sidecar`, and
//! `attach_engine` lets it wake nodes waiting for a sidecar and record exec reports.

mod acks;
mod attach;
mod executor;
mod fencing;
mod kept_shards;
mod metrics;
mod observe;
mod presence;
mod provenance;
mod registry;
mod relay;
pub mod routing;
mod service;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use madeira_engine::EngineHandle;
use madeira_store::{FlowReader, PresenceStore, RunStore, Store};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use executor::SidecarExecutor;
pub use metrics::FleetMetrics;
pub use registry::SidecarInfo;

use madeira_proto::v1::Cancel;
use madeira_proto::{ControlMessage, ControlMsg};
use registry::State;

/// A group's token (SPEC §10); never printed.
#[derive(Clone)]
pub struct GroupToken {
    pub group: String,
    pub token: String,
}

impl std::fmt::Debug for GroupToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupToken").field("group", &self.group).finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// A sidecar silent this long is lost; its attempts move (default 30 s).
    pub lost_after: Duration,
    /// How often sidecars heartbeat.
    pub heartbeat: Duration,
    /// `None`: no authentication (dev, loopback only).
    pub tokens: Option<Vec<GroupToken>>,
    /// Other replicas share the store: tell them which sidecars are here.
    pub shared_store: bool,
    /// Most distinct observe flows `madeira exec` reports of one sidecar group
    /// may create or record into, whatever its sidecars' hellos say (default 100).
    pub observe_max_flows: usize,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            lost_after: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
            tokens: None,
            shared_store: false,
            observe_max_flows: observe::DEFAULT_MAX_FLOWS,
        }
    }
}

impl FleetOptions {
    /// Heartbeats a few times per `lost_after`.
    pub fn with_lost_after(lost_after: Duration) -> Self {
        let heartbeat = (lost_after / 6).clamp(Duration::from_millis(100), Duration::from_secs(5));
        Self { lost_after, heartbeat, ..Self::default() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

pub(crate) struct Inner {
    pub options: FleetOptions,
    pub state: Mutex<State>,
    /// Bumped on every change of who is live; executors waiting for a sidecar watch it.
    pub changed: watch::Sender<u64>,
    pub engine: OnceLock<Attached>,
    pub listener: OnceLock<Arc<dyn FleetListener>>,
    pub metrics: FleetMetrics,
    /// Observe flows per sidecar group (`observe.rs`).
    pub observed: observe::ObservedFlows,
    /// Fired when the server stops: every sidecar stream ends.
    pub shutdown: CancellationToken,
    /// Set on shutdown once the engine commits nothing more: reports are no longer
    /// taken (nor acknowledged), so they stay spooled for the next start.
    pub intake_closed: std::sync::atomic::AtomicBool,
}

/// The engine the fleet is attached to (derefs to its handle) and the store
/// aggregates the fleet uses by name: runs (read; kept shards written),
/// sidecar presence (this replica's report), flows (which are observe flows).
#[derive(Clone)]
pub(crate) struct Attached {
    pub handle: EngineHandle,
    pub runs: Arc<dyn RunStore>,
    pub presence: Arc<dyn PresenceStore>,
    pub flows: Arc<dyn FlowReader>,
}

impl std::ops::Deref for Attached {
    type Target = EngineHandle;

    fn deref(&self) -> &EngineHandle {
        &self.handle
    }
}

/// Told when a sidecar is lost (silent past `lost_after`) and when one attaches:
/// alerting raises and resolves its warning from these.
pub trait FleetListener: Send + Sync {
    fn sidecar_lost(&self, _name: &str, _group: &str, _lost_after: Duration) {}
    fn sidecar_attached(&self, _name: &str, _group: &str) {}
}

/// Cheap-to-clone handle on the fleet.
#[derive(Clone)]
pub struct Fleet {
    pub(crate) inner: Arc<Inner>,
}

impl Fleet {
    /// Builds the fleet; its metrics go on `registry`.
    pub fn new(options: FleetOptions, registry: &mut Registry) -> Self {
        Self::with_metrics(options, FleetMetrics::register(registry))
    }

    pub fn with_metrics(options: FleetOptions, metrics: FleetMetrics) -> Self {
        let inner = Inner {
            options,
            state: Mutex::new(State::default()),
            changed: watch::Sender::new(0),
            engine: OnceLock::new(),
            listener: OnceLock::new(),
            metrics,
            observed: observe::ObservedFlows::default(),
            shutdown: CancellationToken::new(),
            intake_closed: std::sync::atomic::AtomicBool::new(false),
        };
        Self { inner: Arc::new(inner) }
    }

    /// The engine to wake when sidecars come and to record exec reports with,
    /// and the store the fleet keeps its own state in (kept shards, sidecar
    /// presence) and reads runs and flows from.
    pub fn attach_engine(&self, engine: EngineHandle, store: Arc<dyn Store>) {
        let attached =
            Attached { handle: engine, runs: store.clone(), presence: store.clone(), flows: store };
        let _ = self.inner.engine.set(attached);
    }

    /// Stops taking results and reports (shutdown): they stay in the sidecars'
    /// spools, unacknowledged, and are delivered to the next control plane.
    pub fn close_intake(&self) {
        self.inner.intake_closed.store(true, std::sync::atomic::Ordering::Release);
    }

    pub(crate) fn intake_closed(&self) -> bool {
        self.inner.intake_closed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Who to tell about sidecars lost and attached (set once).
    pub fn set_listener(&self, listener: Arc<dyn FleetListener>) {
        let _ = self.inner.listener.set(listener);
    }

    pub(crate) fn listener(&self) -> Option<&Arc<dyn FleetListener>> {
        self.inner.listener.get()
    }

    /// The executor for `sidecar` nodes.
    pub fn executor(&self) -> Arc<dyn madeira_engine::Executor> {
        Arc::new(SidecarExecutor::new(self.clone()))
    }

    /// Every known sidecar, for the fleet view.
    pub fn sidecars(&self) -> Vec<SidecarInfo> {
        self.state().info()
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Who is live changed: wake waiting executors, the engine and the gauges.
    pub(crate) fn notify(&self) {
        self.inner.changed.send_modify(|n| *n = n.wrapping_add(1));
        let counts = self.state().connected_by_group();
        for (group, n) in counts {
            self.inner.metrics.connected(&group, n);
        }
        if let Some(engine) = self.inner.engine.get() {
            let engine = engine.clone();
            tokio::spawn(async move {
                let _ = engine.executors_changed().await;
            });
        }
    }

    /// Serves the link on `listener` and sweeps for lost sidecars until `cancel`.
    /// Every accepted connection gets TCP_NODELAY: tonic's `tcp_nodelay` applies
    /// only to listeners it binds itself, and without it each small report waits
    /// for Nagle and the peer's delayed ACK (~40 ms per node).
    pub async fn serve(self, listener: TcpListener, cancel: CancellationToken) -> Result<(), FleetError> {
        use tokio_stream::StreamExt as _;
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|accepted| {
            if let Ok(stream) = &accepted
                && let Err(e) = stream.set_nodelay(true)
            {
                warn!(error = %e, "cannot set TCP_NODELAY on a sidecar link connection");
            }
            accepted
        });
        self.serve_incoming(incoming, cancel).await
    }

    /// As `serve`, on connections accepted elsewhere (e.g. after a TLS handshake;
    /// `TlsStream` carries the peer's certificates for tonic).
    pub async fn serve_incoming<I, IO, IE>(
        self,
        incoming: I,
        cancel: CancellationToken,
    ) -> Result<(), FleetError>
    where
        I: futures::Stream<Item = Result<IO, IE>>,
        IO: tonic::transport::server::Connected + tokio::io::AsyncRead + tokio::io::AsyncWrite,
        IO: Unpin + Send + 'static,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let sweep = tokio::spawn(self.clone().sweep(cancel.clone()));
        let acks = tokio::spawn(self.clone().acknowledge_commits(cancel.clone()));
        let presence = self
            .inner
            .options
            .shared_store
            .then(|| tokio::spawn(self.clone().publish_presence(cancel.clone())));
        let service =
            madeira_proto::v1::link_server::LinkServer::new(service::LinkService::new(self.clone()));
        let server = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, cancel.clone().cancelled_owned());
        tokio::pin!(server);
        let shutdown = self.inner.shutdown.clone();
        let result = tokio::select! {
            result = &mut server => result,
            _ = async {
                cancel.cancelled().await;
                shutdown.cancel();
                tokio::time::sleep(Duration::from_secs(3)).await;
            } => {
                warn!("sidecar streams did not close within 3s of shutdown; leaving them");
                Ok(())
            }
        };
        let _ = sweep.await;
        let _ = acks.await;
        if let Some(presence) = presence {
            let _ = presence.await;
        }
        Ok(result?)
    }

    /// Declares silent sidecars lost, cancels unclaimed orphans, expires the inbox.
    async fn sweep(self, cancel: CancellationToken) {
        let lost_after = self.inner.options.lost_after;
        let mut tick = tokio::time::interval((lost_after / 4).max(Duration::from_millis(50)));
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let mut cancels = Vec::new();
            let lost: Vec<(String, String)> = {
                let mut state = self.state();
                let lost: Vec<(String, String)> = state
                    .sidecars
                    .iter()
                    .filter(|(_, s)| s.last_seen.elapsed() > lost_after)
                    .map(|(name, s)| (name.clone(), s.group.clone()))
                    .collect();
                for (name, _) in &lost {
                    state.sidecars.remove(name);
                    state.lose(name);
                }
                let stale: Vec<(String, u32)> = state
                    .orphans
                    .iter()
                    .filter(|(_, o)| o.since.elapsed() > lost_after)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in stale {
                    if let Some(o) = state.orphans.remove(&key)
                        && let Some(tx) = state.sidecars.get(&o.sidecar).and_then(|s| s.tx.clone())
                    {
                        cancels.push((tx, o.assignment_id));
                    }
                }
                state.inbox.retain(|_, (_, at)| at.elapsed() < registry::INBOX_TTL);
                state.epochs.retain(|_, (_, at)| at.elapsed() < registry::INBOX_TTL);
                lost
            };
            self.sweep_store(acks::RECHECK_AFTER).await;
            for (tx, assignment_id) in cancels {
                let reason = "nobody claimed this attempt after the control plane restarted".to_string();
                let msg = ControlMessage { msg: Some(ControlMsg::Cancel(Cancel { assignment_id, reason })) };
                let _ = tx.send(Ok(msg)).await;
            }
            for (name, group) in &lost {
                warn!(sidecar = %name, group = %group, lost_after = ?lost_after, "sidecar lost; its attempts move to another sidecar of the group");
                if let Some(listener) = self.listener() {
                    listener.sidecar_lost(name, group, lost_after);
                }
            }
            if !lost.is_empty() {
                for (_, group) in &lost {
                    self.inner.metrics.connected(group, 0);
                }
                self.notify();
            }
        }
    }

    /// Waits until a sidecar of `group` declaring `job` is live, or `timeout`.
    pub async fn wait_live(&self, group: &str, job: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut changed = self.inner.changed.subscribe();
        loop {
            if self.state().sidecars.values().any(|s| s.live() && s.group == group && s.declares(job)) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, changed.changed()).await.is_err() {
                return false;
            }
        }
    }
}

/// Logs once that the link is up (used by the binary).
pub fn announce(addr: std::net::SocketAddr) {
    info!(grpc = %addr, "sidecar link listening");
}
