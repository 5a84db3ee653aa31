//! Madeira's SQL executor: runs `run: {sql: …}` nodes against the datasources of the
//! server config (PostgreSQL, MySQL/MariaDB), each with one bounded pool whose size
//! is also the limit of concurrent statements. Plugs into the engine through the
//! `Executor` trait, so the engine itself carries no database driver.
//!
//! One attempt (`attempt`): a connection from the pool, a transaction with the
//! node's timeout as the server-side statement timeout, the statements with bound
//! values, bounded outputs. On timeout or cancellation the statement is cancelled
//! on the server and the attempt ends only once the database's activity view shows
//! the session gone (`settle`), so a retry never overlaps it.

mod attempt;
mod backend;
mod binds;
mod classify;
mod driver;
mod mysql;
mod outputs;
mod pg;
mod settle;
#[cfg(feature = "test-support")]
pub mod testing;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use madeira_core::ExecutorDef;
use madeira_engine::{AttemptResult, Executor, Job};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// Largest outputs of one SQL node, as JSON (the engine's output limit).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// A datasource as configured: the URL is a secret (never printed, see `Debug`).
#[derive(Clone)]
pub struct DatasourceConfig {
    pub name: String,
    pub url: String,
    pub max_connections: u32,
    pub read_only: bool,
}

impl fmt::Debug for DatasourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatasourceConfig")
            .field("name", &self.name)
            .field("url", &"***")
            .field("max_connections", &self.max_connections)
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// A datasource that cannot be set up; the message never holds its URL.
#[derive(Debug, thiserror::Error)]
#[error("datasource `{name}`: {message}")]
pub struct SqlError {
    pub name: String,
    pub message: String,
}

/// Which database a datasource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Postgres,
    Mysql,
}

/// One datasource as listed by `GET /datasources` and `madeira datasources`.
#[derive(Debug, Clone, Serialize)]
pub struct DatasourceInfo {
    pub name: String,
    pub kind: Kind,
    pub max_connections: u32,
    pub read_only: bool,
    /// Statements running now (each holds one pooled connection).
    pub in_use: i64,
    /// Attempts waiting for a connection.
    pub waiting: i64,
    /// Connections open in the pool (busy or idle).
    pub open: u32,
    pub idle: usize,
}

pub(crate) enum Pool {
    Pg(backend::Source<pg::Pg>),
    My(backend::Source<mysql::My>),
}

impl Pool {
    /// Connections open (busy or idle), and idle.
    fn usage(&self) -> (u32, usize) {
        fn of<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) -> (u32, usize) {
            (pool.size(), pool.num_idle())
        }
        match self {
            Pool::Pg(pg) => of(&pg.pool),
            Pool::My(my) => of(&my.pool),
        }
    }
}

/// A configured datasource: its pool and usage counters.
pub(crate) struct Datasource {
    pub name: String,
    pub max_connections: u32,
    pub read_only: bool,
    pub pool: Pool,
    /// The URL and its password, scrubbed from every message.
    secrets: Vec<String>,
    pub in_use: AtomicI64,
    pub waiting: AtomicI64,
    gauges: Gauges,
}

impl Datasource {
    /// `text` with the datasource's URL and password replaced by `***`.
    pub fn scrub(&self, text: &str) -> String {
        self.secrets.iter().fold(text.to_string(), |t, s| t.replace(s.as_str(), "***"))
    }

    pub fn kind(&self) -> Kind {
        match self.pool {
            Pool::Pg(_) => Kind::Postgres,
            Pool::My(_) => Kind::Mysql,
        }
    }

    /// Counts an attempt waiting for, then holding, a connection (gauges follow).
    pub fn enter_wait(&self) {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.publish();
    }

    pub fn wait_to_use(&self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.in_use.fetch_add(1, Ordering::Relaxed);
        self.publish();
    }

    pub fn leave_wait(&self) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.publish();
    }

    pub fn leave_use(&self) {
        self.in_use.fetch_sub(1, Ordering::Relaxed);
        self.publish();
    }

    fn publish(&self) {
        let label = vec![("datasource".to_string(), self.name.clone())];
        self.gauges.in_use.get_or_create(&label).set(self.in_use.load(Ordering::Relaxed));
        self.gauges.waiting.get_or_create(&label).set(self.waiting.load(Ordering::Relaxed));
    }
}

type Labels = Vec<(String, String)>;

#[derive(Clone, Default)]
struct Gauges {
    in_use: Family<Labels, Gauge>,
    waiting: Family<Labels, Gauge>,
    max: Family<Labels, Gauge>,
}

/// The SQL executor over every configured datasource.
pub struct SqlExecutor {
    datasources: BTreeMap<String, Arc<Datasource>>,
}

