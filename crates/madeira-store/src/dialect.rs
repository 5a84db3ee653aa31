//! What differs between the SQL databases Madeira runs on, as the named items of
//! one small trait, and `SqlStore<D>`, the store that the SQL written once (in
//! `sql/`) implements for each dialect. `sql/` is compiled once per backend module
//! (`sqlite`, `postgres`, `mysql`), which names its dialect `D`: every query is
//! ordinary typed sqlx code for that database, and every difference is looked up
//! on `D`. Placeholders are written `$n`, in order, each once (sqlx's SQLite driver
//! reads `$n` as the n-th argument; `Dialect::sql` turns them into MySQL's `?`);
//! `QueryBuilder::push_bind` writes each backend's own. Identifiers that MySQL
//! reserves (`key`, `trigger`, `reads`) are double-quoted, which every backend
//! reads as an identifier (MySQL under the ANSI_QUOTES mode its connections set).
//! The SQLite that sqlx bundles (3.46) reads the PostgreSQL forms the shared SQL
//! uses (`IS DISTINCT FROM`, `UPDATE … FROM`, `RETURNING`, `ON CONFLICT … DO
//! UPDATE`, `TRUE`/`FALSE`), so only what the list below names differs.

use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;

use sqlx::pool::PoolOptions;
use sqlx::query_builder::Separated;
use sqlx::{Connection, Database, Pool, QueryBuilder, Transaction};

use crate::{Result, StoreError};

/// Serialised decisions: the flow's runs and versions, or one throttle's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockSpace {
    Flow,
    Permit,
}

