//! The control plane's sidecar parts: the gRPC link (fleet) on a bound listener,
//! and in `dev`/`demo`/`bench` an in-process sidecar of group `local` that
//! connects to it like any other sidecar and serves the exec socket.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use madeira_fleet::{Fleet, FleetOptions};
use madeira_sidecar::{
    Identity, JobSpec, LinkOptions, Sidecar, SidecarHandle, SidecarMetrics, SidecarOptions,
};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::tls::TlsListener;

/// How to run the sidecar link.
#[derive(Debug, Clone)]
pub struct FleetSetup {
    pub grpc: SocketAddr,
    pub options: FleetOptions,
    /// Terminate TLS (mTLS when it verifies client certificates) on the link.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Run an in-process sidecar of group `local` with these jobs.
    pub local: Option<LocalSidecar>,
}

/// The in-process sidecar of `dev`, `demo` and `bench`.
#[derive(Debug, Clone)]
pub struct LocalSidecar {
    pub jobs: BTreeMap<String, JobSpec>,
    /// Spool and per-attempt work directories.
    pub dir: PathBuf,
    /// `madeira exec` socket.
    pub socket: Option<PathBuf>,
}

/// What runs once the link is up.
pub struct FleetParts {
    pub fleet: Fleet,
    pub grpc_addr: SocketAddr,
    pub local: Option<SidecarHandle>,
    local_cancel: CancellationToken,
    local_task: Option<JoinHandle<()>>,
}

impl FleetParts {
    /// Drains the in-process sidecar (running jobs finish or are stopped).
    pub async fn stop_local_sidecar(mut self) {
        self.local_cancel.cancel();
        if let Some(task) = self.local_task.take() {
            let _ = task.await;
        }
    }
}

/// Binds the gRPC endpoint, serves the fleet, and starts the local sidecar.
pub async fn start(
    fleet: Fleet,
    setup: FleetSetup,
    registry: &mut Registry,
    cancel: &CancellationToken,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Result<FleetParts> {
    let listener =
        TcpListener::bind(setup.grpc).await.map_err(Error::io(format!("binding gRPC {}", setup.grpc)))?;
    let grpc_addr = listener.local_addr().map_err(Error::io("reading the gRPC address"))?;
    madeira_fleet::announce(grpc_addr);
    let serving = fleet.clone();
    let shutdown = cancel.clone();
    let tls = setup.tls.clone();
    tasks.push(tokio::spawn(async move {
        let served = match tls {
            Some(config) => {
                let incoming = TlsListener::new(listener, config, "grpc").into_stream();
                serving.serve_incoming(incoming, shutdown).await
            }
            None => serving.serve(listener, shutdown).await,
        };
        if let Err(e) = served {
            tracing::error!(error = %e, "sidecar link stopped");
        }
    }));
    let local_cancel = CancellationToken::new();
    let (local, local_task) = match setup.local {
        Some(local) => {
            let sidecar = local_sidecar(local, grpc_addr, registry)?;
            let handle = sidecar.handle();
            let task = tokio::spawn(sidecar.run(local_cancel.clone()));
            (Some(handle), Some(task))
        }
        None => (None, None),
    };
    Ok(FleetParts { fleet, grpc_addr, local, local_cancel, local_task })
}

fn local_sidecar(local: LocalSidecar, grpc: SocketAddr, registry: &mut Registry) -> Result<Sidecar> {
    let options = SidecarOptions {
        identity: Identity {
            name: format!("local@{}", madeira_sidecar::config::host_name()),
            group: "local".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        link: LinkOptions {
            endpoint: format!("http://{grpc}"),
            token: None,
            tls: None,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
        },
        jobs: local.jobs,
        spool_dir: local.dir,
        socket: local.socket,
        // `dev` is loopback-only without auth: its sidecar observes any flow.
        exec: madeira_sidecar::ExecPolicy::owner_only(vec![madeira_sidecar::ObserveRule::parse("*")]),
        shutdown_grace: Duration::from_secs(10),
        hide_env: Vec::new(),
        metrics: SidecarMetrics::register(registry),
    };
    Sidecar::new(options).map_err(Error::Sidecar)
}

/// Reads the `jobs:` map of a sidecar config (what `dev --jobs FILE` takes).
pub fn load_jobs(path: &std::path::Path) -> Result<BTreeMap<String, JobSpec>, crate::error::ConfigError> {
    let file = path.display().to_string();
    let bad =
        |e: madeira_sidecar::ConfigError| crate::error::ConfigError { file: e.file, message: e.message };
    let text = crate::files::read_text(path, crate::files::Confine::Anywhere)
        .map_err(|e| crate::error::ConfigError { file: file.clone(), message: e.problem.to_string() })?;
    let config = madeira_sidecar::SidecarConfig::parse(&file, &text).map_err(bad)?;
    config.jobs(&file).map_err(bad)
}

/// Sidecars lost and back, as alerts (SPEC §7: a `warning` for a lost sidecar,
/// resolved when it attaches again).
pub struct SidecarAlerts(pub madeira_alert::AlertHandle);

fn lost_key(name: &str) -> String {
    format!("sidecar_lost|{name}")
}

impl madeira_fleet::FleetListener for SidecarAlerts {
    fn sidecar_lost(&self, name: &str, group: &str, lost_after: Duration) {
        let labels = BTreeMap::from([
            ("group".to_string(), group.to_string()),
            ("sidecar".to_string(), name.to_string()),
        ]);
        self.0.raise(madeira_alert::Raise {
            key: lost_key(name),
            alertname: "MadeiraSidecarLost".into(),
            severity: madeira_alert::Severity::Warning,
            flow: None,
            node: None,
            labels,
            summary: format!("sidecar {name} of group {group} is lost: no heartbeat for {lost_after:?}"),
            description: Some(
                "its attempts move to another sidecar of the group; jobs of the group wait in INIT while none is live"
                    .into(),
            ),
            run_id: None,
            fallback_note: None,
            held_by: None,
        });
    }

    fn sidecar_attached(&self, name: &str, _group: &str) {
        self.0.resolve(&lost_key(name));
    }
}
