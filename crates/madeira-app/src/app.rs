//! Assembles a control plane — telemetry, store, engine, HTTP API — so `serve`,
//! `dev`, the demo, the benchmark and tests all build the same thing. One shutdown
//! path (SPEC §4.1): the API and the scheduler stop and the engine drains (no new
//! attempts); in-process attempts get `shutdown_grace` to finish and the
//! in-process sidecar its own grace; sidecar attempts are never cancelled (their
//! sidecars spool the results for the next start); then the link stops taking
//! results, everything stops, and spans are flushed last.
//!
//! Metrics: `Telemetry` owns the one Prometheus registry of the process; every
//! component registers its families on `telemetry.registry_mut()` in `start`
//! before it is frozen into the `/metrics` exposition.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use madeira_alert::{AlertHandle, AlertMetrics, SystemClock};
use madeira_engine::{EngineHandle, EngineObserver, EngineOptions, Executors};
use madeira_server::{AppState, AuthConfig};
use madeira_store::mysql::MySqlStore;
use madeira_store::postgres::PostgresStore;
use madeira_store::sqlite::SqliteStore;
use madeira_store::{AlertStore, RunQuery, Store};
use madeira_telemetry::{MetricsObserver, Telemetry, TelemetryOptions};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Resolves on SIGINT or SIGTERM (shared with the sidecar daemon).
pub use madeira_sidecar::daemon::shutdown_signal;

pub struct ControlPlane {
    pub engine: EngineHandle,
    pub http_addr: Option<SocketAddr>,
    pub cancel: CancellationToken,
    /// Fired first on shutdown: no new work (API, scheduler, dispatches).
    drain: CancellationToken,
    shutdown_grace: std::time::Duration,
    /// `/metrics` exposition and the span exporter.
    pub telemetry: madeira_telemetry::Running,
    tasks: Vec<JoinHandle<()>>,
    /// The sidecar link, when enabled.
    pub fleet: Option<crate::sidecars::FleetParts>,
    /// The store the engine writes: the API and console get only its readers
    /// (`madeira_server::Reads`); the binary's `bench` and `demo` measure and
    /// show it directly.
    pub store: Arc<dyn Store>,
}

pub struct PlaneOptions {
    pub store_url: String,
    /// Metrics, alerts: told about every committed change.
    pub observers: Vec<Arc<dyn EngineObserver>>,
    pub engine: EngineOptions,
    pub auth: AuthConfig,
    /// Serve the API here (`None`: engine only).
    pub http: Option<SocketAddr>,
    /// Serve it over TLS with this config (`None`: plain HTTP).
    pub http_tls: Option<Arc<rustls::ServerConfig>>,
    /// Alert channels and routes; without channels alerts are only recorded.
    pub alerts: madeira_alert::Settings,
    /// Metrics, traces, log filter control.
    pub telemetry: TelemetryOptions,
    /// The gRPC endpoint for sidecars and the in-process sidecar (`None`: no sidecars).
    pub fleet: Option<crate::sidecars::FleetSetup>,
    /// On shutdown, how long in-process (http, builtin) attempts may finish.
    pub shutdown_grace: std::time::Duration,
    /// SQL datasources (`datasources:` of the server config).
    pub datasources: Vec<madeira_sql::DatasourceConfig>,
    /// Message brokers that flows' `message:` triggers consume.
    pub sources: Vec<madeira_sources::SourceConfig>,
    /// The scheduler's wall clock (`None`: the system's; `dev --clock-start` moves it).
    pub scheduler_clock: Option<madeira_engine::WallClock>,
    /// XXL-JOB executors' admin side (`xxl_job:` of the server config).
    pub xxl: Option<madeira_xxl::XxlOptions>,
}

