//! What a SQL attempt does on a datasource, written once for both databases:
//! `Backend` holds only what differs between PostgreSQL and MySQL/MariaDB (the
//! statement that opens the transaction with its timeout, how rows become JSON,
//! binds past the shared scalars, the cancel, kill and activity-view statements),
//! and `Source` does the rest for either (acquire, open the transaction, run the
//! statements with bound values, commit, cancel, inspect) through `Driver`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt;
use futures::future::BoxFuture;
use madeira_core::model::{SqlDef, SqlOutputs};
use madeira_core::sqltext::{BindStyle, rewrite};
use serde_json::{Map, Value as Json};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Database};

pub(crate) use crate::driver::{Driver, Q};
use crate::outputs::Collector;

/// A pooled connection of backend `B` (the attempt's session).
pub(crate) type Conn<B> = PoolConnection<<B as Backend>::Db>;
/// A connection of its own, to cancel, inspect and kill sessions with.
pub(crate) type Ctl<B> = <<B as Backend>::Db as Database>::Connection;
type Options<DB> = <<DB as Database>::Connection as Connection>::Options;

/// What the session is doing, from the database's activity view.
#[derive(Debug, Clone)]
pub(crate) struct Activity {
    /// A statement runs or a transaction is open.
    pub busy: bool,
    pub text: String,
}

/// Why the statements failed.
pub(crate) enum StmtError {
    Db(sqlx::Error),
    /// Outputs over the limit or not representable: never retried.
    Output(String),
}

impl From<sqlx::Error> for StmtError {
    fn from(e: sqlx::Error) -> Self {
        StmtError::Db(e)
    }
}

/// The statements a control connection sends about another session, `{id}`
/// standing for its id (also what the attempt's log shows).
pub(crate) struct ControlSql {
    /// Cancels the session's statement.
    pub cancel: &'static str,
    /// Ends the session.
    pub kill: &'static str,
    /// The session in the activity view: no row when it is gone, else `busy` or
    /// `idle` (a statement runs or a transaction is open, or not) and a line
    /// describing it, both as text.
    pub activity: &'static str,
}

/// What differs between PostgreSQL and MySQL/MariaDB.
#[async_trait]
pub(crate) trait Backend: Send + Sync + Sized + 'static {
    type Db: Driver;
    /// How `:name` placeholders are written for the driver.
    const BINDS: BindStyle;
    const CONTROL: ControlSql;

    /// Learns what `begin_sql` depends on from a connection, before each
    /// transaction (MySQL or MariaDB: read once).
    async fn learn(&self, _conn: &mut Ctl<Self>) -> Result<(), sqlx::Error> {
        Ok(())
    }
    /// The statements (sent as one text) that open a transaction with `timeout`
    /// as the server-side statement timeout and end with one row whose first
    /// column is the session id.
    fn begin_sql(&self, timeout: Duration, read_only: bool) -> String;
    /// The last statement as a query of at most `wanted` rows that `decode` reads.
    fn rows_sql(sql: &str, wanted: usize) -> String;
    fn decode(row: &<Self::Db as Database>::Row) -> Result<Map<String, Json>, String>;
    /// Binds what `Driver::bind_scalar` does not: lists, maps, integers past i64.
    fn bind_other<'q>(q: Q<'q, Self::Db>, value: &Json) -> Q<'q, Self::Db>;
}

/// A datasource of backend `B`: its bounded pool, and its connect options for
/// control connections.
pub(crate) struct Source<B: Backend> {
    pub pool: sqlx::Pool<B::Db>,
    options: Options<B::Db>,
    backend: B,
}

