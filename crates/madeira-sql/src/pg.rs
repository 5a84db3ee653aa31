//! PostgreSQL: `BEGIN` with `statement_timeout` set local to the transaction,
//! `$n` binds, rows turned into JSON by the server (`row_to_json`, so every column
//! type maps), and the control side: `pg_cancel_backend`, `pg_terminate_backend`
//! and `pg_stat_activity`.

use std::time::Duration;

use madeira_core::sqltext::BindStyle;
use serde_json::{Map, Value as Json};
use sqlx::Row;
use sqlx::postgres::{PgRow, Postgres};

use crate::backend::{Backend, ControlSql, Q};

/// PostgreSQL as a `Backend` (it keeps no state of its own).
pub(crate) struct Pg;

/// Cancel, terminate and look up a backend by its pid.
const CONTROL: ControlSql = ControlSql {
    cancel: "SELECT pg_cancel_backend({id})",
    kill: "SELECT pg_terminate_backend({id})",
    activity: "SELECT CASE WHEN state = 'idle' THEN 'idle' ELSE 'busy' END, \
               'pg_stat_activity: state ' || coalesce(state, '') || ', wait ' \
               || coalesce(wait_event_type || '/' || wait_event, 'none') || ', transaction open ' \
               || coalesce(floor(extract(epoch from now() - xact_start))::int8, 0) || 's' \
               FROM pg_stat_activity WHERE pid = {id}",
};

impl Backend for Pg {
    type Db = Postgres;
    const BINDS: BindStyle = BindStyle::Dollar;
    const CONTROL: ControlSql = CONTROL;

    fn begin_sql(&self, timeout: Duration, read_only: bool) -> String {
        let mode = if read_only { " READ ONLY" } else { "" };
        let ms = timeout.as_millis().max(1);
        format!("BEGIN{mode}; SELECT pg_backend_pid()::int8, set_config('statement_timeout', '{ms}', true)")
    }
    fn rows_sql(sql: &str, wanted: usize) -> String {
        format!(
            "WITH madeira_q AS ({sql}\n) SELECT row_to_json(madeira_q)::text FROM madeira_q LIMIT {wanted}"
        )
    }

    fn decode(row: &PgRow) -> Result<Map<String, Json>, String> {
        let text: String = row.try_get(0).map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| format!("a row is not a JSON object: {e}"))
    }

    fn bind_other<'q>(q: Q<'q, Postgres>, value: &Json) -> Q<'q, Postgres> {
        match value {
            Json::Number(n) => q.bind(n.as_f64()),
            other => q.bind(sqlx::types::Json(other.clone())),
        }
    }
}
