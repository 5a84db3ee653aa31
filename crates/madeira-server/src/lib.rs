//! Madeira's REST API (SPEC §9): axum routes over the engine handle (every write)
//! and the store's readers (`Reads`), bearer-token auth with roles, JSON errors
//! `{"error": {code, message, details}}`, and the health endpoints. `serve` runs
//! it on an already-bound listener.

mod auth;
mod authlimit;
pub mod detail;
mod error;
mod guard;
mod ratelimit;
mod rejections;
mod routes;
pub mod schema;
mod scope;
mod serve;
mod shared;
mod views;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use madeira_engine::EngineHandle;
use madeira_store::{AuditStore, FlowReader, PresenceReader, RunReader, Store};
use tokio_util::sync::CancellationToken;

pub use auth::{AuthConfig, Caller, Role, TokenEntry};
pub use error::ApiError;
pub use routes::alerts::mark_alert;
pub use routes::follow::{FollowRequest, follow_node, resume_offset};
pub use scope::{visible_flow, visible_flow_names};
pub use serve::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS, ServeOptions};
pub use views::render_prompt;

/// The OpenAPI 3.1 document of `/api/v1` (also served at `GET /api/v1/openapi.json`).
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes::openapi::spec()
}

/// The paths the router serves under `/api/v1` (relative, `{param}` templates):
/// what the OpenAPI route test probes.
pub fn api_paths() -> Vec<&'static str> {
    routes::api_routes().into_iter().map(|(path, _)| path).collect()
}

/// Largest request body accepted (flow YAML, params, events).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The store's read side the API and the console use, by aggregate. Neither
/// writes the store: every write goes through the engine handle.
#[derive(Clone)]
pub struct Reads {
    pub flows: Arc<dyn FlowReader>,
    pub runs: Arc<dyn RunReader>,
    pub audit: Arc<dyn AuditStore>,
    pub presence: Arc<dyn PresenceReader>,
}

impl Reads {
    /// Each reader over `store` (one store serves them all).
    pub fn of(store: &Arc<dyn Store>) -> Self {
        Self { flows: store.clone(), runs: store.clone(), audit: store.clone(), presence: store.clone() }
    }
}

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// Every write, and what the engine knows that the store does not.
    pub engine: EngineHandle,
    /// What handlers read from the store.
    pub reads: Reads,
    pub auth: Arc<AuthConfig>,
    /// Flips once (migrations ran, store answered): `/readyz` answers 200 after it.
    pub ready: Arc<AtomicBool>,
    pub rate_limits: Arc<ratelimit::RateLimits>,
    /// Rate limits and the event cache shared with other replicas (Redis).
    pub shared: Arc<shared::SharedState>,
    /// Alerting (`GET /alerts`, `POST /alerts/test`); `None` answers 503 there.
    pub alerts: Option<madeira_alert::AlertHandle>,
    /// What `/metrics` renders (`None`: 404).
    pub metrics: Option<madeira_telemetry::Exposition>,
    /// The process's log filter, for `PUT /admin/log-level`.
    pub log_control: Option<madeira_telemetry::LogControl>,
    /// The sidecar fleet (`GET /sidecars`), when the link runs.
    pub fleet: Option<madeira_fleet::Fleet>,
    /// Ends long-lived answers (log streams), so a graceful stop is not held open.
    pub shutdown: CancellationToken,
    /// The SQL datasources (`GET /datasources`), when any are configured.
    pub datasources: Option<Arc<madeira_sql::SqlExecutor>>,
    /// The message sources' states (`GET /sources`), when any are configured.
    pub sources: Option<SourcesView>,
    /// The XXL-JOB executors registered here (`GET /sidecars`' `xxl`), when `xxl_job` is configured.
    pub xxl: Option<SourcesView>,
}

/// Renders the message sources' states as JSON (no URLs, no credentials).
pub type SourcesView = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

impl AppState {
    pub fn new(engine: EngineHandle, reads: Reads, auth: AuthConfig) -> Self {
        Self {
            engine,
            reads,
            auth: Arc::new(auth),
            ready: Arc::new(AtomicBool::new(false)),
            rate_limits: Arc::new(ratelimit::RateLimits::default()),
            shared: Arc::new(shared::SharedState::default()),
            alerts: None,
            metrics: None,
            log_control: None,
            fleet: None,
            shutdown: CancellationToken::new(),
            datasources: None,
            sources: None,
            xxl: None,
        }
    }

