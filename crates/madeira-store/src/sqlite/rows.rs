//! Writes row by row: a group commit (`Dialect::commit_rows`) and a batch of new
//! runs (`Dialect::run_rows`) run as one-row statements driven through rusqlite,
//! each compiled once and run for each of its rows. SQLite compiles every row of
//! a multi-row VALUES list into bytecode, so a burst's commits spent more time
//! parsing than writing.
//! - A group commit runs on the `Committer`'s own connection to the store file,
//!   on the calling thread, in one `BEGIN IMMEDIATE … COMMIT`; the connection
//!   keeps its compiled statements between commits (a chain's commits repeat
//!   them), and there is no hop to a connection thread and back. Its caller holds
//!   the store's write lock (`Dialect::write_lock`, held by every write) and not
//!   sqlx's writer connection, so the two never write at once and no commit waits
//!   for that connection's return to its pool (sqlx pings a connection on its
//!   thread as it goes back: half of a noop node's time in a chain, measured).
//! - A batch of new runs runs inside the writer's transaction: its SQLite handle
//!   is locked out of sqlx's worker thread (`lock_handle`) and driven here.
//!
//! The work blocks this thread (a commit's fsync included). A batch of new runs
//! runs under `block_in_place` on a multi-threaded runtime. A group commit does
//! not: `block_in_place` hands the worker's scheduler to another thread, woken
//! for it, and the tasks the commit's effects start then run there, so every
//! commit of a chain paid a thread wake-up and a move (on a virtual machine
//! whose idle CPUs wake late, more than the fsync itself). The engine loop
//! makes nearly every commit, one batch at a time (the others are occasional:
//! an audit record, an alert event), so one worker waits on a disk flush while
//! the other workers take the tasks queued meanwhile.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};
use sqlx::SqliteConnection;
use sqlx::error::{DatabaseError, ErrorKind};

use crate::dialect::{RowStatement, Val};
use crate::{Result, StoreError};

impl rusqlite::ToSql for Val<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Val::Int(Some(i)) => ValueRef::Integer(*i),
            Val::Int(None) | Val::Text(None) => ValueRef::Null,
            Val::Text(Some(t)) => ValueRef::Text(t.as_bytes()),
            Val::Bool(b) => ValueRef::Integer(i64::from(*b)),
        }))
    }
}

/// The connection group commits run on, opened at the first commit and again
/// after a failed one (closing a connection rolls back whatever it held).
pub(super) struct Committer {
    path: PathBuf,
    conn: Mutex<Option<Connection>>,
}

/// Compiled statements kept: the dozen a group commit uses (nodes, runs,
/// transitions and their counter, outputs, attempts and hosts, audit, permits,
/// inbox, answers, logs), and the fence's, one per number of runs it names (the
/// least recently used goes first).
const CACHED_STATEMENTS: usize = 32;

impl Committer {
    pub(super) fn new(path: PathBuf) -> Self {
        Self { path, conn: Mutex::new(None) }
    }

    /// Runs `statements` in one transaction, on this thread (see the module
    /// doc); a failure closes the connection.
    pub(super) fn commit(&self, statements: &[RowStatement<'_>]) -> Result<()> {
        in_place(|| {
            let mut slot = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            let db = match slot.take() {
                Some(db) => db,
                None => self.open()?,
            };
            db.execute_batch("BEGIN IMMEDIATE")?;
            execute(&db, statements, true)?;
            db.execute_batch("COMMIT")?;
            *slot = Some(db);
            Ok(())
        })
    }

    /// Runs `sql` on the connection (opened first if needed).
    #[cfg(test)]
    pub(super) fn execute_for_tests(&self, sql: &str) {
        let mut slot = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let db = slot.get_or_insert_with(|| self.open().expect("open the committer"));
        db.execute_batch(sql).expect(sql);
    }

    /// The store file, opened as sqlx opens the writer (`SqliteStore::open`): it
    /// exists and is in WAL mode already; SQLite's default page cache (2 MB).
    fn open(&self) -> rusqlite::Result<Connection> {
        let db = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        db.busy_timeout(Duration::from_secs(10))?;
        db.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
        db.set_prepared_statement_cache_capacity(CACHED_STATEMENTS);
        Ok(db)
    }
}

/// Runs each of `statements` for each of its rows on `db` (`cached`: compiled
/// statements kept in `db`'s cache).
fn execute(db: &Connection, statements: &[RowStatement<'_>], cached: bool) -> rusqlite::Result<()> {
    for statement in statements {
        let run = |prepared: &mut rusqlite::Statement<'_>| {
            statement
                .rows
                .iter()
                .try_for_each(|row| prepared.execute(rusqlite::params_from_iter(row)).map(drop))
        };
        if cached {
            run(&mut *db.prepare_cached(&statement.sql)?)?;
        } else {
            run(&mut db.prepare(&statement.sql)?)?;
        }
    }
    Ok(())
}

/// Runs `work` here, as it is.
fn in_place(work: impl FnOnce() -> rusqlite::Result<()>) -> Result<()> {
    work().map_err(|e| StoreError::Db(sqlx::Error::Database(Box::new(RowError::from(e)))))
}

/// Runs `work` here, under `block_in_place` on a multi-threaded runtime.
fn blocking(work: impl FnOnce() -> rusqlite::Result<()>) -> Result<()> {
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let done = if multi_thread { tokio::task::block_in_place(work) } else { work() };
    done.map_err(|e| StoreError::Db(sqlx::Error::Database(Box::new(RowError::from(e)))))
}

/// Runs `statements` on `conn` inside the transaction it is in (see the module
/// comment). A failure leaves the transaction open: the caller rolls it back.
pub(super) async fn run(conn: &mut SqliteConnection, statements: &[RowStatement<'_>]) -> Result<()> {
    let mut handle = conn.lock_handle().await?;
    let raw = handle.as_raw_handle();
    let done = blocking(|| {
        // SAFETY: `handle` keeps the connection locked out of sqlx's worker thread
        // until it drops, after this borrowed (never closed) rusqlite connection.
        let db = unsafe { Connection::from_handle(raw.as_ptr()) }?;
        execute(&db, statements, false)
    });
    drop(handle);
    done
}

/// A failure of a write row by row, told like sqlx's SQLite errors: `code` is SQLite's
/// extended result code, so `StoreError::is_unavailable` reads a full disk alike.
#[derive(Debug)]
pub struct RowError {
    code: Option<i32>,
    message: String,
}

impl From<rusqlite::Error> for RowError {
    fn from(e: rusqlite::Error) -> Self {
        match &e {
            rusqlite::Error::SqliteFailure(f, message) => RowError {
                code: Some(f.extended_code),
                message: message.clone().unwrap_or_else(|| f.to_string()),
            },
            other => RowError { code: None, message: other.to_string() },
        }
    }
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(code) => write!(f, "(code: {code}) {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for RowError {}

impl DatabaseError for RowError {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        self.code.map(|c| Cow::Owned(c.to_string()))
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> ErrorKind {
        match self.code {
            Some(1555 | 2067) => ErrorKind::UniqueViolation,
            Some(787) => ErrorKind::ForeignKeyViolation,
            Some(1299) => ErrorKind::NotNullViolation,
            Some(275) => ErrorKind::CheckViolation,
            _ => ErrorKind::Other,
        }
    }
}
