//! Which database errors are worth a retry: connection errors, serialization
//! failures, deadlocks and lock timeouts are; syntax, constraint, permission and
//! every other error are not. Also recognises a statement the server cancelled
//! (its timeout, or our cancel request).

use sqlx::error::DatabaseError;

/// What an error means for the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Retry may succeed: the connection, or contention with other transactions.
    Retryable,
    /// The statement was cancelled on the server (statement timeout or cancel).
    Cancelled,
    /// The connection is gone (closed, killed, network).
    Connection,
    Permanent,
}

/// PostgreSQL SQLSTATEs (and MySQL's, which share 40001) that are retryable.
const RETRYABLE_STATES: &[&str] = &["40001", "40P01", "55P03", "57P01", "57P02", "57P03"];
/// MySQL/MariaDB error numbers: deadlock, lock wait timeout, lock on a
/// read-only/killed table, too many connections.
const RETRYABLE_NUMBERS: &[u16] = &[1213, 1205, 1040, 1203, 1614];
/// Cancelled by a statement timeout or `KILL QUERY`: MariaDB max_statement_time,
/// MySQL max_execution_time, query interrupted.
const CANCELLED_NUMBERS: &[u16] = &[1969, 3024, 1317, 1028];

pub(crate) fn classify(error: &sqlx::Error) -> Class {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => Class::Connection,
        sqlx::Error::Database(db) => classify_db(db.as_ref()),
        _ => Class::Permanent,
    }
}

fn classify_db(db: &dyn DatabaseError) -> Class {
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        let n = my.number();
        if CANCELLED_NUMBERS.contains(&n) {
            return Class::Cancelled;
        }
        if RETRYABLE_NUMBERS.contains(&n) {
            return Class::Retryable;
        }
        // 2006 server gone away, 2013 lost connection, 1927 connection killed.
        if [2006, 2013, 1927, 1053].contains(&n) {
            return Class::Connection;
        }
    }
    let code = db.code();
    let code = code.as_deref().unwrap_or("");
    if code == "57014" {
        return Class::Cancelled;
    }
    if code.starts_with("08") {
        return Class::Connection;
    }
    if RETRYABLE_STATES.contains(&code) {
        return Class::Retryable;
    }
    Class::Permanent
}

/// `KILL` of a session that no longer exists (MySQL/MariaDB error 1094);
/// PostgreSQL's cancel and terminate functions just return false then.
pub(crate) fn unknown_session(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db)
        if db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>().is_some_and(|m| m.number() == 1094))
}

/// A one-line message for the attempt: the database's own text and code.
pub(crate) fn describe(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| format!(" (SQLSTATE {c})")).unwrap_or_default();
            let number = db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|m| format!(" [error {}]", m.number()))
                .unwrap_or_default();
            format!("{}{code}{number}", db.message())
        }
        sqlx::Error::Io(e) => format!("connection error: {e}"),
        sqlx::Error::Tls(e) => format!("TLS error: {e}"),
        sqlx::Error::PoolTimedOut => "timed out waiting for a pooled connection".into(),
        sqlx::Error::PoolClosed => "the pool is closed".into(),
        other => other.to_string(),
    }
}
