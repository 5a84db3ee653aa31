//! The sqlx plumbing a SQL attempt needs, written once for every database whose
//! connections, arguments and scalar types sqlx supports the same way
//! (PostgreSQL and MySQL/MariaDB here): text statements, bound queries read as a
//! row stream or run for their affected count, scalar binds, text and integer
//! columns.

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::Value as Json;
use sqlx::query::Query;
use sqlx::{ColumnIndex, Database, Decode, Encode, IntoArguments, Row, Type};

/// A query of database `DB` with its arguments.
pub(crate) type Q<'q, DB> = Query<'q, DB, <DB as Database>::Arguments<'q>>;

/// The number of rows a statement changed (sqlx has no generic accessor).
pub(crate) trait Affected {
    fn affected(&self) -> u64;
}

impl Affected for sqlx::postgres::PgQueryResult {
    fn affected(&self) -> u64 {
        self.rows_affected()
    }
}

impl Affected for sqlx::mysql::MySqlQueryResult {
    fn affected(&self) -> u64 {
        self.rows_affected()
    }
}

/// What `backend` asks of a database driver.
pub(crate) trait Driver: Database {
    /// Every row of `sql`, sent as text (several statements allowed, no binds).
    fn raw<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<Vec<Self::Row>, sqlx::Error>>;
    fn rows<'c>(
        conn: &'c mut Self::Connection,
        q: Q<'c, Self>,
    ) -> BoxStream<'c, Result<Self::Row, sqlx::Error>>;
    /// Runs `q`; the number of rows it changed.
    fn execute<'c>(conn: &'c mut Self::Connection, q: Q<'c, Self>)
    -> BoxFuture<'c, Result<u64, sqlx::Error>>;
    /// Binds null, a boolean, an integer within i64, a double or a text; `Err`
    /// gives the query back for anything else.
    fn bind_scalar<'q>(q: Q<'q, Self>, value: &Json) -> Result<Q<'q, Self>, Q<'q, Self>>;
    fn text(row: &Self::Row, column: usize) -> Result<String, sqlx::Error>;
    fn int(row: &Self::Row, column: usize) -> Result<i64, sqlx::Error>;
}

impl<DB> Driver for DB
where
    DB: Database,
    DB::QueryResult: Affected,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> f64: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    usize: ColumnIndex<DB::Row>,
{
    fn raw<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<Vec<Self::Row>, sqlx::Error>> {
        sqlx::Executor::fetch_all(conn, sql)
    }

    fn rows<'c>(
        conn: &'c mut Self::Connection,
        q: Q<'c, Self>,
    ) -> BoxStream<'c, Result<Self::Row, sqlx::Error>> {
        q.fetch(conn)
    }

    fn execute<'c>(
        conn: &'c mut Self::Connection,
        q: Q<'c, Self>,
    ) -> BoxFuture<'c, Result<u64, sqlx::Error>> {
        Box::pin(async move { Ok(q.execute(conn).await?.affected()) })
    }

    fn bind_scalar<'q>(q: Q<'q, Self>, value: &Json) -> Result<Q<'q, Self>, Q<'q, Self>> {
        Ok(match value {
            Json::Null => q.bind(None::<String>),
            Json::Bool(b) => q.bind(*b),
            Json::Number(n) if n.is_i64() => q.bind(n.as_i64().unwrap_or_default()),
            Json::Number(n) if n.is_f64() => q.bind(n.as_f64().unwrap_or_default()),
            Json::String(s) => q.bind(s.clone()),
            _ => return Err(q),
        })
    }

    fn text(row: &Self::Row, column: usize) -> Result<String, sqlx::Error> {
        row.try_get_unchecked(column)
    }

    fn int(row: &Self::Row, column: usize) -> Result<i64, sqlx::Error> {
        row.try_get_unchecked(column)
    }
}
