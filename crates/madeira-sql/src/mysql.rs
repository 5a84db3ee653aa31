//! MySQL and MariaDB: the statement timeout as a session variable before the
//! transaction (`max_statement_time` on MariaDB, `max_execution_time` on MySQL 8,
//! which only times SELECTs: the client-side deadline covers the rest), `?` binds,
//! columns decoded by type into JSON, and the control side: `KILL QUERY`, `KILL`
//! and `information_schema.PROCESSLIST`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt;
use madeira_core::model::{SqlDef, SqlOutputs};
use madeira_core::sqltext::{BindStyle, rewrite};
use serde_json::{Map, Value as Json};
use sqlx::mysql::{MySql, MySqlArguments, MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlRow};
use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::{Column, Connection, Row, TypeInfo, ValueRef};
use tokio::sync::OnceCell;

use crate::attempt::{Activity, Dialect, StmtError};
use crate::outputs::Collector;

/// A MySQL/MariaDB datasource's pool; which of the two it is is read once.
pub(crate) struct MyPool {
    pub pool: MySqlPool,
    options: MySqlConnectOptions,
    mariadb: OnceCell<bool>,
}

impl MyPool {
    pub fn new(pool: MySqlPool, options: MySqlConnectOptions) -> Self {
        Self { pool, options, mariadb: OnceCell::new() }
    }
}

fn bind_all<'q>(
    mut q: Query<'q, MySql, MySqlArguments>,
    values: &[&Json],
) -> Query<'q, MySql, MySqlArguments> {
    for v in values {
        q = match v {
            Json::Null => q.bind(None::<String>),
            Json::Bool(b) => q.bind(*b),
            Json::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => q.bind(i),
                (None, Some(u)) => q.bind(u),
                _ => q.bind(n.as_f64()),
            },
            Json::String(s) => q.bind(s.clone()),
            other => q.bind(other.to_string()),
        };
    }
    q
}

#[async_trait]
impl Dialect for MyPool {
    type Conn = PoolConnection<MySql>;
    type Ctl = MySqlConnection;
    const CANCEL: &'static str = "KILL QUERY";
    const KILL: &'static str = "KILL";

    async fn acquire(&self) -> Result<Self::Conn, sqlx::Error> {
        self.pool.acquire().await
    }

    async fn begin(
        &self,
        conn: &mut Self::Conn,
        timeout: Duration,
        read_only: bool,
    ) -> Result<u64, sqlx::Error> {
        let mariadb = *self
            .mariadb
            .get_or_try_init(|| async {
                let version: String = sqlx::query_scalar("SELECT VERSION()").fetch_one(&mut **conn).await?;
                Ok::<_, sqlx::Error>(version.to_ascii_lowercase().contains("mariadb"))
            })
            .await?;
        let limit = if mariadb {
            format!("SET SESSION max_statement_time = {:.3}", timeout.as_secs_f64().max(0.001))
        } else {
            format!("SET SESSION max_execution_time = {}", timeout.as_millis().max(1))
        };
        let mode = if read_only { " READ ONLY" } else { "" };
        let sql = format!("{limit}; START TRANSACTION{mode}; SELECT CONNECTION_ID()");
        let rows = sqlx::Executor::fetch_all(&mut **conn, sql.as_str()).await?;
        let row = rows.last().ok_or_else(|| sqlx::Error::Protocol("no connection id returned".into()))?;
        row.try_get::<u64, _>(0).or_else(|_| row.try_get::<i64, _>(0).map(|i| i.unsigned_abs()))
    }