impl<B: Backend> Source<B> {
    /// A lazily connecting pool of at most `max` connections to `options`.
    pub fn lazy(backend: B, options: Options<B::Db>, max: u32) -> Self {
        // Attempts bound their wait for a connection by the node's timeout. No ping
        // before each use (a round trip per node): a dead connection fails the
        // attempt as a retryable connection error and is not returned to the pool.
        let pool = sqlx::pool::PoolOptions::<B::Db>::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(24 * 3600))
            .test_before_acquire(false)
            .connect_lazy_with(options.clone());
        Self { pool, options, backend }
    }

    pub async fn acquire(&self) -> Result<Conn<B>, sqlx::Error> {
        self.pool.acquire().await
    }

    /// Opens the transaction with `timeout` as the statement timeout; the session id.
    pub async fn begin(
        &self,
        conn: &mut Conn<B>,
        timeout: Duration,
        read_only: bool,
    ) -> Result<u64, sqlx::Error> {
        self.backend.learn(conn).await?;
        let sql = self.backend.begin_sql(timeout, read_only);
        let rows = B::Db::raw(conn, &sql).await?;
        let row = rows.last().ok_or_else(|| sqlx::Error::Protocol("no session id returned".into()))?;
        Ok(B::Db::int(row, 0)?.unsigned_abs())
    }

    /// The node's statements with their bound values; the outputs of the last.
    /// Boxed: the attempt races it against its deadline and may hand it to `settle`.
    pub fn statements<'a>(
        &'a self,
        conn: &'a mut Conn<B>,
        def: &'a SqlDef,
        binds: &'a BTreeMap<String, Json>,
    ) -> BoxFuture<'a, Result<Map<String, Json>, StmtError>> {
        Box::pin(async move {
            let mut collector = Collector::new(def.outputs);
            let mut affected = 0;
            let last = def.statements.len().saturating_sub(1);
            for (i, statement) in def.statements.iter().enumerate() {
                let (sql, names) = rewrite(statement, B::BINDS);
                let values = crate::binds::ordered(binds, &names).map_err(StmtError::Output)?;
                if i < last || def.outputs == SqlOutputs::Affected {
                    affected += B::Db::execute(conn, bind_all::<B>(sqlx::query(&sql), &values)).await?;
                    continue;
                }
                let sql = B::rows_sql(&sql, collector.wanted());
                let mut rows = B::Db::rows(conn, bind_all::<B>(sqlx::query(&sql), &values));
                while let Some(row) = rows.try_next().await? {
                    let object = B::decode(&row).map_err(StmtError::Output)?;
                    if !collector.push(object).map_err(StmtError::Output)? {
                        break;
                    }
                }
            }
            Ok(collector.finish(affected))
        })
    }

    pub async fn finish(&self, conn: &mut Conn<B>, commit: bool) -> Result<(), sqlx::Error> {
        B::Db::raw(conn, if commit { "COMMIT" } else { "ROLLBACK" }).await.map(|_| ())
    }

    /// Closes the connection for good (it does not return to the pool).
    pub async fn close(&self, conn: Conn<B>) {
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
    }

    /// A separate connection to cancel, inspect and kill sessions with.
    pub async fn control(&self) -> Result<Ctl<B>, sqlx::Error> {
        Ctl::<B>::connect_with(&self.options).await
    }

    /// The statement that cancels session `id`'s statement, for the log.
    pub fn cancel_sql(&self, id: u64) -> String {
        for_session(B::CONTROL.cancel, id)
    }

    /// The statement that ends session `id`, for the log.
    pub fn kill_sql(&self, id: u64) -> String {
        for_session(B::CONTROL.kill, id)
    }

    pub async fn cancel(&self, ctl: &mut Ctl<B>, id: u64) -> Result<(), sqlx::Error> {
        already_gone(B::Db::raw(ctl, &self.cancel_sql(id)).await)
    }

    pub async fn kill(&self, ctl: &mut Ctl<B>, id: u64) -> Result<(), sqlx::Error> {
        already_gone(B::Db::raw(ctl, &self.kill_sql(id)).await)
    }

    /// The session in the activity view; `None` when it is not there.
    pub async fn activity(&self, ctl: &mut Ctl<B>, id: u64) -> Result<Option<Activity>, sqlx::Error> {
        let rows = B::Db::raw(ctl, &for_session(B::CONTROL.activity, id)).await?;
        Ok(rows.first().map(|row| Activity {
            busy: B::Db::text(row, 0).is_ok_and(|state| state == "busy"),
            text: B::Db::text(row, 1).unwrap_or_default(),
        }))
    }
}

fn bind_all<'q, B: Backend>(mut q: Q<'q, B::Db>, values: &[&Json]) -> Q<'q, B::Db> {
    for value in values {
        q = B::Db::bind_scalar(q, value).unwrap_or_else(|q| B::bind_other(q, value));
    }
    q
}

/// `template` with `{id}` replaced by the session id.
fn for_session(template: &str, id: u64) -> String {
    template.replace("{id}", &id.to_string())
}

/// Cancelling or killing a session that is already gone is what was wanted.
fn already_gone<T>(result: Result<T, sqlx::Error>) -> Result<(), sqlx::Error> {
    match result {
        Err(e) if !crate::classify::unknown_session(&e) => Err(e),
        _ => Ok(()),
    }
}
