//! The admin side of XXL-JOB's executor protocol (SPEC §14): existing XXL-JOB
//! executors (a Spring Boot service with `xxl-job-core`, pyxxl, …) point their
//! `xxl.job.admin.addresses` at Madeira, register under `{prefix}/api/registry`
//! and report results to `{prefix}/api/callback` (`admin`); flows run their
//! handlers as nodes with `run: {xxl: …}` (`executor`), which calls the
//! executors' `/run`, `/beat`, `/idleBeat`, `/kill` and `/log` (`client`) on the
//! route the node names (`route`). Each app has its own access token; no token
//! is ever assumed. Registrations and callbacks are kept in the store
//! (`madeira_store::XxlStore`), so replicas share them: an executor registered
//! with one replica is triggered by any, and a callback that reached one replica
//! (or a replica before its restart) ends the attempt wherever it runs.

mod admin;
mod client;
mod executor;
mod metrics;
pub mod protocol;
pub mod registry;
mod route;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use madeira_engine::EngineHandle;
use madeira_store::XxlStore;
use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};

pub use executor::{job_id, log_id};

/// Default path prefix of the admin endpoints (executors' `…/xxl-job-admin`).
pub const DEFAULT_PREFIX: &str = "/xxl-job-admin";

/// Shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

/// A config problem.
#[derive(Debug, thiserror::Error)]
pub enum XxlError {
    #[error("xxl_job.prefix `{0}` must start with `/` and not end with it, e.g. `/xxl-job-admin`")]
    Prefix(String),
    #[error("xxl_job.apps `{0}` is listed twice; give each executor app once")]
    DuplicateApp(String),
    #[error("xxl_job.apps `{0}`: the token is shorter than {MIN_TOKEN_LEN} characters; use a random one")]
    ShortToken(String),
    #[error("xxl_job.apps `{0}` and `{1}` share a token; give each app its own")]
    SharedToken(String, String),
    #[error("xxl_job.apps is empty: list the executor apps with their tokens")]
    NoApps,
}

/// One executor app and its access token.
#[derive(Clone)]
pub struct AppToken {
    pub app: String,
    pub token: String,
}

impl std::fmt::Debug for AppToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppToken").field("app", &self.app).field("token", &"***").finish()
    }
}

/// How the admin side runs.
#[derive(Debug, Clone)]
pub struct XxlOptions {
    /// Path prefix of `/api/registry` etc. (default `/xxl-job-admin`).
    pub prefix: String,
    pub apps: Vec<AppToken>,
    /// A registration lasts this long without renewal (default 90 s).
    pub dead_after: Duration,
    /// How often a running attempt's executor is probed with `/beat` (default 2 s).
    pub beat_every: Duration,
    /// Failed `/beat`s in a row after which the executor is dead and the attempt moves (default 3).
    pub beat_failures: u32,
    /// How often a running attempt's `/log` is read (default 1 s).
    pub log_every: Duration,
    /// Timeout of one call to an executor (default 10 s).
    pub call_timeout: Duration,
    /// How often a running attempt looks in the store for a callback another
    /// replica received (default 1 s).
    pub callback_poll: Duration,
}

impl XxlOptions {
    pub fn new(prefix: Option<String>, apps: Vec<AppToken>) -> Self {
        Self {
            prefix: prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_string()),
            apps,
            dead_after: registry::DEAD_AFTER,
            beat_every: Duration::from_secs(2),
            beat_failures: 3,
            log_every: Duration::from_secs(1),
            call_timeout: Duration::from_secs(10),
            callback_poll: Duration::from_secs(1),
        }
    }

    /// Refuses a bad prefix, no apps, an app listed twice, a short or shared token.
    pub fn validate(&self) -> Result<(), XxlError> {
        if !self.prefix.starts_with('/') || self.prefix.ends_with('/') || self.prefix.contains("//") {
            return Err(XxlError::Prefix(self.prefix.clone()));
        }
        if self.apps.is_empty() {
            return Err(XxlError::NoApps);
        }
        let mut seen: HashMap<&str, &str> = HashMap::new();
        let mut names = HashSet::new();
        for a in &self.apps {
            if !names.insert(a.app.as_str()) {
                return Err(XxlError::DuplicateApp(a.app.clone()));
            }
            if a.token.len() < MIN_TOKEN_LEN {
                return Err(XxlError::ShortToken(a.app.clone()));
            }
            if let Some(other) = seen.insert(a.token.as_str(), a.app.as_str()) {
                return Err(XxlError::SharedToken(other.to_string(), a.app.clone()));
            }
        }
        Ok(())
    }
}