    async fn statements(
        &self,
        conn: &mut Self::Conn,
        def: &SqlDef,
        binds: &BTreeMap<String, Json>,
    ) -> Result<Map<String, Json>, StmtError> {
        let mut collector = Collector::new(def.outputs);
        let mut affected = 0;
        let count = def.statements.len();
        for (i, statement) in def.statements.iter().enumerate() {
            let (sql, names) = rewrite(statement, BindStyle::Question);
            let values = crate::binds::ordered(binds, &names).map_err(StmtError::Output)?;
            let query = bind_all(sqlx::query(&sql), &values);
            if i + 1 == count && def.outputs != SqlOutputs::Affected {
                let mut rows = query.fetch(&mut **conn);
                while let Some(row) = rows.try_next().await? {
                    if !collector
                        .push(decode_row(&row).map_err(StmtError::Output)?)
                        .map_err(StmtError::Output)?
                    {
                        break;
                    }
                }
            } else {
                affected += query.execute(&mut **conn).await?.rows_affected();
            }
        }
        Ok(collector.finish(affected))
    }

    async fn finish(&self, conn: &mut Self::Conn, commit: bool) -> Result<(), sqlx::Error> {
        sqlx::Executor::execute(&mut **conn, if commit { "COMMIT" } else { "ROLLBACK" }).await.map(|_| ())
    }

    async fn close(&self, conn: Self::Conn) {
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.close()).await;
    }

    async fn control(&self) -> Result<Self::Ctl, sqlx::Error> {
        MySqlConnection::connect_with(&self.options).await
    }

    async fn cancel(&self, ctl: &mut Self::Ctl, id: u64) -> Result<(), sqlx::Error> {
        ignore_unknown_thread(
            sqlx::Executor::execute(ctl, format!("KILL QUERY {id}").as_str()).await.map(|_| ()),
        )
    }

    async fn kill(&self, ctl: &mut Self::Ctl, id: u64) -> Result<(), sqlx::Error> {
        ignore_unknown_thread(sqlx::Executor::execute(ctl, format!("KILL {id}").as_str()).await.map(|_| ()))
    }

    async fn activity(&self, ctl: &mut Self::Ctl, id: u64) -> Result<Option<Activity>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT CAST(COMMAND AS CHAR), CAST(TIME AS SIGNED), CAST(COALESCE(STATE, '') AS CHAR) \
             FROM information_schema.PROCESSLIST WHERE ID = ?",
        )
        .bind(id)
        .fetch_optional(ctl)
        .await?;
        Ok(row.map(|row| {
            let command: String = row.try_get(0).unwrap_or_default();
            let time: i64 = row.try_get(1).unwrap_or_default();
            let state: String = row.try_get(2).unwrap_or_default();
            Activity {
                busy: command != "Sleep",
                text: format!("processlist: command {command}, state `{state}`, {time}s"),
            }
        }))
    }
}

/// `KILL` of a session that is already gone (error 1094) is what we wanted.
fn ignore_unknown_thread(result: Result<(), sqlx::Error>) -> Result<(), sqlx::Error> {
    match result {
        Err(sqlx::Error::Database(db))
            if db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|m| m.number() == 1094) =>
        {
            Ok(())
        }
        other => other,
    }
}

