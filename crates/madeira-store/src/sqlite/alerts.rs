//! SQLite side of `AlertStore`: alert and delivery rows, upserted in one
//! transaction per batch; the open set a restart resumes from; listings; pruning.

use async_trait::async_trait;
use sqlx::sqlite::SqliteRow;
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};

use super::SqliteStore;
use crate::{AlertBatch, AlertQuery, AlertRow, AlertStore, DeliveryRow, OpenAlerts, Result, StoreError};

const ALERT_COLUMNS: &str =
    "id, key, severity, status, flow, node, details, created_at, notify_at, updated_at, resolved_at";
const DELIVERY_COLUMNS: &str =
    "id, alert_id, channel, kind, status, attempts, last_error, digest_id, created_at, sent_at";

#[async_trait]
impl AlertStore for SqliteStore {
    async fn write_alerts(&self, batch: &AlertBatch) -> Result<()> {
        write(&self.write, batch).await
    }
    async fn open_alerts(&self) -> Result<OpenAlerts> {
        open(&self.write).await
    }
    async fn list_alerts(&self, query: &AlertQuery) -> Result<Vec<AlertRow>> {
        list(&self.read, query).await
    }
    async fn deliveries_of(&self, alert_ids: &[String]) -> Result<Vec<DeliveryRow>> {
        deliveries_of(&self.read, alert_ids).await
    }
    async fn prune_alerts(&self, before_ms: i64) -> Result<u64> {
        prune(&self.write, before_ms).await
    }
}

async fn write(pool: &SqlitePool, batch: &AlertBatch) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::sqlite::SqliteStore;
    use crate::*;

    fn alert(id: &str, status: &str) -> AlertRow {
        AlertRow {
            id: id.into(),
            key: format!("k-{id}"),
            severity: "critical".into(),
            status: status.into(),
            flow: Some("f".into()),
            node: Some("n".into()),
            details: json!({"error": "boom"}),
            created_at: 1,
            notify_at: 2,
            updated_at: 3,
            resolved_at: (status == "resolved").then_some(4),
        }
    }

    fn delivery(
        id: &str,
        alert: Option<&str>,
        kind: &str,
        status: &str,
        digest: Option<&str>,
    ) -> DeliveryRow {
        DeliveryRow {
            id: id.into(),
            alert_id: alert.map(str::to_string),
            channel: "c".into(),
            kind: kind.into(),
            status: status.into(),
            attempts: 0,
            last_error: None,
            digest_id: digest.map(str::to_string),
            created_at: 5,
            sent_at: None,
        }
    }

    #[tokio::test]
    async fn open_set_holds_what_a_restart_must_send_and_prune_drops_old_resolved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = SqliteStore::open_path(&dir.path().join("m.db")).await.expect("open");
        let batch = AlertBatch {
            alerts: vec![alert("a1", "firing"), alert("a2", "resolved"), alert("a3", "resolved")],
            deliveries: vec![
                delivery("d1", Some("a1"), "firing", "sent", None),
                delivery("d2", Some("a2"), "resolved", "merged", Some("d4")),
                delivery("d3", Some("a3"), "resolved", "sent", None),
                delivery("d4", None, "digest", "pending", None),
            ],
        };
        s.write_alerts(&batch).await.expect("write");
        let open = s.open_alerts().await.expect("open");
        let ids: Vec<_> = open.alerts.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["a1", "a2"]);
        let ids: Vec<_> = open.deliveries.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["d2", "d4"]);
        assert_eq!(open.alerts[0].details, json!({"error": "boom"}));

        let firing = AlertQuery { status: Some("firing".into()), flow: None, limit: 10 };
        assert_eq!(s.list_alerts(&firing).await.expect("list").len(), 1);
        let of = s.deliveries_of(&["a1".into(), "a3".into()]).await.expect("of");
        assert_eq!(of.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["d1", "d3"]);

        let mut sent = delivery("d4", None, "digest", "sent", None);
        sent.sent_at = Some(6);
        s.write_alerts(&AlertBatch { alerts: vec![], deliveries: vec![sent] }).await.expect("upsert");
        assert!(s.open_alerts().await.expect("open").deliveries.is_empty());
        assert_eq!(s.prune_alerts(100).await.expect("prune"), 2);
        let all = AlertQuery { status: None, flow: None, limit: 10 };
        assert_eq!(s.list_alerts(&all).await.expect("list").len(), 1);
    }
}
