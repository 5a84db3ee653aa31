//! SQLite backend: one file in WAL mode with durable (`synchronous = FULL`)
//! commits; a single-connection pool serialises writes, a small pool serves reads.

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
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::{
    AuditQuery, AuditRecord, Batch, Claim, CreateOutcome, FlowRecord, FlowVersion, Lease, LogRecord, NewRun,
    PermitKey, PutFlow, Result, RunCommand, RunQuery, RunRow, SidecarPresence, Store, StoreError, StoredRun,
    TransitionRecord,
};

pub struct SqliteStore {
    write: SqlitePool,
    read: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `url` (`sqlite:///path/file.db` or
    /// `sqlite://file.db`) and applies the migrations.
    pub async fn open(url: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::BadUrl { url: url.to_string(), reason: e.to_string() })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10))
            .pragma("cache_size", "-16000");
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("../../migrations/sqlite").run(&write).await?;
        let read = SqlitePoolOptions::new().max_connections(4).connect_with(options.read_only(true)).await?;
        Ok(Self { write, read })
    }

    /// Opens the database file at `path`.
    pub async fn open_path(path: &std::path::Path) -> Result<Self> {
        Self::open(&format!("sqlite://{}", path.display())).await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn put_flow(&self, name: &str, source: &str, hash: &str, now_ms: i64) -> Result<PutFlow> {
        flows::put_flow(&self.write, name, source, hash, now_ms).await
    }
    async fn get_flow(&self, name: &str) -> Result<Option<FlowRecord>> {
        flows::get_flow(&self.read, name).await
    }
    async fn list_flows(&self) -> Result<Vec<FlowRecord>> {
        flows::list_flows(&self.read).await
    }
    async fn flow_version(&self, name: &str, version: u32) -> Result<Option<FlowVersion>> {
        flows::flow_version(&self.read, name, version).await
    }
    async fn flow_versions(&self, name: &str) -> Result<Vec<FlowVersion>> {
        flows::flow_versions(&self.read, name).await
    }
    async fn set_paused(&self, name: &str, paused: bool, now_ms: i64) -> Result<bool> {
        flows::set_paused(&self.write, name, paused, now_ms).await
    }
    async fn create_run(&self, run: &NewRun) -> Result<CreateOutcome> {
        let mut outcomes = runs::create_runs(&self.write, std::slice::from_ref(run)).await?;
        outcomes.pop().ok_or_else(|| StoreError::Refused("no outcome for the run".into()))
    }
    async fn create_runs(&self, runs: &[NewRun]) -> Result<Vec<CreateOutcome>> {
        runs::create_runs(&self.write, runs).await
    }
    async fn promote_queued(&self, flow: &str, max: u32, now_ms: i64) -> Result<Option<String>> {
        runs::promote_queued(&self.write, flow, max, now_ms).await
    }
    async fn commit(&self, batch: &Batch) -> Result<()> {
        commit::commit(&self.write, batch).await
    }
    async fn last_cron_key(&self, flow: &str) -> Result<Option<String>> {
        read::last_cron_key(&self.read, flow).await
    }
    async fn load_run(&self, run_id: &str) -> Result<Option<StoredRun>> {
        read::load_run(&self.read, run_id).await
    }
    async fn unfinished_runs(&self) -> Result<Vec<String>> {
        read::unfinished_runs(&self.write).await
    }
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunRow>> {
        read::list_runs(&self.read, query).await
    }
    async fn transitions(&self, run_id: &str) -> Result<Vec<TransitionRecord>> {
        read::transitions(&self.read, run_id).await
    }
    async fn put_log(&self, log: &LogRecord) -> Result<()> {
        runs::put_log(&self.write, log).await
    }
    async fn logs(&self, run_id: &str, node: &str) -> Result<Vec<LogRecord>> {
        read::logs(&self.read, run_id, node).await
    }
    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        read::audit(&self.read, query).await
    }
    async fn claim_run(&self, run_id: &str, lease: &Lease, steal_idle: bool) -> Result<Claim> {
        lease::claim_run(&self.write, run_id, lease, steal_idle, None).await
    }
    async fn adopt_run(&self, run_id: &str, from: &str, lease: &Lease) -> Result<Claim> {
        lease::claim_run(&self.write, run_id, lease, true, Some(from)).await
    }
    async fn claim_expired(&self, lease: &Lease, limit: u32) -> Result<Vec<String>> {
        lease::claim_expired(&self.write, lease, limit).await
    }
    async fn renew_leases(&self, lease: &Lease) -> Result<u64> {
        lease::renew_leases(&self.write, lease).await
    }
    async fn try_permit(&self, key: &PermitKey, owner: &str, max: u32, now_ms: i64) -> Result<bool> {
        permits::try_permit(&self.write, key, owner, max, now_ms).await
    }
    async fn send_command(&self, cmd: &RunCommand) -> Result<i64> {
        commands::send_command(&self.write, cmd).await
    }
    async fn take_commands(&self, target: &str, now_ms: i64) -> Result<Vec<RunCommand>> {
        commands::take_commands(&self.write, target, now_ms).await
    }
    async fn answer_command(&self, id: i64, answer: &str, now_ms: i64) -> Result<()> {
        commands::answer_command(&self.write, id, answer, now_ms).await
    }
    async fn command_answer(&self, id: i64) -> Result<Option<String>> {
        commands::command_answer(&self.write, id).await
    }
    async fn withdraw_command(&self, id: i64) -> Result<bool> {
        commands::withdraw_command(&self.write, id).await
    }
    async fn publish_sidecars(&self, replica: &str, groups: &[SidecarPresence], now_ms: i64) -> Result<()> {
        presence::publish(&self.write, replica, groups, now_ms).await
    }
    async fn sidecar_hosts(&self, group: &str, job: &str, since_ms: i64) -> Result<Vec<String>> {
        presence::hosts(&self.write, group, job, since_ms).await
    }
    async fn sidecar_presence(&self, since_ms: i64) -> Result<Vec<(String, SidecarPresence, i64)>> {
        presence::all(&self.write, since_ms).await
    }
    async fn prune(&self, before_ms: i64, batch: u32) -> Result<u64> {
        runs::prune(&self.write, before_ms, batch).await
    }
}
