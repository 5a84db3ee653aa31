//! SQLite side of `AlertStore`: alert and delivery rows, upserted in one
//! transaction per batch; the open set a restart resumes from; listings; pruning.

use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};

use super::SqliteStore;
use serde_json::Value as Json;

use crate::{
    AlertBatch, AlertQuery, AlertRow, AlertStore, DeliveryRow, InboxEvent, OpenAlerts, Result, StoreError,
};

const ALERT_COLUMNS: &str =
    "id, key, severity, status, flow, node, details, created_at, notify_at, updated_at, resolved_at";
const DELIVERY_COLUMNS: &str =
    "id, alert_id, channel, kind, status, attempts, last_error, digest_id, created_at, sent_at";

#[async_trait]
impl AlertStore for SqliteStore {
    async fn write_alerts(&self, batch: &AlertBatch) -> Result<()> {
        self.guarded(write(&self.write, batch)).await
    }
    async fn open_alerts(&self) -> Result<OpenAlerts> {
        self.guarded(open(&self.write)).await
    }
    async fn list_alerts(&self, query: &AlertQuery) -> Result<Vec<AlertRow>> {
        list(&self.read, query).await
    }
    async fn deliveries_of(&self, alert_ids: &[String]) -> Result<Vec<DeliveryRow>> {
        deliveries_of(&self.read, alert_ids).await
    }
    async fn prune_alerts(&self, before_ms: i64) -> Result<u64> {
        self.guarded(prune(&self.write, before_ms)).await
    }
    async fn push_alert_events(&self, bodies: &[Json], now_ms: i64) -> Result<()> {
        self.guarded(super::inbox::push(&self.write, bodies, now_ms)).await
    }
    async fn alert_events(&self, limit: u32) -> Result<Vec<InboxEvent>> {
        self.guarded(super::inbox::read(&self.write, limit)).await
    }
    async fn lead(&self, role: &str, holder: &str, now_ms: i64, lease_ms: i64) -> Result<bool> {
        self.guarded(super::inbox::lead(&self.write, role, holder, now_ms, lease_ms)).await
    }
}

async fn write(pool: &SqlitePool, batch: &AlertBatch) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    super::inbox::fence_and_consume(&mut tx, batch).await?;
    for a in &batch.alerts {
        sqlx::query(&format!(
            "INSERT OR REPLACE INTO alerts ({ALERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ))
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
        sqlx::query(&format!(
            "INSERT OR REPLACE INTO alert_deliveries ({DELIVERY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ))
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

fn alert_row(row: &SqliteRow) -> Result<AlertRow> {
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

fn delivery_row(row: &SqliteRow) -> Result<DeliveryRow> {
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

async fn open(pool: &SqlitePool) -> Result<OpenAlerts> {
    let deliveries = sqlx::query(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM alert_deliveries WHERE status = 'pending' \
         OR (status = 'merged' AND digest_id IN \
             (SELECT id FROM alert_deliveries WHERE status = 'pending' AND kind = 'digest')) \
         ORDER BY id"
    ))
    .fetch_all(pool)
    .await?
    .iter()
    .map(delivery_row)
    .collect::<Result<Vec<_>>>()?;
    let alerts = sqlx::query(&format!(
        "SELECT {ALERT_COLUMNS} FROM alerts WHERE status IN ('pending', 'firing') \
         OR id IN (SELECT alert_id FROM alert_deliveries WHERE status IN ('pending', 'merged') \
                   AND alert_id IS NOT NULL AND (status = 'pending' OR digest_id IN \
                   (SELECT id FROM alert_deliveries WHERE status = 'pending' AND kind = 'digest'))) \
         ORDER BY id"
    ))
    .fetch_all(pool)
    .await?
    .iter()
    .map(alert_row)
    .collect::<Result<Vec<_>>>()?;
    Ok(OpenAlerts { alerts, deliveries })
}

async fn list(pool: &SqlitePool, query: &AlertQuery) -> Result<Vec<AlertRow>> {
    let mut q: QueryBuilder<Sqlite> =
        QueryBuilder::new(format!("SELECT {ALERT_COLUMNS} FROM alerts WHERE 1=1"));
    if let Some(status) = &query.status {
        q.push(" AND status = ").push_bind(status);
    }
    if let Some(flow) = &query.flow {
        q.push(" AND flow = ").push_bind(flow);
    }
    q.push(" ORDER BY id DESC LIMIT ").push_bind(i64::from(query.limit.max(1)));
    q.build().fetch_all(pool).await?.iter().map(alert_row).collect()
}

async fn deliveries_of(pool: &SqlitePool, alert_ids: &[String]) -> Result<Vec<DeliveryRow>> {
    if alert_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut q: QueryBuilder<Sqlite> =
        QueryBuilder::new(format!("SELECT {DELIVERY_COLUMNS} FROM alert_deliveries WHERE alert_id IN ("));
    let mut ids = q.separated(", ");
    for id in alert_ids {
        ids.push_bind(id);
    }
    q.push(") ORDER BY id");
    q.build().fetch_all(pool).await?.iter().map(delivery_row).collect()
}

async fn prune(pool: &SqlitePool, before_ms: i64) -> Result<u64> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "DELETE FROM alert_deliveries WHERE alert_id IN \
         (SELECT id FROM alerts WHERE status = 'resolved' AND resolved_at < ?)",
    )
    .bind(before_ms)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "DELETE FROM alert_deliveries WHERE alert_id IS NULL AND status != 'pending' AND created_at < ?",
    )
    .bind(before_ms)
    .execute(&mut *tx)
    .await?;
    let done = sqlx::query("DELETE FROM alerts WHERE status = 'resolved' AND resolved_at < ?")
        .bind(before_ms)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