/// The items that differ between SQL dialects. (`async fn` here is fine: every
/// caller names a concrete dialect, so the futures' `Send` is known.)
#[allow(async_fn_in_trait)]
pub trait Dialect: Send + Sync + Sized + 'static {
    type DB: Database;

    /// Rows per multi-row statement, under the database's bound-variable limit.
    const CHUNK: usize;
    /// A collation that orders strings bytewise.
    const BYTEWISE: &'static str;

    // The defaults below suit a database with one writer, which serialises every
    // transaction by itself (SQLite); several writers (PostgreSQL) override them.

    /// Appended to a SELECT in a write transaction that must lock the rows it reads.
    const FOR_UPDATE: &'static str = "";
    /// Appended to a SELECT that claims rows: skips rows another transaction is
    /// claiming instead of waiting for it.
    const SKIP_LOCKED: &'static str = "";

    /// Serialises, until the end of `tx`, the decisions about `key` in `space`
    /// across every process sharing the database.
    async fn lock(_tx: &mut Transaction<'_, Self::DB>, _space: LockSpace, _key: &str) -> Result<()> {
        Ok(())
    }

    /// ` ON CONFLICT (keys) DO UPDATE SET c = excluded.c, …` for `columns`: what
    /// an INSERT appends to replace the row whose unique `keys` it repeats.
    fn upsert(keys: &str, columns: &[&str]) -> String {
        let set: Vec<String> = columns.iter().map(|c| format!("{c} = excluded.{c}")).collect();
        format!(" ON CONFLICT ({keys}) DO UPDATE SET {}", set.join(", "))
    }

    /// `sql` with its `$n` placeholders in this database's form (MySQL: `?`).
    fn sql(sql: &str) -> Cow<'_, str> {
        Cow::Borrowed(sql)
    }

    /// The SQL type a bound integer is cast to (MySQL: `SIGNED`).
    const BIGINT: &'static str = "BIGINT";

    /// The database's clock, in milliseconds since the epoch, as an SQL
    /// expression: leases are written and judged by it only, never by a
    /// replica's clock (which may be skewed). SQLite: the one process's clock.
    const NOW_MS: &'static str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

    /// `a IS DISTINCT FROM b` (NULL-safe inequality).
    fn is_distinct(a: &str, b: &str) -> String {
        format!("{a} IS DISTINCT FROM {b}")
    }

    /// How a SELECT list reads `column` as text when this database keeps it as
    /// bytes (MySQL: idempotency keys, so they compare byte for byte).
    fn bytes_as_text(column: &str) -> Cow<'_, str> {
        Cow::Borrowed(column)
    }

    /// The column a flow's cron keys are filtered by (`LIKE 'cron:%'`) and the
    /// expression they are ordered by, bytewise, so that the latest is one step
    /// of an index on `(flow, …)`. MySQL indexes a key (a blob) by its first 255
    /// bytes only, a prefix that cannot order: it has those bytes as a generated
    /// column with its own index.
    fn cron_key_order() -> (&'static str, Cow<'static, str>) {
        ("idempotency_key", Cow::Owned(format!("idempotency_key COLLATE {}", Self::BYTEWISE)))
    }

    /// An index hint after `FROM runs` for a runs list filtered by flow and/or
    /// state, newest first (none: the planner's choice serves; MySQL's may
    /// intersect two indexes and sort the whole flow, `docs/scale.md`).
    fn runs_list_hint(_flow: bool, _state: bool) -> &'static str {
        ""
    }

    /// Runs the INSERT `q` (one row into a table whose key `id` the database
    /// numbers) and answers the new row's `id`.
    async fn insert_id(pool: &Pool<Self::DB>, q: QueryBuilder<'_, Self::DB>) -> Result<i64>;

    /// Appends to `q` one UPDATE of `table` from `rows`, a derived table `v` with
    /// `columns` (the first is the key matched with `table`'s column of that name):
    /// each `(column, expression)` of `set` is assigned, the expressions reading
    /// `v.` and `{table}.` columns. `push_row` binds one row's values in order.
    fn update_from<'a, T>(
        q: &mut QueryBuilder<'a, Self::DB>,
        table: &str,
        columns: &[&str],
        set: &[(&str, &str)],
        rows: impl IntoIterator<Item = T>,
        push_row: impl FnMut(Separated<'_, 'a, Self::DB, &'static str>, T),
    ) {
        q.push(format!("WITH v ({}) AS (", columns.join(", ")));
        q.push_values(rows, push_row);
        let set: Vec<String> = set.iter().map(|(c, e)| format!("{c} = {e}")).collect();
        let key = columns[0];
        q.push(format!(") UPDATE {table} SET {} FROM v WHERE {table}.{key} = v.{key}", set.join(", ")));
    }

    /// Several statements may be sent as one script (`a; b; c`) with their binds
    /// numbered in order across it. SQLite: one call to its worker thread instead
    /// of one round trip per statement; the others prepare one statement per call.
    const SCRIPTS: bool = false;

    /// Whether a group commit (`commit_rows`) and a large batch of new runs
    /// (`run_rows`) run as statements of one row each, each compiled once and run
    /// for every row, instead of multi-row statements (SQLite compiles every row
    /// of a multi-row VALUES list into bytecode: parsing was a third of a
    /// settlement burst's instructions).
    const ROWS: bool = false;

    /// Runs `statements` on `conn` inside the caller's transaction: each one-row
    /// statement is prepared once and run for each of its rows, in order. A
    /// failure leaves the transaction open for the caller to roll back (as a
    /// failed script does). Only called where `ROWS`.
    async fn run_rows(
        _conn: &mut <Self::DB as Database>::Connection,
        _statements: &[RowStatement<'_>],
    ) -> Result<()> {
        Err(StoreError::Refused("this database runs no row-by-row statements".into()))
    }

    /// Runs a group commit's `statements` (built row by row) in a transaction of
    /// their own, which a failure ends (rolled back). Only called where `ROWS`,
    /// under the write lock (`write_lock`), so that no other write runs meanwhile
    /// (SQLite: on a connection to the store file kept for group commits,
    /// `sqlite/rows.rs`).
    async fn commit_rows(&self, _statements: &[RowStatement<'_>]) -> Result<()> {
        Err(StoreError::Refused("this database runs no row-by-row statements".into()))
    }

    /// Held by every write of this store for its whole transaction where the
    /// database takes one writer at a time (SQLite: its writer connection and the
    /// group commits' one write the same file); `None` where transactions run side
    /// by side (PostgreSQL, MySQL).
    fn write_lock(&self) -> Option<&tokio::sync::Mutex<()>> {
        None
    }

    /// How often a transaction failing with a transient error is tried again
    /// (PostgreSQL: lost connection, shutdown, serialization failure, deadlock).
    const RETRIES: u32 = 0;

    /// How long a read or the health probe may wait for the database, its
    /// connection and retries included, before it fails as
    /// `StoreError::Unavailable`: a database that stopped answering (frozen, a
    /// network that drops packets) is told within this instead of holding the
    /// request, and the probe makes `/readyz` say so. `None`: SQLite, whose work
    /// runs in this process (and waits at most its busy timeout).
    const ANSWER_WITHIN: Option<Duration> = None;

    /// The ids this store gives `transitions` rows itself, when it does (SQLite:
    /// the table is keyed by (run_id, id) without a rowid, so nothing numbers it);
    /// `None`: the database numbers them (an auto-increment key).
    fn transition_ids(&self) -> Option<&TransitionIds> {
        None
    }

    // Time partitions of `logs` and `run_archive` (PostgreSQL only:
    // `postgres/partitions.rs`); elsewhere there are none and these do nothing.

    /// Makes the missing day partitions of the UTC days from `from_ms`'s to
    /// `to_ms`'s; answers how many were made.
    async fn keep_partitions(_pool: &Pool<Self::DB>, _from_ms: i64, _to_ms: i64) -> Result<u32> {
        Ok(0)
    }

    /// The UTC days (first milliseconds, in order) that have day partitions.
    async fn partition_days(_pool: &Pool<Self::DB>) -> Result<Vec<i64>> {
        Ok(Vec::new())
    }

    /// Detaches and drops the day partitions of the day at `day_ms`; false when
    /// another process is retiring a day now.
    async fn retire_day(_pool: &Pool<Self::DB>, _day_ms: i64) -> Result<bool> {
        Ok(false)
    }

    /// Detaches and drops an upgraded table's `_old` partition (the table as it was
    /// before partitioning) once no run of its id range is left in the store;
    /// answers how many were dropped.
    async fn retire_old(_pool: &Pool<Self::DB>) -> Result<u32> {
        Ok(0)
    }

    /// The run ids `[lo, hi)` whose `logs` and `run_archive` rows live in day
    /// partitions (dropped with their day rather than deleted with their run).
    async fn partitioned_ids(_pool: &Pool<Self::DB>) -> Result<Option<(String, String)>> {
        Ok(None)
    }

    /// The run id of a row a write could not place (no partition for its day).
    fn missing_partition(_e: &StoreError) -> Option<String> {
        None
    }

    /// Makes the partitions of run id `key`'s day (after `missing_partition`).
    async fn make_room(_pool: &Pool<Self::DB>, _key: &str) -> Result<u32> {
        Ok(0)
    }

    /// Checked before every write (SQLite: the store file is still the one opened).
    fn before_write(&self) -> Result<()> {
        Ok(())
    }

    /// Sees every write's result (SQLite: a failure poisons the writer connection).
    fn after_write<T>(&self, result: Result<T>) -> Result<T> {
        result
    }
}

/// A value bound into the shared SQL: what `Script` binds through sqlx, or hands
/// to `Dialect::run_rows` row by row.
#[derive(Debug, Clone, PartialEq)]
pub enum Val<'a> {
    Int(Option<i64>),
    Text(Option<Cow<'a, str>>),
    Bool(bool),
}

impl<'a> Val<'a> {
    /// Borrowed text.
    pub fn text(s: &'a str) -> Self {
        Val::Text(Some(Cow::Borrowed(s)))
    }

    /// Borrowed text or NULL.
    pub fn opt_text(s: Option<&'a str>) -> Self {
        Val::Text(s.map(Cow::Borrowed))
    }

    /// Owned text.
    pub fn owned(s: String) -> Self {
        Val::Text(Some(Cow::Owned(s)))
    }

    pub fn int(i: impl Into<i64>) -> Self {
        Val::Int(Some(i.into()))
    }
}

/// One statement for `Dialect::run_rows`: its SQL for one row (the dialect's
/// placeholders) and the values of each row it is run for.
#[derive(Debug)]
pub struct RowStatement<'a> {
    pub sql: String,
    pub rows: Vec<Vec<Val<'a>>>,
}

/// The last id a store numbering `transitions` itself gave (`Dialect::
/// transition_ids`), kept between commits; unknown at first and after a failed
/// write, and then read from the one-row table `transition_seq`, which each
/// commit moves on with its rows. A commit rolled back leaves a gap: ids stay
/// unique and increasing.
#[derive(Debug, Default)]
pub struct TransitionIds(std::sync::Mutex<Option<i64>>);

impl TransitionIds {
    /// The last id given, when known.
    pub(crate) fn last(&self) -> Option<i64> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `last` as the last id given.
    pub(crate) fn set(&self, last: i64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(last);
    }

    /// Forgets the last id (a write failed): the next commit reads it again.
    pub(crate) fn forget(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// The store over one SQL database: `writer` takes every write (SQLite: its one
/// connection), `reader` serves plain reads (PostgreSQL: the same pool).
pub struct SqlStore<D: Dialect> {
    pub(crate) writer: Pool<D::DB>,
    pub(crate) reader: Pool<D::DB>,
    pub(crate) dialect: D,
    /// `Dialect::ANSWER_WITHIN`, shortened by tests.
    pub(crate) answer_within: Option<Duration>,
}

impl<D: Dialect> SqlStore<D> {
    /// Runs a write (`op` is one transaction) on the writer, between the dialect's
    /// checks, retrying transient errors. A write has no answer deadline: one
    /// abandoned after its COMMIT was sent could have committed (a run made, a
    /// command taken) while its caller is told it failed, and one waiting for
    /// another transaction's lock is not a database gone.
    pub(crate) async fn write<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.write_within(None, op).await
    }

    /// `write` within the dialect's `ANSWER_WITHIN`: the health probe, a one-row
    /// upsert whose outcome nothing else depends on.
    pub(crate) async fn write_bounded<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.write_within(self.answer_within, op).await
    }

    async fn write_within<T, F, Fut>(&self, limit: Option<Duration>, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let _one_writer = match self.dialect.write_lock() {
            Some(lock) => Some(lock.lock().await),
            None => None,
        };
        self.dialect.before_write()?;
        let mut op = op;
        let mut result = answered_within(limit, retry(D::RETRIES, &mut op)).await;
        // A row for a day without its partition (a keeper behind, a clock ahead):
        // the day's partition is made and the write tried once more, so no run
        // fails for it.
        if let Err(e) = &result
            && let Some(key) = D::missing_partition(e)
        {
            match D::make_room(&self.writer, &key).await {
                Ok(_) => result = answered_within(limit, retry(D::RETRIES, &mut op)).await,
                Err(made) => {
                    tracing::error!(error = %made, run_id = %key, "no time partition for a run's row")
                }
            }
        }
        self.dialect.after_write(result)
    }

    /// Runs a read, retrying transient errors.
    pub(crate) async fn read<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        answered_within(self.answer_within, retry(D::RETRIES, op)).await
    }

    /// Shortens the wait for an answer (tests of a database that stops answering).
    #[cfg(test)]
    pub(crate) fn answer_within_for_tests(&mut self, limit: Duration) {
        self.answer_within = Some(limit);
    }
}

