//! `AlertStore` on every backend: the open set a restart resumes from, listings,
//! upserts and pruning.

use serde_json::json;

use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::testing::PgTestDb;
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

fn delivery(id: &str, alert: Option<&str>, kind: &str, status: &str, digest: Option<&str>) -> DeliveryRow {
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

async fn open_set_holds_what_a_restart_must_send_and_prune_drops_old_resolved(s: &dyn AlertStore) {
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

#[tokio::test]
async fn sqlite_open_set_holds_what_a_restart_must_send_and_prune_drops_old_resolved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = SqliteStore::open_path(&dir.path().join("m.db")).await.expect("open");
    open_set_holds_what_a_restart_must_send_and_prune_drops_old_resolved(&s).await;
}

#[tokio::test]
async fn postgres_open_set_holds_what_a_restart_must_send_and_prune_drops_old_resolved() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let s = PostgresStore::open(&db.url).await.expect("open postgres");
    open_set_holds_what_a_restart_must_send_and_prune_drops_old_resolved(&s).await;
}