    /// Ends log streams when `token` fires (give the token that stops the server).
    pub fn with_shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }

    /// Serves `GET /sources` from `view`.
    pub fn with_sources(mut self, view: SourcesView) -> Self {
        self.sources = Some(view);
        self
    }

    /// Lists XXL-JOB executors (kind `xxl`) beside the sidecars from `view`.
    pub fn with_xxl(mut self, view: SourcesView) -> Self {
        self.xxl = Some(view);
        self
    }

    /// Shares trigger rate limits and the event cache with other replicas
    /// through Redis at `url`.
    pub fn with_redis(mut self, url: &str) -> Self {
        self.shared = Arc::new(shared::SharedState::new(Some(url)));
        self
    }

    /// Serves the fleet view from `fleet`.
    pub fn with_fleet(mut self, fleet: madeira_fleet::Fleet) -> Self {
        self.fleet = Some(fleet);
        self
    }

    /// Serves the datasource view (`GET /datasources`) from `sql`.
    pub fn with_datasources(mut self, sql: Arc<madeira_sql::SqlExecutor>) -> Self {
        self.datasources = Some(sql);
        self
    }

    /// Serves `/metrics` from `exposition`.
    pub fn with_metrics(mut self, exposition: madeira_telemetry::Exposition) -> Self {
        self.metrics = Some(exposition);
        self
    }

    /// Lets admins change the log filter through `PUT /admin/log-level`.
    pub fn with_log_control(mut self, control: madeira_telemetry::LogControl) -> Self {
        self.log_control = Some(control);
        self
    }

    /// Serves the alert endpoints from `alerts`.
    pub fn with_alerts(mut self, alerts: madeira_alert::AlertHandle) -> Self {
        self.alerts = Some(alerts);
        self
    }

    /// Takes one trigger from `flow`'s rate limit — the cluster's through Redis,
    /// this replica's while Redis cannot answer — or answers 429 with Retry-After.
    pub async fn check_rate(
        &self,
        flow: &str,
        limit: Option<madeira_core::model::RateLimitDef>,
    ) -> Result<(), ApiError> {
        self.rate_wait(flow, limit).await.map_err(|wait| {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!("flow {flow}: trigger rate limit reached; retry in {secs}s or raise `rate_limit`"),
            )
            .with_details(serde_json::json!({"retry_after_seconds": secs}))
        })
    }

    /// Takes one trigger from `flow`'s rate limit (as `check_rate`), or says how
    /// long to wait: message triggers redeliver after it.
    pub async fn rate_wait(
        &self,
        flow: &str,
        limit: Option<madeira_core::model::RateLimitDef>,
    ) -> Result<(), std::time::Duration> {
        let limit = limit.unwrap_or(ratelimit::DEFAULT_LIMIT);
        match self.shared.take(flow, limit).await {
            Some(verdict) => verdict,
            None => self.rate_limits.check(flow, Some(limit)),
        }
    }

    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }
}

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    routes::router(state)
}

/// Serves the API on `listener` (a bound `TcpListener`, or any axum listener such
/// as one that terminates TLS) until `shutdown` fires; then open connections drain.
pub async fn serve<L>(listener: L, state: AppState, shutdown: CancellationToken) -> std::io::Result<()>
where
    L: axum::serve::Listener<Addr = std::net::SocketAddr>,
{
    let options = ServeOptions::for_auth(&state.auth);
    let state = state.with_shutdown(shutdown.clone());
    serve_router(listener, router(state), shutdown, options).await
}

/// Serves `app` — the API's `router`, possibly merged with more routes (the web
/// console) — on `listener` until `shutdown` fires (the `serve` module has the header
/// deadline and the connection cap). With authentication, failed attempts
/// are limited per client address (`authlimit`); without, requests must be
/// addressed to loopback or `public_names` from the server's own origin (`guard`).
///
/// Each connection gets a clone of one shared router (an `Arc` clone). Serving a
/// `Router` whose routes are rebuilt per connection (`Router::with_state` deep-copies
/// the route table when it is shared) cost, measured on the debug build, 20 KB per
/// idle connection instead of 2.7 KB and 69 KB per console live stream instead of 19 KB.
pub async fn serve_router<L>(
    listener: L,
    app: Router,
    shutdown: CancellationToken,
    options: ServeOptions,
) -> std::io::Result<()>
where
    L: axum::serve::Listener<Addr = std::net::SocketAddr>,
{
    let app = if options.authenticated {
        let failures = Arc::new(authlimit::AuthFailures::default());
        app.layer(axum::middleware::from_fn_with_state(failures, authlimit::limit))
    } else {
        let policy = Arc::new(guard::HostPolicy::new(&options.public_names));
        app.layer(axum::middleware::from_fn_with_state(policy, guard::local_only))
    };
    serve::run(listener, app, shutdown, &options).await;
    Ok(())
}
