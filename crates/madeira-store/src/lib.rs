//! Durable state of Madeira. The engine and server see only the store's traits:
//! one per aggregate, `Store` their sum (`aggregates.rs`).
//! Its SQL is written once (`sql/`) and compiled inside each backend module
//! (`sqlite`, `postgres`, `mysql`), which holds only its `dialect::Dialect`: what differs
//! between the databases, by name. The store writes the
//! decisions of SPEC §3's single exit: `create_runs`/`promote_queued` gather a flow's
//! facts under its lock and write what `madeira_core::admit` decides (a QUEUED run
//! and its `created` edge; whether it may start); `commit` writes what the planner
//! decided, a run's start included. Either way state rows and their transition
//! records go in one database transaction (batched, group commit, by the engine).

mod admission;
mod aggregates;
mod alerts;
mod archive;
mod backfills;
pub mod dialect;
mod lease;
mod lifecycle;
pub mod mysql;
mod packed;
pub mod postgres;
mod records;
mod shards;
pub mod sqlite;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
#[cfg(test)]
mod tests;
mod xxl;

pub use aggregates::*;
pub use alerts::*;
pub use backfills::*;
pub use lease::{Claim, Lease, UNCLAIMED_GRACE_MS};
pub use lifecycle::*;
pub use records::*;
pub use shards::ShardResult;
pub use xxl::{XxlCallbackRow, XxlExecutorRow, XxlStore};

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
            let sqlite = d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
                || d.try_downcast_ref::<sqlite::RowError>().is_some();
            d.code().is_some_and(|c| match sqlite {
                true => matches!(c.parse::<u32>().map(|n| n & 0xff), Ok(5 | 6 | 8 | 10 | 13 | 14 | 26)),
                false => ["08", "53", "57", "58"].iter().any(|class| c.starts_with(class)),
            })
        }
        _ => false,
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

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
