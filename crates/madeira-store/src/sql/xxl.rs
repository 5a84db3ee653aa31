//! XXL-JOB executors and callbacks (`crate::XxlStore`).

use sqlx::QueryBuilder;

use super::{Db, Pool, sql, upsert};

use crate::{Result, XxlCallbackRow, XxlExecutorRow};

pub(super) async fn register(pool: &Pool, app: &str, address: &str, now_ms: i64, dead_ms: i64) -> Result<()> {
    let mut tx = pool.begin().await?;
    let seen: Option<(i64, i64)> =
        sqlx::query_as(&sql("SELECT since_ms, seen_ms FROM xxl_executors WHERE app = $1 AND address = $2"))
            .bind(app)
            .bind(address)
            .fetch_optional(&mut *tx)
            .await?;
    let since = match seen {
        Some((since, last)) if now_ms.saturating_sub(last) < dead_ms => since,
        _ => now_ms,
    };
    sqlx::query(&sql(&format!(
        "INSERT INTO xxl_executors (app, address, since_ms, seen_ms) VALUES ($1, $2, $3, $4){}",
        upsert("app, address", "since_ms, seen_ms")
    )))
    .bind(app)
    .bind(address)
    .bind(since)
    .bind(now_ms)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn unregister(pool: &Pool, app: &str, address: &str) -> Result<bool> {
    let done = sqlx::query(&sql("DELETE FROM xxl_executors WHERE app = $1 AND address = $2"))
        .bind(app)
        .bind(address)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}

pub(super) async fn executors(pool: &Pool, since_ms: i64) -> Result<Vec<XxlExecutorRow>> {
    let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(&sql(
        "SELECT app, address, since_ms, seen_ms FROM xxl_executors WHERE seen_ms >= $1 ORDER BY app, address",
    ))
    .bind(since_ms)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(app, address, since_ms, seen_ms)| XxlExecutorRow { app, address, since_ms, seen_ms })
        .collect())
}

pub(super) async fn put_callback(pool: &Pool, cb: &XxlCallbackRow) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let had: Option<(i64,)> =
        sqlx::query_as(&sql("SELECT log_id FROM xxl_callbacks WHERE log_id = $1 AND app = $2"))
            .bind(cb.log_id)
            .bind(&cb.app)
            .fetch_optional(&mut *tx)
            .await?;
    if had.is_some() {
        tx.commit().await?;
        return Ok(false);
    }
    // Two replicas keeping the same logId at once: the first row stays.
    sqlx::query(&sql(&format!(
        "INSERT INTO xxl_callbacks (log_id, app, code, msg, at_ms) VALUES ($1, $2, $3, $4, $5){}",
        upsert("log_id, app", "log_id")
    )))
    .bind(cb.log_id)
    .bind(&cb.app)
    .bind(cb.code)
    .bind(&cb.msg)
    .bind(cb.at_ms)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

pub(super) async fn callbacks(pool: &Pool, log_ids: &[i64]) -> Result<Vec<XxlCallbackRow>> {
    let mut found = Vec::new();
    for chunk in log_ids.chunks(super::CHUNK.max(1)) {
        let mut q: QueryBuilder<Db> =
            QueryBuilder::new("SELECT log_id, app, code, msg, at_ms FROM xxl_callbacks WHERE log_id IN (");
        let mut list = q.separated(", ");
        for id in chunk {
            list.push_bind(*id);
        }
        q.push(") ORDER BY log_id, app");
        let rows: Vec<(i64, String, i64, Option<String>, i64)> = q.build_query_as().fetch_all(pool).await?;
        found.extend(rows.into_iter().map(|(log_id, app, code, msg, at_ms)| XxlCallbackRow {
            log_id,
            app,
            code,
            msg,
            at_ms,
        }));
    }
    Ok(found)
}

pub(super) async fn prune(pool: &Pool, executors_before_ms: i64, callbacks_before_ms: i64) -> Result<u64> {
    let executors = sqlx::query(&sql("DELETE FROM xxl_executors WHERE seen_ms < $1"))
        .bind(executors_before_ms)
        .execute(pool)
        .await?;
    let callbacks = sqlx::query(&sql("DELETE FROM xxl_callbacks WHERE at_ms < $1"))
        .bind(callbacks_before_ms)
        .execute(pool)
        .await?;
    Ok(executors.rows_affected() + callbacks.rows_affected())
}
