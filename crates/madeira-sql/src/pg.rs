//! PostgreSQL: `BEGIN` with `statement_timeout` set local to the transaction,
//! statements with `$n` binds, rows turned into JSON by the server
//! (`row_to_json`, so every column type maps), and the control side:
//! `pg_cancel_backend`, `pg_terminate_backend` and `pg_stat_activity`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt;
use madeira_core::model::{SqlDef, SqlOutputs};
use madeira_core::sqltext::{BindStyle, rewrite};
use serde_json::{Map, Value as Json};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgPool, Postgres};
use sqlx::query::Query;
use sqlx::{Connection, Row};

use crate::attempt::{Activity, Dialect, StmtError};
use crate::outputs::Collector;

pub(crate) struct Pg<'a> {
    pub pool: &'a PgPool,
    pub options: &'a PgConnectOptions,
}

fn bind_all<'q>(
    mut q: Query<'q, Postgres, PgArguments>,
    values: &[&Json],
) -> Query<'q, Postgres, PgArguments> {
    for v in values {
        q = match v {
            Json::Null => q.bind(None::<String>),
            Json::Bool(b) => q.bind(*b),
            Json::Number(n) => match n.as_i64() {
                Some(i) => q.bind(i),
                None => q.bind(n.as_f64()),
            },
            Json::String(s) => q.bind(s.clone()),
            other => q.bind(sqlx::types::Json((*other).clone())),
        };
    }
    q
}

#[async_trait]
impl Dialect for Pg<'_> {
    type Conn = PoolConnection<Postgres>;
    type Ctl = PgConnection;
    const CANCEL: &'static str = "pg_cancel_backend";
    const KILL: &'static str = "pg_terminate_backend";

    async fn acquire(&self) -> Result<Self::Conn, sqlx::Error> {
        self.pool.acquire().await
    }

    async fn begin(
        &self,
        conn: &mut Self::Conn,
        timeout: Duration,
        read_only: bool,
    ) -> Result<u64, sqlx::Error> {
        let mode = if read_only { " READ ONLY" } else { "" };
        let ms = timeout.as_millis().max(1);
        let sql = format!(
            "BEGIN{mode}; SELECT pg_backend_pid()::int8, set_config('statement_timeout', '{ms}', true)"
        );
        let rows = sqlx::Executor::fetch_all(&mut **conn, sql.as_str()).await?;
        let pid: i64 =
            rows.last().ok_or_else(|| sqlx::Error::Protocol("no backend pid returned".into()))?.try_get(0)?;
        Ok(pid.unsigned_abs())
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
            let (sql, names) = rewrite(statement, BindStyle::Dollar);
            let values = crate::binds::ordered(binds, &names).map_err(StmtError::Output)?;
            if i + 1 == count && def.outputs != SqlOutputs::Affected {
                let wrapped = format!(
                    "WITH madeira_q AS ({sql}\n) SELECT row_to_json(madeira_q)::text FROM madeira_q LIMIT {}",
                    collector.wanted()
                );
                let mut rows = bind_all(sqlx::query(&wrapped), &values).fetch(&mut **conn);
                while let Some(row) = rows.try_next().await? {
                    let text: String = row.try_get(0)?;
                    let object: Map<String, Json> = serde_json::from_str(&text)
                        .map_err(|e| StmtError::Output(format!("a row is not a JSON object: {e}")))?;
                    if !collector.push(object).map_err(StmtError::Output)? {
                        break;
                    }
                }
            } else {
                affected += bind_all(sqlx::query(&sql), &values).execute(&mut **conn).await?.rows_affected();
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
        PgConnection::connect_with(self.options).await
    }

    async fn cancel(&self, ctl: &mut Self::Ctl, id: u64) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT pg_cancel_backend($1)").bind(id as i32).execute(ctl).await.map(|_| ())
    }

    async fn kill(&self, ctl: &mut Self::Ctl, id: u64) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT pg_terminate_backend($1)").bind(id as i32).execute(ctl).await.map(|_| ())
    }

    async fn activity(&self, ctl: &mut Self::Ctl, id: u64) -> Result<Option<Activity>, sqlx::Error> {
        let row = sqlx::query(
            "SELECT coalesce(state, ''), coalesce(wait_event_type || '/' || wait_event, 'none'), \
             coalesce(extract(epoch from now() - xact_start)::float8, 0) \
             FROM pg_stat_activity WHERE pid = $1",
        )
        .bind(id as i32)
        .fetch_optional(ctl)
        .await?;
        Ok(row.map(|row| {
            let state: String = row.try_get(0).unwrap_or_default();
            let wait: String = row.try_get(1).unwrap_or_default();
            let age: f64 = row.try_get(2).unwrap_or_default();
            Activity {
                busy: state != "idle",
                text: format!(
                    "pg_stat_activity: state {state}, wait {wait}, transaction open {:.0}s",
                    age.floor()
                ),
            }
        }))
    }
}
