//! Durable state of Madeira. The engine and server see only the `Store` trait.
//! Its SQL is written once (`sql/`) and compiled inside each backend module
//! (`sqlite`, `postgres`, `mysql`), which holds only its `dialect::Dialect`: what differs
//! between the databases, by name. The store writes the
//! decisions of SPEC §3's single exit: `create_runs`/`promote_queued` gather a flow's
//! facts under its lock and write what `madeira_core::admit` decides (a QUEUED run
//! and its `created` edge; whether it may start); `commit` writes what the planner
//! decided, a run's start included. Either way state rows and their transition
//! records go in one database transaction (batched, group commit, by the engine).

mod admission;
mod alerts;
pub mod dialect;
mod lease;
mod lifecycle;
pub mod mysql;
pub mod postgres;
mod records;
mod shards;
pub mod sqlite;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
#[cfg(test)]
mod tests;

use async_trait::async_trait;

pub use alerts::*;
pub use lease::{Claim, Lease, UNCLAIMED_GRACE_MS};
pub use lifecycle::*;
pub use records::*;
pub use shards::ShardResult;

/// Errors of the store, with the entity they concern.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("bad store url `{url}`: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("corrupt row in {table}: {detail}")]
    Corrupt { table: &'static str, detail: String },
    #[error("flow {0} not found")]
    FlowNotFound(String),
    #[error("refused by state machine: {0}")]
    Refused(String),
    #[error("replica {owner} no longer holds run(s) {}: another replica took them over", runs.join(", "))]
    LeaseLost { owner: String, runs: Vec<String> },
    #[error("replica {holder} no longer holds the cluster role `{role}`: another replica took it over")]
    NotLeader { role: String, holder: String },
    /// The store cannot take writes now (disk full, I/O error, connection lost,
    /// store file deleted): nothing was written; retry later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

impl StoreError {
    /// Whether this is the store being unable to write for now (disk full, I/O
    /// error, lost connection, a deleted store file) rather than a refusal of the
    /// request itself: such requests answer 503 and may be retried.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Unavailable(_) => true,
            StoreError::Db(e) => db_unavailable(e),
            _ => false,
        }
    }

    /// Whether a retry of the same transaction on a fresh connection may succeed
    /// (PostgreSQL and MySQL: connection lost, administrator shutdown, serialization
    /// failure, deadlock; MySQL: a lock wait that timed out). Every write is safe to retry: run ids are chosen before the
    /// insert, so a commit that did happen makes its retry fail, never duplicate.
    pub fn is_transient(&self) -> bool {
        let StoreError::Db(e) = self else { return false };
        match e {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_) => true,
            sqlx::Error::Database(d) => {
                if let Some(my) = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                    return MYSQL_TRANSIENT.contains(&my.number());
                }
                d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().is_some()
                    && d.code().is_some_and(|c| {
                        c.starts_with("08")
                            || ["57P01", "57P02", "57P03", "40001", "40P01"].contains(&c.as_ref())
                    })
            }
            _ => false,
        }
    }
}

/// MySQL/MariaDB errors a retry on a fresh connection may clear: deadlock (1213),
/// lock wait timeout (1205), server shutting down (1053), connection killed
/// (1927), server gone or lost (2006, 2013), disconnected for inactivity (4031).
const MYSQL_TRANSIENT: [u16; 7] = [1213, 1205, 1053, 1927, 2006, 2013, 4031];

/// MySQL/MariaDB errors of a store that cannot take writes now: disk full (1021),
/// table full (1114), out of memory (1037, 1038), too many connections (1040),
/// read-only server (1290, 1836), error writing or reading a file (1026, 1030),
/// and the transient ones.
const MYSQL_UNAVAILABLE: [u16; 9] = [1021, 1114, 1037, 1038, 1040, 1290, 1836, 1026, 1030];

