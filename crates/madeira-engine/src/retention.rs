//! Retention: finished runs (with their transitions, outputs, attempts and logs)
//! and audit rows older than `retention` are deleted in small batches, in a task of
//! its own so the engine's commits are never held up for long.

use std::sync::Arc;
use std::time::Duration;

use madeira_store::RetentionStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::{EngineOptions, clock::now_ms};

const BATCH: u32 = 200;

pub(crate) fn spawn(
    store: Arc<dyn RetentionStore>,
    options: EngineOptions,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(options.sweep_every);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = every.tick() => {}
            }
            let cutoff = now_ms() - i64::try_from(options.retention.as_millis()).unwrap_or(i64::MAX / 2);
            let mut total = 0;
            loop {
                match store.prune(cutoff, BATCH).await {
                    Ok(n) => {
                        total += n;
                        if n < u64::from(BATCH) || cancel.is_cancelled() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => {
                        error!(error = %e, "retention sweep failed");
                        break;
                    }
                }
            }
            if total > 0 {
                info!(runs = total, "retention pruned finished runs");
            }
        }
    })
}