/// Opens the store named by `url` (`sqlite://…`, `postgres://…`/`postgresql://…` or
/// `mysql://…`, MySQL 8 or MariaDB ≥ 10.6) and applies its migrations: run state, and the alert aggregate on the same
/// database.
pub async fn open_store(url: &str) -> Result<(Arc<dyn Store>, Arc<dyn AlertStore>)> {
    if url.starts_with("sqlite:") {
        let store = Arc::new(SqliteStore::open(url).await.map_err(store_error(url))?);
        return Ok((store.clone(), store));
    }
    if is_postgres(url) {
        let store = Arc::new(PostgresStore::open(url).await.map_err(store_error(url))?);
        return Ok((store.clone(), store));
    }
    if is_mysql(url) {
        let store = Arc::new(MySqlStore::open(url).await.map_err(store_error(url))?);
        return Ok((store.clone(), store));
    }
    Err(Error::StoreUrl(redact(url)))
}

fn store_error(url: &str) -> impl FnOnce(madeira_store::StoreError) -> Error {
    let url = redact(url);
    move |source| Error::Store { url, source }
}

/// True for a PostgreSQL store URL.
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// True for a MySQL/MariaDB store URL.
pub fn is_mysql(url: &str) -> bool {
    url.starts_with("mysql://")
}

/// True for a store that several replicas may share (PostgreSQL, MySQL/MariaDB):
/// leases, fenced commits, permits and the alert leader are kept there.
pub fn is_shared_store(url: &str) -> bool {
    is_postgres(url) || is_mysql(url)
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

/// The SQLite URL of `madeira.db` inside `dir`. A directory this creates is 0711
/// (others may reach the in-process sidecar's socket by name, not list it) and a
/// store file it creates is 0600, which SQLite gives its `-wal` and `-shm` files
/// too: runs' params and outputs are closed to other users. What already exists
/// keeps the mode it has.
pub fn sqlite_url_in(dir: &Path) -> Result<String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(dir)
        .map_err(Error::io(format!("creating data directory {}", dir.display())))?;
    let dir = dir.canonicalize().map_err(Error::io(format!("resolving {}", dir.display())))?;
    let file = dir.join("madeira.db");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&file)
        .map_err(Error::io(format!("creating the store file {}", file.display())))?;
    Ok(format!("sqlite://{}", file.display()))
}

impl ControlPlane {
    /// Starts the control plane, serving the API on `options.http` when it is set.
    pub async fn start(options: PlaneOptions) -> Result<Self> {
        Self::assemble(options, None).await
    }

    /// Starts the control plane serving the API on a listener already bound
    /// (`options.http` is not used): tests bind `127.0.0.1:0` and know the port.
    pub async fn start_on(options: PlaneOptions, listener: TcpListener) -> Result<Self> {
        Self::assemble(options, Some(listener)).await
    }