impl SqlExecutor {
    /// Sets up one lazily connecting pool per datasource (no connection is opened
    /// here) and registers the pool gauges on `registry`.
    pub fn new(configs: Vec<DatasourceConfig>, registry: &mut Registry) -> Result<Self, SqlError> {
        let gauges = Gauges::default();
        registry.register(
            "madeira_sql_pool_in_use",
            "Statements running on a datasource (each holds one pooled connection)",
            gauges.in_use.clone(),
        );
        registry.register(
            "madeira_sql_pool_waiting",
            "SQL attempts waiting for a connection of a datasource",
            gauges.waiting.clone(),
        );
        registry.register(
            "madeira_sql_pool_max",
            "max_connections of a datasource: the limit of its concurrent statements",
            gauges.max.clone(),
        );
        let mut datasources = BTreeMap::new();
        for config in configs {
            let err = |message: String| SqlError { name: config.name.clone(), message };
            if config.max_connections == 0 {
                return Err(err("max_connections must be at least 1".into()));
            }
            if datasources.contains_key(&config.name) {
                return Err(err("is configured twice".into()));
            }
            let pool = open_pool(&config).map_err(err)?;
            let label = vec![("datasource".to_string(), config.name.clone())];
            gauges.max.get_or_create(&label).set(i64::from(config.max_connections));
            let ds = Datasource {
                secrets: secrets_of(&config.url),
                name: config.name.clone(),
                max_connections: config.max_connections,
                read_only: config.read_only,
                pool,
                in_use: AtomicI64::new(0),
                waiting: AtomicI64::new(0),
                gauges: gauges.clone(),
            };
            ds.publish();
            datasources.insert(config.name, Arc::new(ds));
        }
        Ok(Self { datasources })
    }

    /// The configured datasources with their pool usage; no URLs.
    pub fn datasources(&self) -> Vec<DatasourceInfo> {
        self.datasources
            .values()
            .map(|d| {
                let (open, idle) = d.pool.usage();
                DatasourceInfo {
                    name: d.name.clone(),
                    kind: d.kind(),
                    max_connections: d.max_connections,
                    read_only: d.read_only,
                    in_use: d.in_use.load(Ordering::Relaxed),
                    waiting: d.waiting.load(Ordering::Relaxed),
                    open,
                    idle,
                }
            })
            .collect()
    }

    pub fn names(&self) -> Vec<String> {
        self.datasources.keys().cloned().collect()
    }
}

#[async_trait]
impl Executor for SqlExecutor {
    async fn execute(&self, job: Job, cancel: CancellationToken) -> AttemptResult {
        let ExecutorDef::Sql(def) = &job.executor else {
            return AttemptResult::failure("sql executor given a non-sql node", false);
        };
        let Some(ds) = self.datasources.get(&def.datasource) else {
            let known = self.names().join(", ");
            return AttemptResult::failure(
                format!(
                    "unknown datasource `{}`; the server config has: {}",
                    def.datasource,
                    if known.is_empty() { "none".to_string() } else { known }
                ),
                false,
            );
        };
        attempt::run(ds, def, &job, &cancel).await
    }
}

/// The pool of one datasource, lazily connected; errors never include the URL.
fn open_pool(config: &DatasourceConfig) -> Result<Pool, String> {
    let url = config.url.trim();
    let max = config.max_connections;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let options: sqlx::postgres::PgConnectOptions =
            url.parse().map_err(|_| "the URL is not a valid postgres:// URL".to_string())?;
        let options = options.application_name("madeira");
        return Ok(Pool::Pg(backend::Source::lazy(pg::Pg, options, max)));
    }
    if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        let url = url.strip_prefix("mariadb://").map(|r| format!("mysql://{r}")).unwrap_or(url.to_string());
        let options: sqlx::mysql::MySqlConnectOptions =
            url.parse().map_err(|_| "the URL is not a valid mysql:// URL".to_string())?;
        return Ok(Pool::My(backend::Source::lazy(mysql::My::default(), options, max)));
    }
    Err("the URL must start with postgres:// or mysql:// (MariaDB too)".into())
}

/// The URL itself and its password (raw and percent-decoded), longest first.
fn secrets_of(url: &str) -> Vec<String> {
    let mut out = vec![url.trim().to_string()];
    if let Some(rest) = url.split_once("://").map(|(_, r)| r)
        && let Some((userinfo, _)) = rest.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
        && !password.is_empty()
    {
        out.push(password.to_string());
        let decoded = percent_decode(password);
        if decoded != password {
            out.push(decoded);
        }
    }
    out.retain(|s| s.len() >= 3);
    out
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(v) = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_cover_url_and_password() {
        let s = secrets_of("postgres://app:s%40cret@db/x");
        assert_eq!(s, ["postgres://app:s%40cret@db/x", "s%40cret", "s@cret"]);
        assert_eq!(secrets_of("mysql://root@db"), ["mysql://root@db"]);
    }

    #[test]
    fn bad_urls_do_not_echo_the_url() {
        let config = DatasourceConfig {
            name: "x".into(),
            url: "oracle://u:hunter22@db".into(),
            max_connections: 1,
            read_only: false,
        };
        let e = open_pool(&config).err().expect("refused");
        assert!(!e.contains("hunter22"), "{e}");
        assert!(!format!("{config:?}").contains("hunter22"));
    }
}
