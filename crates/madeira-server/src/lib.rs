//! Madeira's REST API (SPEC §9): axum routes over the engine handle and the store,
//! bearer-token auth with roles, JSON errors `{"error": {code, message, details}}`,
//! and the health endpoints. `serve` runs it on an already-bound listener.

mod auth;
mod error;
mod routes;
mod views;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use madeira_engine::EngineHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use auth::{AuthConfig, Role, TokenEntry};
pub use error::ApiError;

/// Largest request body accepted (flow YAML, params, events).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub engine: EngineHandle,
    pub auth: Arc<AuthConfig>,
    /// Flips once (migrations ran, store answered): `/readyz` answers 200 after it.
    pub ready: Arc<AtomicBool>,
    /// The sidecar fleet (`GET /sidecars`), when the link runs.
    pub fleet: Option<madeira_fleet::Fleet>,
}

impl AppState {
    pub fn new(engine: EngineHandle, auth: AuthConfig) -> Self {
        Self { engine, auth: Arc::new(auth), ready: Arc::new(AtomicBool::new(false)), fleet: None }
    }

    /// Serves the fleet view from `fleet`.
    pub fn with_fleet(mut self, fleet: madeira_fleet::Fleet) -> Self {
        self.fleet = Some(fleet);
        self
    }

    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }
}

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    routes::router(state)
}

/// Serves the API on `listener` until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown.cancelled_owned()).await
}