    async fn assemble(options: PlaneOptions, bound: Option<TcpListener>) -> Result<Self> {
        let mut telemetry = Telemetry::new(&options.telemetry).map_err(Error::Telemetry)?;
        let (store, alert_store) = open_store(&options.store_url).await?;
        if options.telemetry.metrics {
            seed_last_success(store.as_ref(), telemetry.metrics_observer()).await;
        }
        let listener = match (bound, options.http) {
            (Some(listener), _) => Some(listener),
            (None, Some(addr)) => {
                Some(TcpListener::bind(addr).await.map_err(Error::io(format!("binding HTTP {addr}")))?)
            }
            (None, None) => None,
        };
        let http_addr = listener
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()
            .map_err(Error::io("reading the HTTP address"))?;
        // Components register their metric families on the one registry before it is frozen.
        let api_url = http_addr.map(|addr| api_url(addr, options.http_tls.is_some()));
        // A server without tokens also answers requests addressed to the alerts' link host.
        let public_host = options.alerts.external_url.as_deref().and_then(url_host);
        let serve_options =
            madeira_server::ServeOptions::for_auth(&options.auth).with_public_names(public_host);
        let (mut alert_task, alerts) =
            build_alerts(options.alerts, alert_store, api_url, telemetry.registry_mut())?;
        // Open stall and slow warnings are checked against the runs they count.
        alert_task = alert_task.with_probe(Arc::new(madeira_alert::StoreProbe(store.clone())));
        let mut observers = options.observers;
        if options.engine.shared_store {
            // Replicas may share this store: one of them aggregates and sends alerts,
            // and runs' ends reach its inbox inside each engine's commit.
            alert_task = alert_task.clustered(options.engine.replica_id.clone(), options.engine.lease);
            observers.push(alerts.cluster_observer());
        } else {
            observers.push(alerts.observer());
        }
        observers.extend(telemetry.observers());
        let mut executors = Executors::new(options.engine.http.clone());
        let fleet = options
            .fleet
            .as_ref()
            .map(|setup| madeira_fleet::Fleet::new(setup.options.clone(), telemetry.registry_mut()));
        executors.sidecar = fleet.as_ref().map(|f| f.executor());
        // Flows applied here must name these datasources (the SQL executor's).
        let datasources: Vec<String> = options.datasources.iter().map(|d| d.name.clone()).collect();
        let sql = if options.datasources.is_empty() {
            None
        } else {
            let sql = madeira_sql::SqlExecutor::new(options.datasources, telemetry.registry_mut())?;
            tracing::info!(datasources = ?datasources, "SQL datasources configured (pools connect on first use)");
            Some(Arc::new(sql))
        };
        executors.sql = sql.clone().map(|s| s as Arc<dyn madeira_engine::Executor>);
        let xxl = match options.xxl {
            Some(opts) => Some(madeira_xxl::Xxl::new(opts, store.clone(), telemetry.registry_mut())?),
            None => None,
        };
        executors.xxl = xxl.as_ref().map(madeira_xxl::Xxl::executor);
        let redis_url = options.engine.redis.clone();
        crate::calendars::register_metrics(&options.engine.calendars, telemetry.registry_mut());
        let engine_options = EngineOptions { tracing: telemetry.tracing(), datasources, ..options.engine };
        let (engine, handle) =
            madeira_engine::build(store.clone(), executors, observers.clone(), engine_options);
        if let Some(xxl) = &xxl {
            xxl.attach_engine(handle.clone());
            tracing::info!(prefix = xxl.prefix(), apps = ?xxl.apps(), "XXL-JOB admin endpoints on");
        }
        let cancel = CancellationToken::new();
        let drain = CancellationToken::new();
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(engine.run_until(drain.clone(), cancel.clone())));
        if let Some(xxl) = &xxl {
            tasks.push(tokio::spawn(xxl.clone().keep_registry(cancel.clone())));
        }
        tasks.push(tokio::spawn(alert_task.run(cancel.clone())));
        // Calendars applied through the API live in the store: read them before
        // the scheduler plans, then every few seconds (another replica may apply).
        if let Err(e) = handle.refresh_calendars().await {
            tracing::warn!(error = %e, "cannot read the applied calendars yet; trying again in the background");
        }
        tasks.push(tokio::spawn(
            handle.clone().watch_calendars(std::time::Duration::from_secs(5), drain.clone()),
        ));
        let deadlines = madeira_engine::DeadlineWatcher::new(handle.clone(), observers.clone());
        tasks.push(tokio::spawn(deadlines.run(drain.clone())));
        let durations = madeira_engine::DurationWatcher::new(handle.clone(), observers.clone());
        tasks.push(tokio::spawn(durations.run(drain.clone())));
        let mut scheduler = madeira_engine::Scheduler::new(handle.clone(), observers);
        if let Some(wall) = options.scheduler_clock.clone() {
            scheduler = scheduler.with_wall_clock(wall);
        }
        tasks.push(tokio::spawn(scheduler.run(drain.clone())));
        // Events kept for paused flows: started on resume, and what a crash or
        // another replica's resume left, within seconds.
        tasks.push(tokio::spawn(madeira_engine::EventDrainer::new(handle.clone()).run(drain.clone())));
        let fleet = match (fleet, options.fleet) {
            (Some(fleet), Some(setup)) => {
                fleet.attach_engine(handle.clone(), store.clone());
                fleet.set_listener(Arc::new(crate::sidecars::SidecarAlerts(alerts.clone())));
                let registry = telemetry.registry_mut();
                Some(crate::sidecars::start(fleet, setup, registry, &cancel, &mut tasks).await?)
            }
            _ => None,
        };
        let source_metrics = (!options.sources.is_empty())
            .then(|| madeira_sources::SourceMetrics::register(telemetry.registry_mut()));
        let telemetry = telemetry.finish();
        let mut state = AppState::new(handle.clone(), madeira_server::Reads::of(&store), options.auth)
            .with_alerts(alerts.clone())
            .with_metrics(telemetry.exposition.clone())
            .with_shutdown(drain.clone());
        if let Some(sql) = &sql {
            state = state.with_datasources(sql.clone());
        }
        if let Some(url) = &redis_url {
            state = state.with_redis(url);
        }
        if let Some(metrics) = source_metrics {
            let setup =
                crate::sources::Setup { configs: options.sources, metrics, alerts, state: state.clone() };
            let view = crate::sources::start(setup, &drain, &mut tasks);
            state = state.with_sources(view);
        }
        if let Some(listener) = listener {
            if let Some(parts) = &fleet {
                state = state.with_fleet(parts.fleet.clone());
            }
            if let Some(xxl) = xxl.clone() {
                state = state.with_xxl(Arc::new(move || xxl.view()));
            }
            if let Some(control) = options.telemetry.log_control.clone() {
                state = state.with_log_control(control);
            }
            state.mark_ready();
            let shutdown = drain.clone();
            let tls = options.http_tls.clone();
            // The web console under `/`, over the same state as the API.
            let console = madeira_console::Console::new(
                state.clone(),
                store.clone(),
                madeira_console::ConsoleOptions {
                    secure_cookies: tls.is_some(),
                    shutdown: cancel.clone(),
                    ..Default::default()
                },
            );
            let mut app = madeira_server::router(state).merge(madeira_console::router(console));
            if let Some(xxl) = &xxl {
                app = app.merge(xxl.router());
            }
            tasks.push(tokio::spawn(async move {
                let served = match tls {
                    Some(config) => {
                        let listener = crate::tls::TlsListener::new(listener, config, "http");
                        madeira_server::serve_router(listener, app, shutdown, serve_options).await
                    }
                    None => madeira_server::serve_router(listener, app, shutdown, serve_options).await,
                };
                if let Err(e) = served {
                    tracing::error!(error = %e, "HTTP server stopped");
                }
            }));
        }
        let shutdown_grace = options.shutdown_grace;
        Ok(Self { engine: handle, http_addr, cancel, drain, shutdown_grace, telemetry, tasks, fleet, store })
    }

    /// Applies every `*.yaml`/`*.yml` flow file in `dir` (calendar files, read at
    /// start by `calendars::load`, are left out); the first invalid one aborts.
    pub async fn apply_dir(&self, dir: &Path) -> Result<usize> {
        let files = crate::files::yaml_files(dir)
            .map_err(|source| Error::Dir { what: "reading the flows directory", source })?;
        let mut sources = Vec::with_capacity(files.len());
        for file in &files {
            let source = crate::files::read_text(file, crate::files::Confine::Within(dir))?;
            if crate::calendars::is_calendar_file(&source) {
                continue;
            }
            sources.push((file.display().to_string(), source));
        }
        // Upstream flows (`after`, `flow_succeeded`) first; a file that does not
        // parse keeps its place and fails on apply with its own errors.
        let names: Vec<Option<String>> =
            sources.iter().map(|(f, s)| madeira_core::spec::parse_flow(f, s).ok().map(|d| d.name)).collect();
        let estate = madeira_core::estate::Estate::new(sources.iter().filter_map(|(f, s)| {
            madeira_core::spec::parse_flow(f, s)
                .ok()
                .map(|d| madeira_core::estate::EstateFlow::from_def(f, &d))
        }));
        let order = estate.topo();
        let mut indexed: Vec<usize> = (0..sources.len()).collect();
        indexed.sort_by_key(|&i| names[i].as_ref().and_then(|n| order.iter().position(|o| o == n)));
        for i in indexed {
            let (file, source) = &sources[i];
            self.engine.apply_flow(file, source).await.map_err(Error::Flow)?;
        }
        Ok(sources.len())
    }

    /// Shuts down gracefully (see the module doc) and waits for every part.
    pub async fn shutdown(mut self) {
        self.drain.cancel();
        let parts = self.fleet.take();
        let fleet = parts.as_ref().map(|p| p.fleet.clone());
        let in_process = self.engine.stats().in_process();
        if in_process > 0 {
            tracing::info!(in_process, grace = ?self.shutdown_grace, "shutting down: letting in-process attempts finish");
        }
        let attempts = async {
            if !self.engine.stats().wait_in_process_idle(self.shutdown_grace).await {
                tracing::warn!(
                    left = self.engine.stats().in_process(),
                    "shutdown_grace over: aborting in-process attempts (the next start retries them)"
                );
            }
        };
        let local = async {
            if let Some(parts) = parts {
                parts.stop_local_sidecar().await;
            }
        };
        tokio::join!(attempts, local);
        if let Some(fleet) = fleet {
            // Results from now on stay in the sidecars' spools for the next start.
            fleet.close_intake();
        }
        self.cancel.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
        self.telemetry.shutdown();
    }
}

