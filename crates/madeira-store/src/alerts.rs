//! The alert aggregate (SPEC §7): alert rows and their per-channel deliveries, and
//! the `AlertStore` trait that keeps them so a restart delivers what was pending.
//! Kept apart from `Store` so the run-state trait stays as it is.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value as Json;

use crate::Result;

/// One alert as stored. `details` is the alert component's own JSON (summary,
/// error, runs, attempts, skipped nodes, labels); the store does not look inside.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertRow {
    pub id: String,
    pub key: String,
    /// `critical` or `warning`.
    pub severity: String,
    /// `pending` (gathering during `group_wait`), `firing` or `resolved`.
    pub status: String,
    pub flow: Option<String>,
    pub node: Option<String>,
    pub details: Json,
    pub created_at: i64,
    pub notify_at: i64,
    pub updated_at: i64,
    pub resolved_at: Option<i64>,
}

/// One message to one channel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeliveryRow {
    pub id: String,
    /// `None` for a digest or a test message.
    pub alert_id: Option<String>,
    pub channel: String,
    /// `firing`, `update`, `reminder`, `resolved`, `digest` or `test`.
    pub kind: String,
    /// `pending`, `sent`, `merged` (carried by the digest `digest_id`) or `failed`.
    pub status: String,
    pub attempts: u32,
    /// The last failure, already scrubbed of secrets by the caller.
    pub last_error: Option<String>,
    pub digest_id: Option<String>,
    pub created_at: i64,
    pub sent_at: Option<i64>,
}

/// Writes applied in one transaction (rows are inserted or replaced by id).
#[derive(Debug, Clone, Default)]
pub struct AlertBatch {
    pub alerts: Vec<AlertRow>,
    pub deliveries: Vec<DeliveryRow>,
    /// When set, the batch is written only while `fence.holder` holds `fence.role`
    /// (`StoreError::NotLeader` otherwise, and nothing is written).
    pub fence: Option<Fence>,
    /// Inbox events (by `seq`) deleted in the same transaction: what this batch
    /// was computed from. Listed one by one: on PostgreSQL a lower `seq` may
    /// commit after a higher one was read, so a range would delete it unread.
    pub consumed: Vec<i64>,
}

impl AlertBatch {
    pub fn is_empty(&self) -> bool {
        self.alerts.is_empty() && self.deliveries.is_empty() && self.consumed.is_empty()
    }
}

/// A cluster-wide role a write depends on (see `AlertStore::lead`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub role: String,
    pub holder: String,
}

/// One alert event waiting in the inbox for the replica that aggregates alerts.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxEvent {
    pub seq: i64,
    pub body: Json,
}

/// What a restart must pick up again.
#[derive(Debug, Clone, Default)]
pub struct OpenAlerts {
    /// Alerts `pending` or `firing`, and alerts any open delivery refers to.
    pub alerts: Vec<AlertRow>,
    /// Deliveries `pending`, and those `merged` into a digest still `pending`,
    /// oldest first.
    pub deliveries: Vec<DeliveryRow>,
}

#[derive(Debug, Clone, Default)]
pub struct AlertQuery {
    /// `pending`, `firing` or `resolved`.
    pub status: Option<String>,
    pub flow: Option<String>,
    pub limit: u32,
    /// Only alerts older than this id (keyset paging: the last id of a page).
    pub before: Option<String>,
}

/// Alerts and their deliveries. One implementation per backend.
#[async_trait]
pub trait AlertStore: Send + Sync + 'static {
    /// Inserts or replaces every row of `batch` in one transaction.
    async fn write_alerts(&self, batch: &AlertBatch) -> Result<()>;
    async fn open_alerts(&self) -> Result<OpenAlerts>;
    /// Newest first.
    async fn list_alerts(&self, query: &AlertQuery) -> Result<Vec<AlertRow>>;
    /// The status of alert `id` (`pending`, `firing`, `resolved`) and its flow,
    /// `None` if unknown.
    async fn alert_status(&self, id: &str) -> Result<Option<(String, Option<String>)>>;
    /// Deliveries of these alerts, and the digests that carried them, oldest first.
    async fn deliveries_of(&self, alert_ids: &[String]) -> Result<Vec<DeliveryRow>>;
    /// Deletes resolved alerts resolved before `before_ms`, with their deliveries,
    /// and finished digests and tests created before it. Returns alerts deleted.
    async fn prune_alerts(&self, before_ms: i64) -> Result<u64>;
    /// Appends alert events (any replica) for the aggregating replica to take.
    async fn push_alert_events(&self, bodies: &[Json], now_ms: i64) -> Result<()>;
    /// The oldest `limit` inbox events, in the order they were pushed.
    async fn alert_events(&self, limit: u32) -> Result<Vec<InboxEvent>>;
    /// Takes `role` for `holder`, or renews it, until `now_ms + lease_ms`. False
    /// while another holder's lease has not run out. A negative `lease_ms` gives
    /// the role up (others may take it at once).
    async fn lead(&self, role: &str, holder: &str, now_ms: i64, lease_ms: i64) -> Result<bool>;
}
