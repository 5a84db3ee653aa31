//! Madeira's web console (SPEC §9.1): server-rendered HTML (maud) with htmx and a
//! few ES modules, served by the control plane under `/` next to `/api/v1`.
//!
//! It reaches the engine and the store only through the API's `AppState` (the
//! same `EngineHandle`, auth config, alert handle and fleet), so every action a
//! page takes is the engine action the REST API takes, audited with the signed-in
//! token's name. Live updates come from the engine's committed-transition
//! broadcast, renumbered by `events::Hub` and sent as Server-Sent Events.
//!
//! Sign-in (`session`): a bearer token pasted once becomes an expiring HttpOnly,
//! SameSite=Strict session cookie with a CSRF token checked on every POST; the
//! sessions are kept in the store (`sessions`), so they outlive a restart and work
//! on every replica; without
//! `auth.tokens` (`madeira dev`) every visitor is `local` with the admin role.

mod actions;
mod assets;
mod dag;
mod error;
mod events;
mod i18n;
pub mod layout;
mod logs;
mod page;
mod pages;
mod session;
mod sessions;
mod time;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use madeira_server::AppState;
use tokio_util::sync::CancellationToken;

pub use error::ConsoleError;
pub use logs::{LogChunk, read_log};

/// Console settings (from the server config).
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    /// How long a session lasts after sign-in.
    pub session_ttl: Duration,
    /// Mark cookies `Secure` (the console is served over HTTPS).
    pub secure_cookies: bool,
    /// Ends the live streams (so a graceful shutdown is not held open by them).
    pub shutdown: CancellationToken,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        Self {
            session_ttl: Duration::from_secs(8 * 3600),
            secure_cookies: false,
            shutdown: CancellationToken::new(),
        }
    }
}

/// What every console handler can reach.
#[derive(Clone)]
pub struct Console {
    pub(crate) app: AppState,
    pub(crate) sessions: Arc<sessions::Sessions>,
    pub(crate) hub: events::Hub,
    pub(crate) layouts: Arc<layout::LayoutCache>,
    pub(crate) assets: Arc<assets::Assets>,
    pub(crate) options: Arc<ConsoleOptions>,
}

impl Console {
    /// Builds the console over the API's state; starts the event hub (which
    /// must run inside a Tokio runtime).
    pub fn new(app: AppState, options: ConsoleOptions) -> Self {
        let hub = events::Hub::start(app.engine.subscribe(), options.shutdown.clone());
        Self {
            sessions: Arc::new(sessions::Sessions::new(app.engine.store().clone(), options.session_ttl)),
            hub,
            layouts: Arc::new(layout::LayoutCache::default()),
            assets: Arc::new(assets::Assets::new()),
            options: Arc::new(options),
            app,
        }
    }

    /// Live SSE streams open now.
    pub fn live_subscribers(&self) -> usize {
        self.hub.subscribers()
    }

    /// Live sessions in the store (expired ones are deleted as new ones open).
    pub async fn sessions_open(&self) -> Result<u64, ConsoleError> {
        self.sessions.live().await
    }

    /// True when sign-in is required (`auth.tokens` configured).
    pub(crate) fn auth_on(&self) -> bool {
        self.app.auth.tokens.is_some()
    }
}

/// Largest form body a console POST may carry.
const MAX_FORM_BYTES: usize = 64 * 1024;

/// The console's routes; merge them with `madeira_server::router`.
pub fn router(console: Console) -> Router {
    Router::new()
        .route("/", get(pages::overview::page))
        .route("/signin", get(session::signin_page).post(session::signin))
        .route("/signout", post(session::signout))
        .route("/lang", get(session::set_lang))
        .route("/assets/{name}", get(assets::serve))
        .route("/events", get(events::stream))
        .route("/approvals", get(pages::approvals::page))
        .route("/approvals/bulk", post(actions::bulk_confirm))
        .route("/flows", get(pages::flows::list))
        .route("/flows/{name}", get(pages::flows::show))
        .route("/flows/{name}/run", post(actions::run_now))
        .route("/flows/{name}/pause", post(actions::pause))
        .route("/flows/{name}/resume", post(actions::resume))
        .route("/runs", get(pages::runs::search))
        .route("/runs/bulk", post(actions::bulk_runs))
        .route("/runs/{id}", get(pages::run::page))
        .route("/runs/{id}/live", get(pages::run::live))
        .route("/runs/{id}/cancel", post(actions::cancel))
        .route("/runs/{id}/nodes/{node}", get(pages::run::panel))
        .route("/runs/{id}/nodes/{node}/log", get(logs::serve))
        .route("/runs/{id}/nodes/{node}/log/follow", get(logs::follow))
        .route("/runs/{id}/nodes/{node}/{action}", post(actions::node_action))
        .route("/audit", get(pages::audit::page))
        .route("/audit.csv", get(pages::audit::csv))
        .route("/alerts", get(pages::misc::alerts))
        .route("/sidecars", get(pages::misc::sidecars))
        .fallback(error::not_found)
        .layer(axum::middleware::from_fn(page::security_headers))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .with_state(console)
}
