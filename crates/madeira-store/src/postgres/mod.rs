//! PostgreSQL backend: the same schema and semantics as the SQLite one, for
//! production and several control-plane replicas on one database. Commits are
//! durable (`synchronous_commit` as configured on the server, `on` by default);
//! decisions that SQLite serialises with its single writer (run creation with
//! idempotency and overlap, promotion of queued runs, flow versions) take a
//! transaction-scoped advisory lock per flow here, so replicas never race on them.

mod alerts;
mod commands;
mod commit;
mod flows;
mod inbox;
mod lease;
mod permits;
mod presence;
mod read;
mod runs;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::{
    AuditQuery, AuditRecord, Batch, Claim, CreateOutcome, FlowRecord, FlowVersion, Lease, LogRecord, NewRun,
    PermitKey, PutFlow, Result, RunCommand, RunQuery, RunRow, SidecarPresence, Store, StoreError, StoredRun,
    TransitionRecord,
};

pub struct PostgresStore {
    pool: PgPool,
}

/// Pool settings for `PostgresStore::open_with`.
#[derive(Debug, Clone)]
pub struct PgOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self { max_connections: 8, acquire_timeout: Duration::from_secs(10) }
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user@host/db`) and applies the migrations
    /// (sqlx takes an advisory lock, so replicas starting together are safe).
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(url, &PgOptions::default()).await
    }

    pub async fn open_with(url: &str, options: &PgOptions) -> Result<Self> {
        let connect = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::BadUrl { url: url.to_string(), reason: e.to_string() })?
            .application_name("madeira");
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        sqlx::migrate!("../../migrations/postgres").run(&pool).await?;
        Ok(Self { pool })
    }

    /// The connection pool (for LISTEN/NOTIFY and tests).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn put_flow(&self, name: &str, source: &str, hash: &str, now_ms: i64) -> Result<PutFlow> {
        retry(|| flows::put_flow(&self.pool, name, source, hash, now_ms)).await
    }
    async fn get_flow(&self, name: &str) -> Result<Option<FlowRecord>> {
        retry(|| flows::get_flow(&self.pool, name)).await
    }
    async fn list_flows(&self) -> Result<Vec<FlowRecord>> {
        retry(|| flows::list_flows(&self.pool)).await
    }
    async fn flow_version(&self, name: &str, version: u32) -> Result<Option<FlowVersion>> {
        retry(|| flows::flow_version(&self.pool, name, version)).await
    }
    async fn flow_versions(&self, name: &str) -> Result<Vec<FlowVersion>> {
        retry(|| flows::flow_versions(&self.pool, name)).await
    }
    async fn set_paused(&self, name: &str, paused: bool, now_ms: i64) -> Result<bool> {
        retry(|| flows::set_paused(&self.pool, name, paused, now_ms)).await
    }
    async fn create_run(&self, run: &NewRun) -> Result<CreateOutcome> {
        let mut outcomes = retry(|| runs::create_runs(&self.pool, std::slice::from_ref(run))).await?;
        outcomes.pop().ok_or_else(|| StoreError::Refused("no outcome for the run".into()))
    }
    async fn create_runs(&self, runs: &[NewRun]) -> Result<Vec<CreateOutcome>> {
        retry(|| runs::create_runs(&self.pool, runs)).await
    }
    async fn promote_queued(&self, flow: &str, max: u32, now_ms: i64) -> Result<Option<String>> {
        retry(|| runs::promote_queued(&self.pool, flow, max, now_ms)).await
    }
    async fn commit(&self, batch: &Batch) -> Result<()> {
        retry(|| commit::commit(&self.pool, batch)).await
    }
    async fn last_cron_key(&self, flow: &str) -> Result<Option<String>> {
        retry(|| read::last_cron_key(&self.pool, flow)).await
    }
    async fn load_run(&self, run_id: &str) -> Result<Option<StoredRun>> {
        retry(|| read::load_run(&self.pool, run_id)).await
    }
    async fn unfinished_runs(&self) -> Result<Vec<String>> {
        retry(|| read::unfinished_runs(&self.pool)).await
    }
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunRow>> {
        retry(|| read::list_runs(&self.pool, query)).await
    }
    async fn transitions(&self, run_id: &str) -> Result<Vec<TransitionRecord>> {
        retry(|| read::transitions(&self.pool, run_id)).await
    }
    async fn put_log(&self, log: &LogRecord) -> Result<()> {
        retry(|| runs::put_log(&self.pool, log)).await
    }
    async fn logs(&self, run_id: &str, node: &str) -> Result<Vec<LogRecord>> {
        retry(|| read::logs(&self.pool, run_id, node)).await
    }
    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        retry(|| read::audit(&self.pool, query)).await
    }
    async fn claim_run(&self, run_id: &str, lease: &Lease, steal_idle: bool) -> Result<Claim> {
        retry(|| lease::claim_run(&self.pool, run_id, lease, steal_idle, None)).await
    }
    async fn adopt_run(&self, run_id: &str, from: &str, lease: &Lease) -> Result<Claim> {
        retry(|| lease::claim_run(&self.pool, run_id, lease, true, Some(from))).await
    }
    async fn claim_expired(&self, lease: &Lease, limit: u32) -> Result<Vec<String>> {
        retry(|| lease::claim_expired(&self.pool, lease, limit)).await
    }
    async fn renew_leases(&self, lease: &Lease) -> Result<u64> {
        retry(|| lease::renew_leases(&self.pool, lease)).await
    }
    async fn try_permit(&self, key: &PermitKey, owner: &str, max: u32, now_ms: i64) -> Result<bool> {
        retry(|| permits::try_permit(&self.pool, key, owner, max, now_ms)).await
    }
    async fn send_command(&self, cmd: &RunCommand) -> Result<i64> {
        retry(|| commands::send_command(&self.pool, cmd)).await
    }
    async fn take_commands(&self, target: &str, now_ms: i64) -> Result<Vec<RunCommand>> {
        retry(|| commands::take_commands(&self.pool, target, now_ms)).await
    }
    async fn answer_command(&self, id: i64, answer: &str, now_ms: i64) -> Result<()> {
        retry(|| commands::answer_command(&self.pool, id, answer, now_ms)).await
    }
    async fn command_answer(&self, id: i64) -> Result<Option<String>> {
        retry(|| commands::command_answer(&self.pool, id)).await
    }
    async fn withdraw_command(&self, id: i64) -> Result<bool> {
        retry(|| commands::withdraw_command(&self.pool, id)).await
    }
    async fn publish_sidecars(&self, replica: &str, groups: &[SidecarPresence], now_ms: i64) -> Result<()> {
        retry(|| presence::publish(&self.pool, replica, groups, now_ms)).await
    }
    async fn sidecar_hosts(&self, group: &str, job: &str, since_ms: i64) -> Result<Vec<String>> {
        retry(|| presence::hosts(&self.pool, group, job, since_ms)).await
    }
    async fn sidecar_presence(&self, since_ms: i64) -> Result<Vec<(String, SidecarPresence, i64)>> {
        retry(|| presence::all(&self.pool, since_ms)).await
    }
    async fn prune(&self, before_ms: i64, batch: u32) -> Result<u64> {
        retry(|| runs::prune(&self.pool, before_ms, batch)).await
    }
    async fn probe(&self, now_ms: i64) -> Result<()> {
        retry(|| async {
            sqlx::query(
                "INSERT INTO store_probe (id, at) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET at = excluded.at",
            )
            .bind(now_ms)
            .execute(&self.pool)
            .await?;
            Ok(())
        })
        .await
    }
}

/// Runs `op` again, with backoff (50 ms doubling, 6 tries over ~1.5 s), while it fails
/// with a transient error (lost connection, administrator shutdown, serialization
/// failure, deadlock), so callers see only what a fresh connection cannot fix.
/// Every operation here is one transaction and safe to repeat (see
/// `StoreError::is_transient`).
pub(crate) async fn retry<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(50);
    for _ in 0..5 {
        match op().await {
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "transient database error; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => return other,
        }
    }
    op().await
}
