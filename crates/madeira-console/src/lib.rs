//! Madeira's web console (SPEC §9.1): server-rendered HTML (maud) with htmx and a
//! few ES modules, served by the control plane under `/` next to `/api/v1`.
//!
//! It reaches the engine and the store only through the API's `AppState` (the
//! same `EngineHandle`, store readers, auth config, alert handle and fleet), so
//! every action a page takes is the engine action the REST API takes, audited with the signed-in
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
mod terms;
mod time;
mod viewer;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use madeira_server::AppState;
use madeira_store::SessionStore;
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
    /// Sessions are kept in `sessions` (the console's own state; it reads the rest
    /// through `app.reads` and writes only through `app.engine`).
    pub fn new(app: AppState, sessions: Arc<dyn SessionStore>, options: ConsoleOptions) -> Self {
        let hub = events::Hub::start(app.engine.subscribe(), options.shutdown.clone());
        Self {
            sessions: Arc::new(sessions::Sessions::new(sessions, options.session_ttl)),
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

/// What a console route may show of flows and runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Nothing of any flow or run (sign-in, sign-out, language, static assets).
    Public,
    /// The signed-in token's scope applies, as in the API: another team's flow or
    /// run answers 404, and lists and live streams leave it out.
    Scoped,
}

type Handlers = axum::routing::MethodRouter<Console>;

/// Every console route with its access; `router` serves exactly these.
fn table() -> Vec<(&'static str, Access, Handlers)> {
    use Access::{Public, Scoped};
    vec![
        ("/", Scoped, get(pages::overview::page)),
        ("/signin", Public, get(session::signin_page).post(session::signin)),
        ("/signout", Public, post(session::signout)),
        ("/lang", Public, get(session::set_lang)),
        ("/assets/{name}", Public, get(assets::serve)),
        ("/favicon.ico", Public, get(assets::favicon)),
        ("/events", Scoped, get(events::stream)),
        ("/approvals", Scoped, get(pages::approvals::page)),
        ("/approvals/bulk", Scoped, post(actions::bulk_confirm)),
        ("/flows", Scoped, get(pages::flows::list)),
        ("/flows/{name}", Scoped, get(pages::flows::show)),
        ("/flows/{name}/run", Scoped, post(actions::run_now)),
        ("/alerts/{id}/{action}", Scoped, post(actions::alert_mark)),
        ("/flows/{name}/pause", Scoped, post(actions::pause)),
        ("/flows/{name}/backfill", Scoped, post(pages::backfills::create)),
        ("/backfills", Scoped, get(pages::backfills::page)),
        ("/backfills/{id}/{action}", Scoped, post(pages::backfills::act)),
        ("/flows/{name}/resume", Scoped, post(actions::resume)),
        ("/estate", Scoped, get(pages::estate::page)),
        ("/runs", Scoped, get(pages::runs::search)),
        ("/runs/bulk", Scoped, post(actions::bulk_runs)),
        ("/runs/{id}", Scoped, get(pages::run::page)),
        ("/runs/{id}/live", Scoped, get(pages::run::live)),
        ("/runs/{id}/cancel", Scoped, post(actions::cancel)),
        ("/runs/{id}/nodes/{node}", Scoped, get(pages::run::panel)),
        ("/runs/{id}/nodes/{node}/log", Scoped, get(logs::serve)),
        ("/runs/{id}/nodes/{node}/log/follow", Scoped, get(logs::follow)),
        ("/runs/{id}/nodes/{node}/{action}", Scoped, post(actions::node_action)),
        ("/audit", Scoped, get(pages::audit::page)),
        ("/audit.csv", Scoped, get(pages::audit::csv)),
        ("/alerts", Scoped, get(pages::misc::alerts)),
        ("/sidecars", Scoped, get(pages::misc::sidecars)),
    ]
}

/// The console's routes (paths as the router declares them) and their access:
/// the route check probes every `Scoped` one with another team's names.
pub fn routes() -> Vec<(&'static str, Access)> {
    table().into_iter().map(|(path, access, _)| (path, access)).collect()
}

/// The console's routes; merge them with `madeira_server::router`.
pub fn router(console: Console) -> Router {
    table()
        .into_iter()
        .fold(Router::new(), |router, (path, _, handlers)| router.route(path, handlers))
        .fallback(error::not_found)
        .layer(axum::middleware::from_fn(page::security_headers))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .with_state(console)
}
