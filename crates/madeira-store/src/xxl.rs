//! XXL-JOB executors and callbacks as the replicas share them (`XxlStore`): an
//! executor registers with one replica and every replica may trigger it; a
//! callback reaches one replica and the attempt may run on another (or on the
//! same one after a restart). Used by `madeira-xxl`.

use async_trait::async_trait;

use crate::Result;

/// One registered executor of an app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XxlExecutorRow {
    pub app: String,
    /// As registered, less a trailing `/`.
    pub address: String,
    /// First registration of this lifetime (after a silence of `dead_ms`, a new one).
    pub since_ms: i64,
    /// Last registration.
    pub seen_ms: i64,
}

/// The first callback received for a `logId` with one app's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XxlCallbackRow {
    pub log_id: i64,
    /// The app whose token the callback carried.
    pub app: String,
    /// `handleCode` (200: success).
    pub code: i64,
    pub msg: Option<String>,
    pub at_ms: i64,
}

/// XXL-JOB registrations and callbacks.
#[async_trait]
pub trait XxlStore: Send + Sync + 'static {
    /// Records or renews `address` of `app` at `now_ms`; one silent for `dead_ms`
    /// or longer starts a new lifetime (`since_ms` = `now_ms`).
    async fn xxl_register(&self, app: &str, address: &str, now_ms: i64, dead_ms: i64) -> Result<()>;
    /// Drops `address` of `app`; false when it was not there.
    async fn xxl_unregister(&self, app: &str, address: &str) -> Result<bool>;
    /// Every executor seen at `since_ms` or later, by app then address.
    async fn xxl_executors(&self, since_ms: i64) -> Result<Vec<XxlExecutorRow>>;
    /// Keeps `cb` unless its `logId` has one of the same app already; true when it is the first.
    async fn xxl_put_callback(&self, cb: &XxlCallbackRow) -> Result<bool>;
    /// The callbacks kept for `log_ids` (each app's), by logId then app.
    async fn xxl_callbacks(&self, log_ids: &[i64]) -> Result<Vec<XxlCallbackRow>>;
    /// Forgets executors not seen since `executors_before_ms` and callbacks older
    /// than `callbacks_before_ms`; returns the rows deleted.
    async fn xxl_prune(&self, executors_before_ms: i64, callbacks_before_ms: i64) -> Result<u64>;
}
