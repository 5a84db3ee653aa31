//! SQLite backend: one file in WAL mode with durable (`synchronous = FULL`)
//! commits; every write holds the store's write lock for its transaction (one
//! writer at a time, as SQLite takes them), a single-connection pool takes the
//! writes other than group commits, a small pool serves reads. Every write goes
//! through `WriteGuard` (`guard.rs`): the file is checked first, and a failed
//! write replaces the writer connection.
//! Group commits run on a connection of their own, row by row (`rows.rs`), and
//! so do large batches of new runs (on the writer's handle).
//! The SQL is `sql/`, compiled here for this dialect.

mod guard;
mod rows;
pub mod space;
// The SQL written once, compiled for this dialect (and again for the others).
#[allow(clippy::duplicate_mod)]
#[path = "../sql/mod.rs"]
mod sql;

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::dialect::{Dialect, RowStatement, SqlStore, TransitionIds};
use crate::{Result, StoreError};
pub use rows::RowError;

/// SQLite's dialect; holds the writer's guard and the transition ids it gives.
pub struct SqliteDialect {
    guard: guard::WriteGuard,
    transition_ids: TransitionIds,
    /// The group commits' connection (`rows.rs`).
    committer: rows::Committer,
    /// Held by every write (`Dialect::write_lock`).
    write_lock: tokio::sync::Mutex<()>,
}

impl Dialect for SqliteDialect {
    type DB = Sqlite;
    /// Well under SQLite's 32,766 bound variables.
    const CHUNK: usize = 500;
    const BYTEWISE: &'static str = "BINARY";
    const SCRIPTS: bool = true;
    const ROWS: bool = true;

    async fn run_rows(conn: &mut sqlx::SqliteConnection, statements: &[RowStatement<'_>]) -> Result<()> {
        rows::run(conn, statements).await
    }

    async fn commit_rows(&self, statements: &[RowStatement<'_>]) -> Result<()> {
        // The caller holds the write lock, which keeps other writes out meanwhile.
        self.committer.commit(statements)
    }

    fn write_lock(&self) -> Option<&tokio::sync::Mutex<()>> {
        Some(&self.write_lock)
    }

    async fn insert_id(pool: &sqlx::SqlitePool, mut q: sqlx::QueryBuilder<'_, Sqlite>) -> Result<i64> {
        q.push(" RETURNING id");
        Ok(q.build_query_scalar().fetch_one(pool).await?)
    }

    fn before_write(&self) -> Result<()> {
        self.guard.check_file()
    }

    fn transition_ids(&self) -> Option<&TransitionIds> {
        Some(&self.transition_ids)
    }

    fn after_write<T>(&self, result: Result<T>) -> Result<T> {
        if result.is_err() {
            self.transition_ids.forget();
        }
        self.guard.after(result)
    }
}

type D = SqliteDialect;
/// `D`'s connection type, named (the shared SQL implements a trait for it).
type DConn = sqlx::SqliteConnection;

/// The store on SQLite.
pub type SqliteStore = SqlStore<SqliteDialect>;

impl SqlStore<SqliteDialect> {
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
        // `sqlite::memory:` gets a file name of sqlx's making (`file:sqlx-in-memory-N`).
        let database = url.trim_start_matches("sqlite:").trim_start_matches("//").split('?').next();
        if database == Some(":memory:") || url.contains("mode=memory") {
            return Err(StoreError::BadUrl {
                url: url.to_string(),
                reason: "a store in memory would lose every run when its writer connection is replaced \
                         (after any failed write); give a file: sqlite:///var/lib/madeira/madeira.db"
                    .into(),
            });
        }
        let path = options.get_filename().to_path_buf();
        let poisoned = Arc::new(AtomicBool::new(false));
        let flag = poisoned.clone();
        // No ping before each use: the writer is in this process (the guard checks
        // its health), and a ping is one more hop to the connection's thread.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .test_before_acquire(false)
            .before_acquire(move |_, _| {
                let healthy = guard::healthy(&flag);
                Box::pin(async move { Ok(healthy) })
            })
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("../../migrations/sqlite").run(&writer).await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.read_only(true))
            .await?;
        let guard = guard::WriteGuard::new(path.clone(), poisoned)?;
        Ok(Self {
            writer,
            reader,
            dialect: SqliteDialect {
                guard,
                transition_ids: TransitionIds::default(),
                committer: rows::Committer::new(path),
                write_lock: tokio::sync::Mutex::new(()),
            },
            answer_within: None,
        })
    }

    /// Opens the database file at `path`.
    pub async fn open_path(path: &std::path::Path) -> Result<Self> {
        Self::open(&format!("sqlite://{}", path.display())).await
    }

    /// Caps the database at its current size on the writer connection and the
    /// group commits' one, so the next write that needs a new page fails as on a
    /// full disk (SQLITE_FULL). The cap ends with each connection (a failed write
    /// replaces it).
    #[cfg(test)]
    pub(crate) async fn fill_writer_for_tests(&self) {
        let (pages,): (i64,) =
            sqlx::query_as("PRAGMA page_count").fetch_one(&self.writer).await.expect("page_count");
        let cap = format!("PRAGMA max_page_count = {pages}");
        sqlx::query(&cap).execute(&self.writer).await.expect("cap");
        self.dialect.committer.execute_for_tests(&cap);
    }
}