/// The admin side: registrations, pending callbacks, and the executor. Cheap to clone.
#[derive(Clone)]
pub struct Xxl {
    inner: Arc<Inner>,
}

struct Inner {
    options: XxlOptions,
    store: Arc<dyn XxlStore>,
    /// SHA-256 of each app's token, compared in constant time.
    digests: Vec<(String, [u8; 32])>,
    registry: Mutex<registry::Registry>,
    pending: Mutex<HashMap<i64, executor::Pending>>,
    /// Log ids of attempts already decided (late or repeated callbacks), bounded.
    decided: Mutex<(VecDeque<i64>, HashSet<i64>)>,
    routes: Mutex<route::RouteState>,
    metrics: metrics::XxlMetrics,
    engine: OnceLock<EngineHandle>,
    http: reqwest::Client,
}

/// Most decided log ids remembered for late callbacks.
const DECIDED_KEPT: usize = 10_000;
/// Callbacks are kept this long in the store (a resumed attempt's is read within its grace).
const CALLBACKS_KEPT: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often old registrations and callbacks are deleted.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Xxl {
    /// Checks `options` and registers the metrics on `registry`; registrations
    /// and callbacks are kept in `store`.
    pub fn new(
        options: XxlOptions,
        store: Arc<dyn XxlStore>,
        registry: &mut prometheus_client::registry::Registry,
    ) -> Result<Self, XxlError> {
        options.validate()?;
        let digests =
            options.apps.iter().map(|a| (a.app.clone(), Sha256::digest(a.token.as_bytes()).into())).collect();
        let http = reqwest::Client::builder()
            .timeout(options.call_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Ok(Self {
            inner: Arc::new(Inner {
                options,
                store,
                digests,
                registry: Mutex::default(),
                pending: Mutex::default(),
                decided: Mutex::default(),
                routes: Mutex::default(),
                metrics: metrics::XxlMetrics::register(registry),
                engine: OnceLock::new(),
                http,
            }),
        })
    }

    /// The admin endpoints, under the prefix; merge them into the HTTP server.
    pub fn router(&self) -> axum::Router {
        admin::router(self.clone())
    }

    /// The executor of `run: {xxl: …}` nodes.
    pub fn executor(&self) -> Arc<dyn madeira_engine::Executor> {
        Arc::new(executor::XxlExecutor::new(self.clone()))
    }

    /// Gives the engine: live logs of attempts, and waking nodes that waited for an executor.
    pub fn attach_engine(&self, engine: EngineHandle) {
        let _ = self.inner.engine.set(engine);
    }

    pub fn prefix(&self) -> &str {
        &self.inner.options.prefix
    }

    /// Apps configured.
    pub fn apps(&self) -> Vec<String> {
        self.inner.options.apps.iter().map(|a| a.app.clone()).collect()
    }

    /// Live executor addresses of `app`, sorted.
    pub fn live(&self, app: &str) -> Vec<String> {
        lock(&self.inner.registry).live(app, madeira_engine::now_ms(), self.inner.options.dead_after)
    }

    /// Keeps this replica's copy of the registrations in step with the store
    /// (every `registry::REFRESH`) and deletes old registrations and callbacks
    /// (hourly), until `cancel`.
    pub async fn keep_registry(self, cancel: tokio_util::sync::CancellationToken) {
        let mut refresh = tokio::time::interval(registry::REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut prune = tokio::time::interval(PRUNE_EVERY);
        prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let dead_after = self.inner.options.dead_after;
        let forget = dead_after * 10;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = refresh.tick() => {
                    let now = madeira_engine::now_ms();
                    match self.inner.store.xxl_executors(now - ms(forget)).await {
                        Ok(rows) => {
                            let woke = lock(&self.inner.registry).replace(rows, now, dead_after);
                            if !woke.is_empty() {
                                tracing::info!(apps = ?woke, "XXL-JOB executors registered (seen in the store)");
                                self.executors_changed();
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "XXL-JOB registrations not read from the store; keeping the last ones"),
                    }
                }
                _ = prune.tick() => {
                    let now = madeira_engine::now_ms();
                    if let Err(e) = self.inner.store.xxl_prune(now - ms(forget), now - ms(CALLBACKS_KEPT)).await {
                        tracing::warn!(error = %e, "old XXL-JOB registrations and callbacks not deleted");
                    }
                }
            }
        }
    }

    /// The executors as the fleet view lists them (kind `xxl`).
    pub fn view(&self) -> Json {
        let entries =
            lock(&self.inner.registry).entries(madeira_engine::now_ms(), self.inner.options.dead_after);
        let list: Vec<Json> = entries
            .into_iter()
            .map(|(app, address, seen, live)| {
                json!({
                    "kind": "xxl",
                    "name": address,
                    "group": app,
                    "live": live,
                    "connected_at_ms": seen.since_ms,
                    "last_seen_ms": seen.last_ms,
                })
            })
            .collect();
        Json::Array(list)
    }

    /// The app whose token `given` is (every app compared, in constant time each).
    fn app_of_token(&self, given: Option<&str>) -> Option<String> {
        let given: [u8; 32] = Sha256::digest(given.unwrap_or_default().as_bytes()).into();
        let mut found = None;
        for (app, digest) in &self.inner.digests {
            let diff = digest.iter().zip(given.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff == 0 {
                found = Some(app.clone());
            }
        }
        found
    }

    /// The token Madeira sends to `app`'s executors (they check it too).
    fn token_of(&self, app: &str) -> Option<&str> {
        self.inner.options.apps.iter().find(|a| a.app == app).map(|a| a.token.as_str())
    }

    fn remember_decided(&self, log_id: i64) {
        let mut d = lock(&self.inner.decided);
        if d.1.insert(log_id) {
            d.0.push_back(log_id);
        }
        while d.0.len() > DECIDED_KEPT {
            if let Some(old) = d.0.pop_front() {
                d.1.remove(&old);
            }
        }
    }

    fn was_decided(&self, log_id: i64) -> bool {
        lock(&self.inner.decided).1.contains(&log_id)
    }

    /// Wakes nodes waiting in INIT for an executor of an app.
    fn executors_changed(&self) {
        if let Some(engine) = self.inner.engine.get().cloned() {
            tokio::spawn(async move {
                if let Err(e) = engine.executors_changed().await {
                    tracing::debug!(error = %e, "engine not told about new XXL-JOB executors");
                }
            });
        }
    }
}

/// A test `Xxl` on a temporary SQLite store.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub(crate) async fn xxl(options: XxlOptions) -> (Xxl, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            madeira_store::sqlite::SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store");
        let mut reg = prometheus_client::registry::Registry::default();
        (Xxl::new(options, Arc::new(store), &mut reg).expect("xxl"), dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str, token: &str) -> AppToken {
        AppToken { app: name.into(), token: token.into() }
    }

    #[test]
    fn options_refuse_short_shared_and_missing_tokens() {
        let short = XxlOptions::new(None, vec![app("a", "short")]);
        assert!(matches!(short.validate(), Err(XxlError::ShortToken(_))));
        let shared = XxlOptions::new(None, vec![app("a", "0123456789abcdef"), app("b", "0123456789abcdef")]);
        assert!(matches!(shared.validate(), Err(XxlError::SharedToken(..))));
        assert!(matches!(XxlOptions::new(None, vec![]).validate(), Err(XxlError::NoApps)));
        let prefix = XxlOptions::new(Some("xxl/".into()), vec![app("a", "0123456789abcdef")]);
        assert!(matches!(prefix.validate(), Err(XxlError::Prefix(_))));
    }

    #[tokio::test]
    async fn tokens_name_their_app_and_nothing_else() {
        let opts = XxlOptions::new(None, vec![app("a", "aaaaaaaaaaaaaaaa1"), app("b", "bbbbbbbbbbbbbbbb2")]);
        let (xxl, _dir) = testing::xxl(opts).await;
        assert_eq!(xxl.app_of_token(Some("bbbbbbbbbbbbbbbb2")).as_deref(), Some("b"));
        assert_eq!(xxl.app_of_token(Some("aaaaaaaaaaaaaaaa")), None);
        assert_eq!(xxl.app_of_token(None), None, "no token is never a default token");
        assert_eq!(xxl.app_of_token(Some("")), None);
    }
}
