//! `AlertStore`'s rows: alerts and deliveries, upserted in one transaction per
//! batch; the open set a restart resumes from; listings; pruning.

use sqlx::QueryBuilder;
use sqlx::Row as _;

use super::{Db, Pool, Row, push_list, sql, upsert};
use crate::{AlertBatch, AlertQuery, AlertRow, DeliveryRow, OpenAlerts, Result, StoreError};

const ALERT_COLUMNS: &str =
    "id, \"key\", severity, status, flow, node, details, created_at, notify_at, updated_at, resolved_at";
const DELIVERY_COLUMNS: &str =
    "id, alert_id, channel, kind, status, attempts, last_error, digest_id, created_at, sent_at";

pub(super) async fn write(pool: &Pool, batch: &AlertBatch) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    super::inbox::fence_and_consume(&mut tx, batch).await?;
    for a in &batch.alerts {
        sqlx::query(&sql(&format!(
            "INSERT INTO alerts ({ALERT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11){}",
            upsert("id", &ALERT_COLUMNS["id, ".len()..])
        )))
        .bind(&a.id)
        .bind(&a.key)
        .bind(&a.severity)
        .bind(&a.status)
        .bind(&a.flow)
        .bind(&a.node)
        .bind(a.details.to_string())
        .bind(a.created_at)
        .bind(a.notify_at)
        .bind(a.updated_at)
        .bind(a.resolved_at)
        .execute(&mut *tx)
        .await?;
    }
    for d in &batch.deliveries {
        sqlx::query(&sql(&format!(
            "INSERT INTO alert_deliveries ({DELIVERY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10){}",
            upsert("id", &DELIVERY_COLUMNS["id, ".len()..])
        )))
        .bind(&d.id)
        .bind(&d.alert_id)
        .bind(&d.channel)
        .bind(&d.kind)
        .bind(&d.status)
        .bind(i64::from(d.attempts))
        .bind(&d.last_error)
        .bind(&d.digest_id)
        .bind(d.created_at)
        .bind(d.sent_at)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

fn alert_row(row: &Row) -> Result<AlertRow> {
    let details: String = row.try_get("details")?;
    Ok(AlertRow {
        id: row.try_get("id")?,
        key: row.try_get("key")?,
        severity: row.try_get("severity")?,
        status: row.try_get("status")?,
        flow: row.try_get("flow")?,
        node: row.try_get("node")?,
        details: serde_json::from_str(&details)
            .map_err(|e| StoreError::Corrupt { table: "alerts", detail: e.to_string() })?,
        created_at: row.try_get("created_at")?,
        notify_at: row.try_get("notify_at")?,
        updated_at: row.try_get("updated_at")?,
        resolved_at: row.try_get("resolved_at")?,
    })
}

fn delivery_row(row: &Row) -> Result<DeliveryRow> {
    Ok(DeliveryRow {
        id: row.try_get("id")?,
        alert_id: row.try_get("alert_id")?,
        channel: row.try_get("channel")?,
        kind: row.try_get("kind")?,
        status: row.try_get("status")?,
        attempts: row.try_get::<i64, _>("attempts")? as u32,
        last_error: row.try_get("last_error")?,
        digest_id: row.try_get("digest_id")?,
        created_at: row.try_get("created_at")?,
        sent_at: row.try_get("sent_at")?,
    })
}

pub(super) async fn open(pool: &Pool) -> Result<OpenAlerts> {
    let deliveries = sqlx::query(&sql(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM alert_deliveries WHERE status = 'pending' \
         OR (status = 'merged' AND digest_id IN \
             (SELECT id FROM alert_deliveries WHERE status = 'pending' AND kind = 'digest')) \
         ORDER BY id"
    )))
    .fetch_all(pool)
    .await?
    .iter()
    .map(delivery_row)
    .collect::<Result<Vec<_>>>()?;
    let alerts = sqlx::query(&sql(&format!(
        "SELECT {ALERT_COLUMNS} FROM alerts WHERE status IN ('pending', 'firing') \
         OR id IN (SELECT alert_id FROM alert_deliveries WHERE status IN ('pending', 'merged') \
                   AND alert_id IS NOT NULL AND (status = 'pending' OR digest_id IN \
                   (SELECT id FROM alert_deliveries WHERE status = 'pending' AND kind = 'digest'))) \
         ORDER BY id"
    )))
    .fetch_all(pool)
    .await?
    .iter()
    .map(alert_row)
    .collect::<Result<Vec<_>>>()?;
    Ok(OpenAlerts { alerts, deliveries })
}

pub(super) async fn list(pool: &Pool, query: &AlertQuery) -> Result<Vec<AlertRow>> {
    let mut q: QueryBuilder<Db> = QueryBuilder::new(format!("SELECT {ALERT_COLUMNS} FROM alerts WHERE 1=1"));
    if let Some(status) = &query.status {
        q.push(" AND status = ").push_bind(status);
    }
    if let Some(flow) = &query.flow {
        q.push(" AND flow = ").push_bind(flow);
    }
    if let Some(before) = &query.before {
        q.push(" AND id < ").push_bind(before);
    }
    q.push(" ORDER BY id DESC LIMIT ").push_bind(i64::from(query.limit.max(1)));
    q.build().fetch_all(pool).await?.iter().map(alert_row).collect()
}

pub(super) async fn status(pool: &Pool, id: &str) -> Result<Option<(String, Option<String>)>> {
    Ok(sqlx::query_as(&sql("SELECT status, flow FROM alerts WHERE id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?)
}

pub(super) async fn deliveries_of(pool: &Pool, alert_ids: &[String]) -> Result<Vec<DeliveryRow>> {
    if alert_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut q: QueryBuilder<Db> =
        QueryBuilder::new(format!("SELECT {DELIVERY_COLUMNS} FROM alert_deliveries WHERE alert_id IN "));
    push_list(&mut q, alert_ids);
    q.push(" ORDER BY id");
    q.build().fetch_all(pool).await?.iter().map(delivery_row).collect()
}

pub(super) async fn prune(pool: &Pool, before_ms: i64) -> Result<u64> {
    let mut tx = pool.begin().await?;
    sqlx::query(&sql("DELETE FROM alert_deliveries WHERE alert_id IN \
         (SELECT id FROM alerts WHERE status = 'resolved' AND resolved_at < $1)"))
    .bind(before_ms)
    .execute(&mut *tx)
    .await?;
    sqlx::query(&sql(
        "DELETE FROM alert_deliveries WHERE alert_id IS NULL AND status != 'pending' AND created_at < $1",
    ))
    .bind(before_ms)
    .execute(&mut *tx)
    .await?;
    let done = sqlx::query(&sql("DELETE FROM alerts WHERE status = 'resolved' AND resolved_at < $1"))
        .bind(before_ms)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
