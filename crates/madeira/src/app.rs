//! Assembles a control plane — store, engine, HTTP API — so `serve`, `dev`, the demo,
//! the benchmark and tests all build the same thing. One shutdown path: cancel the
//! token, the server drains, the engine stops.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use madeira_engine::{EngineHandle, EngineObserver, EngineOptions, Executors};
use madeira_server::{AppState, AuthConfig};
use madeira_store::Store;
use madeira_store::postgres::PostgresStore;
use madeira_store::sqlite::SqliteStore;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub struct ControlPlane {
    pub engine: EngineHandle,
    pub http_addr: Option<SocketAddr>,
    pub cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

pub struct PlaneOptions {
    pub store_url: String,
    /// Metrics, alerts: told about every committed change.
    pub observers: Vec<Arc<dyn EngineObserver>>,
    pub engine: EngineOptions,
    pub auth: AuthConfig,
    /// Serve the API here (`None`: engine only).
    pub http: Option<SocketAddr>,
}

/// Opens the store named by `url` (`sqlite://…` or `postgres://…`/`postgresql://…`)
/// and applies its migrations.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>> {
    if url.starts_with("sqlite:") {
        let store = SqliteStore::open(url).await.with_context(|| format!("opening store {url}"))?;
        return Ok(Arc::new(store));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store =
            PostgresStore::open(url).await.with_context(|| format!("opening store {}", redact(url)))?;
        return Ok(Arc::new(store));
    }
    anyhow::bail!("store `{}`: use sqlite:///path/madeira.db or postgres://user@host/db", redact(url))
}

/// `url` without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// The SQLite URL of `madeira.db` inside `dir` (created if needed).
pub fn sqlite_url_in(dir: &Path) -> Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating data directory {}", dir.display()))?;
    let dir = dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
    Ok(format!("sqlite://{}", dir.join("madeira.db").display()))
}

impl ControlPlane {
    pub async fn start(options: PlaneOptions) -> Result<Self> {
        let store = open_store(&options.store_url).await?;
        let executors = Executors::new(options.engine.http.clone());
        let (engine, handle) = madeira_engine::build(store, executors, options.observers, options.engine);
        let cancel = CancellationToken::new();
        let mut tasks = Vec::new();
        let engine_cancel = cancel.clone();
        tasks.push(tokio::spawn(engine.run(engine_cancel)));
        let mut http_addr = None;
        if let Some(addr) = options.http {
            let listener = TcpListener::bind(addr).await.with_context(|| format!("binding HTTP {addr}"))?;
            http_addr = Some(listener.local_addr()?);
            let state = AppState::new(handle.clone(), options.auth);
            state.mark_ready();
            let shutdown = cancel.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = madeira_server::serve(listener, state, shutdown).await {
                    tracing::error!(error = %e, "HTTP server stopped");
                }
            }));
        }
        Ok(Self { engine: handle, http_addr, cancel, tasks })
    }

    /// Applies every `*.yaml`/`*.yml` file in `dir`; the first invalid one aborts.
    pub async fn apply_dir(&self, dir: &Path) -> Result<usize> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("reading flows directory {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for file in &files {
            let source =
                std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
            self.engine
                .apply_flow(&file.display().to_string(), &source)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        Ok(files.len())
    }

    /// Stops the server and the engine and waits for them.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
