//! Large writes row by row (`Dialect::run_rows`: a group commit, a batch of new
//! runs): the writer's SQLite handle is locked out of sqlx's worker thread
//! (`lock_handle`) and driven here through rusqlite, each one-row statement
//! compiled once and run for each of its rows, in one `BEGIN IMMEDIATE … COMMIT`
//! or inside the caller's transaction. SQLite compiles every row of a multi-row
//! VALUES list into bytecode, so a burst's commits spent more time parsing than
//! writing. The work blocks this thread (a commit's fsync included), so on a
//! multi-threaded runtime it runs under `block_in_place`.

use std::borrow::Cow;
use std::fmt;

use rusqlite::types::{ToSqlOutput, ValueRef};
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

/// Runs `statements` on `conn`, in a transaction of their own where
/// `own_transaction` (see the module comment). A failure leaves the transaction
/// open: the caller rolls it back.
pub(super) async fn run(
    conn: &mut SqliteConnection,
    statements: &[RowStatement<'_>],
    own_transaction: bool,
) -> Result<()> {
    let mut handle = conn.lock_handle().await?;
    let raw = handle.as_raw_handle();
    let work = || -> rusqlite::Result<()> {
        // SAFETY: `handle` keeps the connection locked out of sqlx's worker thread
        // until it drops, after this borrowed (never closed) rusqlite connection.
        let db = unsafe { rusqlite::Connection::from_handle(raw.as_ptr()) }?;
        if own_transaction {
            db.execute_batch("BEGIN IMMEDIATE")?;
        }
        for statement in statements {
            let mut prepared = db.prepare(&statement.sql)?;
            for row in &statement.rows {
                prepared.execute(rusqlite::params_from_iter(row))?;
            }
        }
        if own_transaction {
            db.execute_batch("COMMIT")?;
        }
        Ok(())
    };
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let done = if multi_thread { tokio::task::block_in_place(work) } else { work() };
    drop(handle);
    done.map_err(|e| StoreError::Db(sqlx::Error::Database(Box::new(RowError::from(e)))))
}

/// A failure of `run`, told like sqlx's SQLite errors: `code` is SQLite's
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