/// Sets each flow's last-success gauge from the store, so the "has not
/// succeeded within its interval" alert holds across restarts.
async fn seed_last_success(store: &dyn Store, observer: &MetricsObserver) {
    let flows = match store.list_flows().await {
        Ok(flows) => flows,
        Err(e) => {
            tracing::warn!(error = %e, "cannot seed last-success metrics");
            return;
        }
    };
    for flow in flows {
        let query = RunQuery {
            flow: Some(flow.name.clone()),
            state: Some("SUCCESS".into()),
            limit: 1,
            ..Default::default()
        };
        if let Ok(runs) = store.list_runs(&query).await
            && let Some(at) = runs.first().and_then(|r| r.finished_at)
        {
            observer.seed_last_success(&flow.name, at as f64 / 1000.0);
        }
    }
}

/// The host of `url` (`https://host:port/path` → `host`).
fn url_host(url: &str) -> Option<String> {
    let authority = url.split_once("://")?.1.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host: axum::http::uri::Authority = authority.parse().ok()?;
    Some(host.host().trim_start_matches('[').trim_end_matches(']').to_string())
}

/// The API's own address and base URL (`https://` when it serves TLS).
fn api_url(addr: SocketAddr, tls: bool) -> (SocketAddr, String) {
    (addr, format!("{}://{addr}", if tls { "https" } else { "http" }))
}

/// The alert component; run links default to the API's own address.
fn build_alerts(
    mut settings: madeira_alert::Settings,
    store: Arc<dyn AlertStore>,
    api_url: Option<(SocketAddr, String)>,
    registry: &mut prometheus_client::registry::Registry,
) -> Result<(madeira_alert::AlertTask, AlertHandle)> {
    if settings.external_url.is_none() {
        match api_url {
            Some((addr, url)) if !addr.ip().is_unspecified() => settings.external_url = Some(url),
            Some(_) if !settings.channels.is_empty() => {
                tracing::warn!("alerts.external_url is not set: alert messages carry run ids without links")
            }
            _ => {}
        }
    }
    let metrics = AlertMetrics::register(registry);
    Ok(madeira_alert::build(settings, store, metrics, Arc::new(SystemClock))?)
}

#[cfg(test)]
mod tests {
    use super::url_host;

    #[test]
    fn url_host_is_the_host_without_port_credentials_or_path() {
        assert_eq!(url_host("https://madeira.example:8443/x?y").as_deref(), Some("madeira.example"));
        assert_eq!(url_host("http://u:p@[::1]:7070").as_deref(), Some("::1"));
        assert_eq!(url_host("madeira.example"), None);
    }
}