/// One row as a JSON object, each column by its type.
fn decode_row(row: &MySqlRow) -> Result<Map<String, Json>, String> {
    let mut out = Map::new();
    for (i, column) in row.columns().iter().enumerate() {
        let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
        if raw.is_null() {
            out.insert(column.name().to_string(), Json::Null);
            continue;
        }
        let ty = column.type_info().name().to_string();
        let bad = |e: sqlx::Error| format!("column `{}` ({ty}): {e}", column.name());
        let value = match ty.as_str() {
            "BOOLEAN" => Json::Bool(row.try_get_unchecked::<i64, _>(i).map_err(bad)? != 0),
            t if is_int(t) && t.ends_with("UNSIGNED") => {
                Json::from(row.try_get_unchecked::<u64, _>(i).map_err(bad)?)
            }
            t if is_int(t) || t == "YEAR" => Json::from(row.try_get_unchecked::<i64, _>(i).map_err(bad)?),
            "FLOAT" => Json::from(f64::from(row.try_get_unchecked::<f32, _>(i).map_err(bad)?)),
            "DOUBLE" => Json::from(row.try_get_unchecked::<f64, _>(i).map_err(bad)?),
            "DECIMAL" => {
                let text = row.try_get_unchecked::<String, _>(i).map_err(bad)?;
                serde_json::from_str::<Json>(&text).unwrap_or(Json::String(text))
            }
            "JSON" => {
                let text = row.try_get_unchecked::<String, _>(i).map_err(bad)?;
                serde_json::from_str::<Json>(&text).unwrap_or(Json::String(text))
            }
            "DATE" | "DATETIME" | "TIMESTAMP" | "TIME" => {
                let bytes = row.try_get_unchecked::<Vec<u8>, _>(i).map_err(bad)?;
                Json::String(
                    temporal(&ty, &bytes)
                        .ok_or_else(|| format!("column `{}` ({ty}) cannot be read", column.name()))?,
                )
            }
            _ => match row.try_get_unchecked::<String, _>(i) {
                Ok(s) => Json::String(s),
                Err(_) => {
                    return Err(format!(
                        "column `{}` is binary ({ty}); select it as text, e.g. HEX({})",
                        column.name(),
                        column.name()
                    ));
                }
            },
        };
        out.insert(column.name().to_string(), value);
    }
    Ok(out)
}

fn is_int(ty: &str) -> bool {
    let base = ty.trim_end_matches(" UNSIGNED");
    matches!(base, "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT")
}

/// A binary-protocol temporal value (length byte first) as text.
fn temporal(ty: &str, bytes: &[u8]) -> Option<String> {
    let (&len, body) = bytes.split_first()?;
    let body = body.get(..len as usize)?;
    let le32 = |b: &[u8]| b.get(..4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if ty == "TIME" {
        if body.is_empty() {
            return Some("00:00:00".into());
        }
        let negative = body[0] == 1;
        let days = le32(body.get(1..)?)?;
        let (h, m, s) = (*body.get(5)?, *body.get(6)?, *body.get(7)?);
        let micros = if body.len() >= 12 { le32(&body[8..])? } else { 0 };
        let hours = days * 24 + u32::from(h);
        let sign = if negative { "-" } else { "" };
        let frac = if micros > 0 { format!(".{micros:06}") } else { String::new() };
        return Some(format!("{sign}{hours:02}:{m:02}:{s:02}{frac}"));
    }
    let (year, month, day) = match body {
        [] => (0, 0, 0),
        [y0, y1, mo, d, ..] => (u16::from_le_bytes([*y0, *y1]), *mo, *d),
        _ => return None,
    };
    let date = format!("{year:04}-{month:02}-{day:02}");
    if ty == "DATE" {
        return Some(date);
    }
    let (h, m, s) = match body {
        [_, _, _, _, h, m, s, ..] => (*h, *m, *s),
        _ => (0, 0, 0),
    };
    let micros = if body.len() >= 11 { le32(&body[7..])? } else { 0 };
    let frac = if micros > 0 { format!(".{micros:06}") } else { String::new() };
    Some(format!("{date} {h:02}:{m:02}:{s:02}{frac}"))
}

#[cfg(test)]
mod tests {
    use super::temporal;

    #[test]
    fn temporal_values_become_text() {
        assert_eq!(temporal("DATE", &[4, 0xea, 0x07, 12, 1]).as_deref(), Some("2026-12-01"));
        assert_eq!(
            temporal("DATETIME", &[7, 0xea, 0x07, 12, 1, 13, 5, 9]).as_deref(),
            Some("2026-12-01 13:05:09")
        );
        assert_eq!(temporal("TIME", &[8, 0, 1, 0, 0, 0, 2, 3, 4]).as_deref(), Some("26:03:04"));
        assert_eq!(temporal("DATE", &[9]), None);
    }
}