/// SQLite result codes (busy, locked, I/O, full, can't open, read-only, not a
/// database), PostgreSQL classes 08 (connection), 53 (resources: disk full),
/// 57 (operator intervention), 58 (system error), and MySQL's numbers above.
fn db_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(d) => {
            if let Some(my) = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                return MYSQL_UNAVAILABLE.contains(&my.number()) || MYSQL_TRANSIENT.contains(&my.number());
            }
            let sqlite = d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some();
            d.code().is_some_and(|c| match sqlite {
                true => matches!(c.parse::<u32>().map(|n| n & 0xff), Ok(5 | 6 | 8 | 10 | 13 | 14 | 26)),
                false => ["08", "53", "57", "58"].iter().any(|class| c.starts_with(class)),
            })
        }
        _ => false,
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Everything Madeira keeps. One implementation per backend.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Stores `source` as a new version of `name` unless it equals the latest one.
    async fn put_flow(&self, name: &str, source: &str, content_hash: &str, now_ms: i64) -> Result<PutFlow>;
    async fn get_flow(&self, name: &str) -> Result<Option<FlowRecord>>;
    async fn list_flows(&self) -> Result<Vec<FlowRecord>>;
    async fn flow_version(&self, name: &str, version: u32) -> Result<Option<FlowVersion>>;
    /// Every stored version of a flow, oldest first.
    async fn flow_versions(&self, name: &str) -> Result<Vec<FlowVersion>>;
    async fn set_paused(&self, name: &str, paused: bool, now_ms: i64) -> Result<bool>;
    /// Deleted flows whose history was kept (`delete_flow` without purge).
    async fn deleted_flows(&self) -> Result<Vec<FlowRecord>>;
    /// Deletes a flow (refused while runs of it are QUEUED or RUNNING), writing
    /// `req.audit` in the same transaction.
    async fn delete_flow(&self, req: &DeleteFlow) -> Result<DeleteOutcome>;

    /// Keeps an event for its paused flow (at most `limit` of its type), decided
    /// under the flow's lock against `set_paused`.
    async fn queue_event(&self, event: &QueuedEvent, limit: u32) -> Result<QueueOutcome>;
    /// Up to `limit` events waiting for `flow`, oldest first.
    async fn queued_events(&self, flow: &str, limit: u32) -> Result<Vec<QueuedEvent>>;
    async fn remove_queued_events(&self, ids: &[i64]) -> Result<()>;
    /// Events waiting, per flow that has any.
    async fn queued_event_counts(&self) -> Result<Vec<(String, u64)>>;

    /// Creates a run (QUEUED, its `created` edge recorded) with its node rows,
    /// honouring the idempotency key, throttle queues and `on_overlap` in one
    /// transaction; when `max_active_runs` leaves room it is admitted to start
    /// (`CreateOutcome::Created::start`), which the engine's `Command::Start` does.
    async fn create_run(&self, run: &NewRun) -> Result<CreateOutcome>;
    /// `create_run` for several runs in one transaction (one durable commit), each
    /// decided after the ones before it. Backends without batching loop.
    async fn create_runs(&self, runs: &[NewRun]) -> Result<Vec<CreateOutcome>> {
        let mut out = Vec::with_capacity(runs.len());
        for run in runs {
            out.push(self.create_run(run).await?);
        }
        Ok(out)
    }
    /// Admits the oldest waiting QUEUED run of `flow` to start if `max_active_runs`
    /// leaves room; returns it (the engine then starts it with `Command::Start`).
    async fn promote_queued(&self, flow: &str, max_active_runs: u32, now_ms: i64) -> Result<Option<String>>;
    /// Writes a batch of state changes and their records in one transaction.
    async fn commit(&self, batch: &Batch) -> Result<()>;

    /// The idempotency key of the latest cron run of `flow` (`cron:<flow>:<instant>`),
    /// from which the scheduler knows the last tick it fired.
    async fn last_cron_key(&self, flow: &str) -> Result<Option<String>>;
    async fn load_run(&self, run_id: &str) -> Result<Option<StoredRun>>;
    /// Ids of runs that are QUEUED or RUNNING (for recovery: RUNNING runs are
    /// recovered, admitted QUEUED ones started, waiting ones promoted).
    async fn unfinished_runs(&self) -> Result<Vec<String>>;
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunRow>>;
    async fn transitions(&self, run_id: &str) -> Result<Vec<TransitionRecord>>;

    async fn put_log(&self, log: &LogRecord) -> Result<()>;
    async fn logs(&self, run_id: &str, node: &str) -> Result<Vec<LogRecord>>;

    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>>;

    /// Takes `run_id` for `lease.owner` when it is unowned, already its own, or its
    /// lease expired; with `steal_idle`, also when no node of it is RUNNING (an
    /// operator action on a run another replica holds but is not executing).
    async fn claim_run(&self, run_id: &str, lease: &Lease, steal_idle: bool) -> Result<Claim>;
    /// Takes `run_id` for `lease.owner` from `from` (which offered it), only while
    /// `from` still holds it and no node of it is RUNNING.
    async fn adopt_run(&self, run_id: &str, from: &str, lease: &Lease) -> Result<Claim>;
    /// Takes up to `limit` runs, RUNNING or admitted to start, whose lease expired
    /// (or that nobody claimed for `UNCLAIMED_GRACE_MS`); each is claimed by one
    /// replica only. Returns them.
    async fn claim_expired(&self, lease: &Lease, limit: u32) -> Result<Vec<String>>;
    /// Extends every lease `lease.owner` holds to `lease.until_ms`.
    async fn renew_leases(&self, lease: &Lease) -> Result<u64>;

    /// Takes a permit of `key`'s node for its run if fewer than `max` unfinished
    /// runs hold one (a run that already holds it keeps it). Serialised per node across
    /// replicas. Freed by `Batch::permit_releases`.
    async fn try_permit(&self, key: &PermitKey, owner: &str, max: u32, now_ms: i64) -> Result<bool>;

    /// Queues an operator action for the replica `cmd.target`; returns its id.
    async fn send_command(&self, cmd: &RunCommand) -> Result<i64>;
    /// Takes (once) every command queued for `target`, oldest first.
    async fn take_commands(&self, target: &str, now_ms: i64) -> Result<Vec<RunCommand>>;
    async fn answer_command(&self, id: i64, answer: &str, now_ms: i64) -> Result<()>;
    /// The answer, once written.
    async fn command_answer(&self, id: i64) -> Result<Option<String>>;
    /// Withdraws a command nobody took yet; false when it was already taken.
    async fn withdraw_command(&self, id: i64) -> Result<bool>;

    /// Replaces what `replica` says about its live sidecars: one entry per group.
    async fn publish_sidecars(&self, replica: &str, groups: &[SidecarPresence], now_ms: i64) -> Result<()>;
    /// Replicas that, as of `since_ms` or later, had a live sidecar of `group`
    /// declaring `job`; most recently seen first.
    async fn sidecar_hosts(&self, group: &str, job: &str, since_ms: i64) -> Result<Vec<String>>;
    /// Every replica's report seen at `since_ms` or later: `(replica, group and
    /// jobs, seen_at)`, by replica then group.
    async fn sidecar_presence(&self, since_ms: i64) -> Result<Vec<(String, SidecarPresence, i64)>>;

    /// Keeps (replaces) a succeeded shard of a sharded attempt.
    async fn put_shard_result(&self, result: &ShardResult) -> Result<()>;
    /// The kept shards of `run_id`'s `node` under idempotency key `key`, by index.
    async fn shard_results(&self, run_id: &str, node: &str, key: &str) -> Result<Vec<ShardResult>>;

    /// Deletes up to `batch` finished runs (and everything about them) finished
    /// before `before_ms`, and audit rows older than it. Returns runs deleted.
    async fn prune(&self, before_ms: i64, batch: u32) -> Result<u64>;
    /// A small durable write, to learn whether the store takes writes again after
    /// a failure (the engine calls it while commits fail).
    async fn probe(&self, now_ms: i64) -> Result<()>;

    /// Stores a console session, first deleting expired ones and, when `max_live`
    /// live ones remain, those expiring soonest.
    async fn put_session(&self, session: &SessionRecord, max_live: u32, now_ms: i64) -> Result<()>;
    /// The session whose cookie hashes to `id_hash`, unless it expired by `now_ms`.
    async fn get_session(&self, id_hash: &str, now_ms: i64) -> Result<Option<SessionRecord>>;
    /// Ends a session (sign-out); false when there was none.
    async fn delete_session(&self, id_hash: &str) -> Result<bool>;
    /// Console sessions not expired at `now_ms`.
    async fn sessions_live(&self, now_ms: i64) -> Result<u64>;
}

/// `reads` as stored: `[[upstream idx, data_version], ...]`.
pub(crate) fn reads_json(reads: &[(usize, u32)]) -> String {
    let pairs: Vec<[u64; 2]> = reads.iter().map(|(u, v)| [*u as u64, u64::from(*v)]).collect();
    serde_json::to_string(&pairs).unwrap_or_else(|_| "[]".to_string())
}

/// Milliseconds since the Unix epoch, for rows stamped by the store itself.
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
