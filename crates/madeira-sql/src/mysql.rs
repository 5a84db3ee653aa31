//! MySQL and MariaDB: the statement timeout as a session variable before the
//! transaction (`max_statement_time` on MariaDB, `max_execution_time` on MySQL 8,
//! which only times SELECTs: the client-side deadline covers the rest), `?` binds,
//! columns decoded by type into JSON, and the control side: `KILL QUERY`, `KILL`
//! and `information_schema.PROCESSLIST`.

use std::time::Duration;

use async_trait::async_trait;
use madeira_core::sqltext::BindStyle;
use serde_json::{Map, Value as Json};
use sqlx::mysql::{MySql, MySqlConnection, MySqlRow};
use sqlx::{Column, Row, TypeInfo, ValueRef};
use tokio::sync::OnceCell;

use crate::backend::{Backend, ControlSql, Driver, Q};

/// MySQL or MariaDB as a `Backend`: which of the two is read once.
#[derive(Default)]
pub(crate) struct My {
    mariadb: OnceCell<bool>,
}

/// `KILL QUERY`, `KILL` and the process list.
const CONTROL: ControlSql = ControlSql {
    cancel: "KILL QUERY {id}",
    kill: "KILL {id}",
    activity: "SELECT IF(COMMAND = 'Sleep', 'idle', 'busy'), CAST(CONCAT('processlist: command ', \
               COMMAND, ', state `', COALESCE(STATE, ''), '`, ', TIME, 's') AS CHAR) \
               FROM information_schema.PROCESSLIST WHERE ID = {id}",
};

#[async_trait]
impl Backend for My {
    type Db = MySql;
    const BINDS: BindStyle = BindStyle::Question;
    const CONTROL: ControlSql = CONTROL;

    async fn learn(&self, conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
        self.mariadb
            .get_or_try_init(|| async {
                let rows = MySql::raw(conn, "SELECT VERSION()").await?;
                let version = rows.first().map(|r| MySql::text(r, 0)).transpose()?.unwrap_or_default();
                Ok::<_, sqlx::Error>(version.to_ascii_lowercase().contains("mariadb"))
            })
            .await
            .map(|_| ())
    }

    fn begin_sql(&self, timeout: Duration, read_only: bool) -> String {
        // `learn` ran first; without it MariaDB's spelling is the guess.
        let limit = if self.mariadb.get().copied().unwrap_or(true) {
            format!("SET SESSION max_statement_time = {:.3}", timeout.as_secs_f64().max(0.001))
        } else {
            format!("SET SESSION max_execution_time = {}", timeout.as_millis().max(1))
        };
        let mode = if read_only { " READ ONLY" } else { "" };
        format!("{limit}; START TRANSACTION{mode}; SELECT CAST(CONNECTION_ID() AS SIGNED)")
    }

    fn rows_sql(sql: &str, _wanted: usize) -> String {
        sql.to_string()
    }

    fn decode(row: &MySqlRow) -> Result<Map<String, Json>, String> {
        decode_row(row)
    }

    fn bind_other<'q>(q: Q<'q, MySql>, value: &Json) -> Q<'q, MySql> {
        match value {
            Json::Number(n) => match n.as_u64() {
                Some(u) => q.bind(u),
                None => q.bind(n.as_f64()),
            },
            other => q.bind(other.to_string()),
        }
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
