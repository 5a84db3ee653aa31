//! The partition keeper: on every replica, at start and every `EVERY`, the
//! store makes the time partitions (PostgreSQL: `logs` and `run_archive`, one
//! per UTC day of run ids) of yesterday to `AHEAD_DAYS` ahead
//! (`RetentionStore::keep_partitions`: idempotent, safe when replicas race). A
//! keeper down for longer than that costs nothing but a retry: a write whose
//! row finds no partition makes its day's and is tried again (the store).

use std::sync::Arc;
use std::time::Duration;

use madeira_store::RetentionStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clock::now_ms;

/// Days ahead of today that have their partitions.
pub const AHEAD_DAYS: i64 = 7;
/// How often the keeper looks.
pub const EVERY: Duration = Duration::from_secs(3_600);

const DAY_MS: i64 = 86_400_000;

pub(crate) fn spawn(store: Arc<dyn RetentionStore>, cancel: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(EVERY);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = every.tick() => {}
            }
            let now = now_ms();
            match store.keep_partitions(now - DAY_MS, now + AHEAD_DAYS * DAY_MS).await {
                Ok(0) => {}
                Ok(made) => info!(made, "time partitions made"),
                Err(e) => warn!(error = %e, "keeping time partitions failed; tried again in an hour"),
            }
        }
    })
}