/// Connections of a networked store's pool (PostgreSQL, MySQL).
pub(crate) const POOL_SIZE: u32 = 8;
/// How long a transaction waits for a pooled connection before it fails.
pub(crate) const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection idle for longer than this is pinged before it is handed out.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The pool settings of the networked dialects (PostgreSQL, MySQL). sqlx pings
/// every connection as it returns to the pool; pinging it again before each use
/// (sqlx's default) costs a round trip per transaction, so only a connection that
/// sat idle for more than a second (where a server restart or a terminated backend
/// could have closed it since) is pinged first. A connection that dies between its
/// last ping and its next use fails that transaction with a transient error, which
/// `retry` repeats on a fresh connection.
pub(crate) fn pool_options<DB: Database>(max_connections: u32, acquire_timeout: Duration) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .test_before_acquire(false)
        .before_acquire(|conn: &mut DB::Connection, meta| {
            Box::pin(async move {
                if meta.idle_for > PING_AFTER_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// `operation` (its tries included), or `StoreError::Unavailable` once it has
/// waited `limit` (`Dialect::ANSWER_WITHIN`) for the database: the operation is
/// abandoned (sqlx rolls its transaction back, or the server does when the
/// connection goes), and the caller hears the store is unavailable.
async fn answered_within<T>(
    limit: Option<Duration>,
    operation: impl Future<Output = Result<T>>,
) -> Result<T> {
    let Some(limit) = limit else { return operation.await };
    tokio::time::timeout(limit, operation).await.unwrap_or_else(|_| {
        Err(StoreError::Unavailable(format!(
            "the database did not answer within {} s; is it up and reachable?",
            limit.as_secs_f32()
        )))
    })
}

/// Runs `op` again, up to `retries` times with backoff (50 ms doubling: 5 retries
/// span ~1.5 s), while it fails with a transient error, so callers see only what a
/// fresh connection cannot fix. Every operation is one transaction and safe to
/// repeat (see `StoreError::is_transient`).
async fn retry<T, F, Fut>(retries: u32, mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(50);
    for _ in 0..retries {
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
