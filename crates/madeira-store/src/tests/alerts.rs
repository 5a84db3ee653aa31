//! `AlertStore` on every backend: the open set a restart resumes from, listings,
//! upserts and pruning.

use serde_json::json;

use crate::mysql::MySqlStore;
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::testing::{MySqlTestDb, PgTestDb};
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
        ..AlertBatch::default()
    };
    s.write_alerts(&batch).await.expect("write");
    let open = s.open_alerts().await.expect("open");
    let ids: Vec<_> = open.alerts.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["a1", "a2"]);
    let ids: Vec<_> = open.deliveries.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["d2", "d4"]);
    assert_eq!(open.alerts[0].details, json!({"error": "boom"}));

    let firing = AlertQuery { status: Some("firing".into()), flow: None, limit: 10, before: None };
    assert_eq!(s.list_alerts(&firing).await.expect("list").len(), 1);
    // Keyset pages, newest first: two, then what is older than the last of them.
    let page = |before: Option<&str>| AlertQuery {
        limit: 2,
        before: before.map(str::to_string),
        ..AlertQuery::default()
    };
    let ids = |rows: Vec<crate::AlertRow>| rows.into_iter().map(|a| a.id).collect::<Vec<_>>();
    assert_eq!(ids(s.list_alerts(&page(None)).await.expect("page 1")), ["a3", "a2"]);
    assert_eq!(ids(s.list_alerts(&page(Some("a2"))).await.expect("page 2")), ["a1"]);
    let of = s.deliveries_of(&["a1".into(), "a3".into()]).await.expect("of");
    assert_eq!(of.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["d1", "d3"]);

    let mut sent = delivery("d4", None, "digest", "sent", None);
    sent.sent_at = Some(6);
    s.write_alerts(&AlertBatch { deliveries: vec![sent], ..AlertBatch::default() }).await.expect("upsert");
    assert!(s.open_alerts().await.expect("open").deliveries.is_empty());
    assert_eq!(s.prune_alerts(100).await.expect("prune"), 2);
    let all = AlertQuery { status: None, flow: None, limit: 10, before: None };
    assert_eq!(s.list_alerts(&all).await.expect("list").len(), 1);
}

async fn the_inbox_is_consumed_only_under_the_leaders_fence<S: Store + AlertStore>(s: &S) {
    // Leases are judged by the database's clock: the callers' (here an hour
    // apart) do not matter; a lease given up (negative length) lapses at once.
    let (early, late) = (1_000, 1_000 + 3_600_000);
    assert!(s.lead("alerts", "r1", early, 60_000).await.expect("lead"));
    assert!(!s.lead("alerts", "r2", late, 60_000).await.expect("lead"), "r1's lease runs for a minute");
    assert!(s.lead("alerts", "r1", early, 60_000).await.expect("renew"));
    assert!(!s.lead("alerts", "r2", late, 60_000).await.expect("lead"), "renewed");
    assert!(s.lead("alerts", "r1", early, -1).await.expect("give up"), "r1 gives its lease up");
    assert!(s.lead("alerts", "r2", early, 60_000).await.expect("takeover"), "r1's lease ran out");

    s.push_alert_events(&[json!({"e": 1}), json!({"e": 2})], 10).await.expect("push");
    s.push_alert_events(&[json!({"e": 3})], 11).await.expect("push");
    let events = s.alert_events(10).await.expect("read");
    assert_eq!(events.iter().map(|e| e.body["e"].as_i64()).collect::<Vec<_>>(), [Some(1), Some(2), Some(3)]);
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(s.alert_events(2).await.expect("read").len(), 2);

    let deposed = AlertBatch {
        alerts: vec![alert("x1", "pending")],
        fence: Some(Fence { role: "alerts".into(), holder: "r1".into() }),
        consumed: events.iter().map(|e| e.seq).collect(),
        ..AlertBatch::default()
    };
    match s.write_alerts(&deposed).await {
        Err(StoreError::NotLeader { holder, .. }) => assert_eq!(holder, "r1"),
        other => panic!("a deposed leader's write must be refused, got {other:?}"),
    }
    assert_eq!(s.alert_events(10).await.expect("read").len(), 3, "nothing consumed");
    assert!(s.open_alerts().await.expect("open").alerts.is_empty(), "nothing written");

    let leader = AlertBatch {
        alerts: vec![alert("x2", "pending")],
        fence: Some(Fence { role: "alerts".into(), holder: "r2".into() }),
        consumed: vec![events[0].seq, events[1].seq],
        ..AlertBatch::default()
    };
    s.write_alerts(&leader).await.expect("leader writes");
    let left = s.alert_events(10).await.expect("read");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].body, json!({"e": 3}));
    assert_eq!(s.open_alerts().await.expect("open").alerts.len(), 1);

    // The engine's commit that ends a run carries its event into the inbox.
    let batch = Batch { alert_events: vec![json!({"e": 4}).to_string()], ..Batch::default() };
    s.commit(&batch).await.expect("commit");
    let left = s.alert_events(10).await.expect("read");
    assert_eq!(left.iter().map(|e| e.body["e"].as_i64()).collect::<Vec<_>>(), [Some(3), Some(4)]);
}

#[tokio::test]
async fn sqlite_inbox_is_consumed_only_under_the_leaders_fence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = SqliteStore::open_path(&dir.path().join("m.db")).await.expect("open");
    the_inbox_is_consumed_only_under_the_leaders_fence(&s).await;
}

#[tokio::test]
async fn postgres_inbox_is_consumed_only_under_the_leaders_fence() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let s = PostgresStore::open(&db.url).await.expect("open postgres");
    the_inbox_is_consumed_only_under_the_leaders_fence(&s).await;
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

#[tokio::test]
async fn mysql_inbox_is_consumed_only_under_the_leaders_fence() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    let s = MySqlStore::open(&db.url).await.expect("open mysql");
    the_inbox_is_consumed_only_under_the_leaders_fence(&s).await;
}

#[tokio::test]
async fn mysql_open_set_holds_what_a_restart_must_send_and_prune_drops_old_resolved() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    let s = MySqlStore::open(&db.url).await.expect("open mysql");
    open_set_holds_what_a_restart_must_send_and_prune_drops_old_resolved(&s).await;
}
