//! SQLite backend: one file in WAL mode with durable (`synchronous = FULL`)
//! commits; a single-connection pool serialises writes, a small pool serves reads.
//! Every write goes through `WriteGuard` (`guard.rs`): the file is checked first,
//! and a failed write replaces the writer connection.

mod alerts;
mod commands;
mod commit;
mod flows;
mod guard;
mod inbox;
mod lease;
mod permits;
mod presence;
mod read;
mod runs;

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
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
    guard: guard::WriteGuard,
}

impl SqliteStore {
    /// `write` through the guard (as `guarded!`), for the other aggregates' traits.
    pub(crate) async fn guarded<T>(&self, write: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.guard.check_file()?;
        self.guard.after(write.await)
    }
}

/// A write through the guard: file checked, a failure poisons the writer.
macro_rules! guarded {
    ($self:ident, $call:expr) => {{
        $self.guard.check_file()?;
        $self.guard.after($call.await)
    }};
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
        let in_memory = options.get_filename().as_os_str() == ":memory:" || url.contains("mode=memory");
        let path = (!in_memory).then(|| options.get_filename().to_path_buf());
        let poisoned = Arc::new(AtomicBool::new(false));
        let flag = poisoned.clone();
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .before_acquire(move |_, _| {
                let healthy = guard::healthy(&flag);
                Box::pin(async move { Ok(healthy) })
            })
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("../../migrations/sqlite").run(&write).await?;
        let read = SqlitePoolOptions::new().max_connections(4).connect_with(options.read_only(true)).await?;
        let guard = guard::WriteGuard::new(path, poisoned)?;
        Ok(Self { write, read, guard })
    }

    /// Caps the database at its current size on the writer connection, so the
    /// next write that needs a new page fails as on a full disk (SQLITE_FULL).
    /// The cap ends with that connection.
    #[cfg(test)]
    pub(crate) async fn fill_writer_for_tests(&self) {
        let (pages,): (i64,) =
            sqlx::query_as("PRAGMA page_count").fetch_one(&self.write).await.expect("page_count");
        sqlx::query(&format!("PRAGMA max_page_count = {pages}")).execute(&self.write).await.expect("cap");
    }

    /// Opens the database file at `path`.
    pub async fn open_path(path: &std::path::Path) -> Result<Self> {
        Self::open(&format!("sqlite://{}", path.display())).await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn put_flow(&self, name: &str, source: &str, hash: &str, now_ms: i64) -> Result<PutFlow> {
        guarded!(self, flows::put_flow(&self.write, name, source, hash, now_ms))
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
        guarded!(self, flows::set_paused(&self.write, name, paused, now_ms))
    }
    async fn create_run(&self, run: &NewRun) -> Result<CreateOutcome> {
        let mut outcomes = guarded!(self, runs::create_runs(&self.write, std::slice::from_ref(run)))?;
        outcomes.pop().ok_or_else(|| StoreError::Refused("no outcome for the run".into()))
    }
    async fn create_runs(&self, runs: &[NewRun]) -> Result<Vec<CreateOutcome>> {
        guarded!(self, runs::create_runs(&self.write, runs))
    }
    async fn promote_queued(&self, flow: &str, max: u32, now_ms: i64) -> Result<Option<String>> {
        guarded!(self, runs::promote_queued(&self.write, flow, max, now_ms))
    }
    async fn commit(&self, batch: &Batch) -> Result<()> {
        guarded!(self, commit::commit(&self.write, batch))
    }
    async fn last_cron_key(&self, flow: &str) -> Result<Option<String>> {
        read::last_cron_key(&self.read, flow).await
    }
    async fn load_run(&self, run_id: &str) -> Result<Option<StoredRun>> {
        read::load_run(&self.read, run_id).await
    }
    async fn unfinished_runs(&self) -> Result<Vec<String>> {
        guarded!(self, read::unfinished_runs(&self.write))
    }
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunRow>> {
        read::list_runs(&self.read, query).await
    }
    async fn transitions(&self, run_id: &str) -> Result<Vec<TransitionRecord>> {
        read::transitions(&self.read, run_id).await
    }
    async fn put_log(&self, log: &LogRecord) -> Result<()> {
        guarded!(self, runs::put_log(&self.write, log))
    }
    async fn logs(&self, run_id: &str, node: &str) -> Result<Vec<LogRecord>> {
        read::logs(&self.read, run_id, node).await
    }
    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        read::audit(&self.read, query).await
    }
    async fn claim_run(&self, run_id: &str, lease: &Lease, steal_idle: bool) -> Result<Claim> {
        guarded!(self, lease::claim_run(&self.write, run_id, lease, steal_idle, None))
    }
    async fn adopt_run(&self, run_id: &str, from: &str, lease: &Lease) -> Result<Claim> {
        guarded!(self, lease::claim_run(&self.write, run_id, lease, true, Some(from)))
    }
    async fn claim_expired(&self, lease: &Lease, limit: u32) -> Result<Vec<String>> {
        guarded!(self, lease::claim_expired(&self.write, lease, limit))
    }
    async fn renew_leases(&self, lease: &Lease) -> Result<u64> {
        guarded!(self, lease::renew_leases(&self.write, lease))
    }
    async fn try_permit(&self, key: &PermitKey, owner: &str, max: u32, now_ms: i64) -> Result<bool> {
        guarded!(self, permits::try_permit(&self.write, key, owner, max, now_ms))
    }
    async fn send_command(&self, cmd: &RunCommand) -> Result<i64> {
        guarded!(self, commands::send_command(&self.write, cmd))
    }
    async fn take_commands(&self, target: &str, now_ms: i64) -> Result<Vec<RunCommand>> {
        guarded!(self, commands::take_commands(&self.write, target, now_ms))
    }
    async fn answer_command(&self, id: i64, answer: &str, now_ms: i64) -> Result<()> {
        guarded!(self, commands::answer_command(&self.write, id, answer, now_ms))
    }
    async fn command_answer(&self, id: i64) -> Result<Option<String>> {
        guarded!(self, commands::command_answer(&self.write, id))
    }
    async fn withdraw_command(&self, id: i64) -> Result<bool> {
        guarded!(self, commands::withdraw_command(&self.write, id))
    }
    async fn publish_sidecars(&self, replica: &str, groups: &[SidecarPresence], now_ms: i64) -> Result<()> {
        guarded!(self, presence::publish(&self.write, replica, groups, now_ms))
    }
    async fn sidecar_hosts(&self, group: &str, job: &str, since_ms: i64) -> Result<Vec<String>> {
        guarded!(self, presence::hosts(&self.write, group, job, since_ms))
    }
    async fn sidecar_presence(&self, since_ms: i64) -> Result<Vec<(String, SidecarPresence, i64)>> {
        guarded!(self, presence::all(&self.write, since_ms))
    }
    async fn prune(&self, before_ms: i64, batch: u32) -> Result<u64> {
        guarded!(self, runs::prune(&self.write, before_ms, batch))
    }
    async fn probe(&self, now_ms: i64) -> Result<()> {
        guarded!(self, probe(&self.write, now_ms))
    }
}

async fn probe(pool: &SqlitePool, now_ms: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO store_probe (id, at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at = excluded.at",
    )
    .bind(now_ms)
    .execute(pool)
    .await?;
    Ok(())
}
