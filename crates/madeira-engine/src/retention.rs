//! Retention: finished runs (with their transitions, outputs, attempts and logs)
//! and audit rows older than `retention` are deleted in small batches, in a task of
//! its own so the engine's commits are never held up for long. Where the store
//! keeps time partitions (PostgreSQL), a day whose every run is past retention
//! first has its partitions dropped (`RetentionStore::drop_days`).

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
            // Whole days first (time partitions, where the store has them): the
            // batches below then leave those days' logs and archive rows alone.
            match store.drop_days(cutoff).await {
                Ok(0) => {}
                Ok(days) => info!(days, "retention dropped whole days of history"),
                Err(e) => error!(error = %e, "retention could not drop a day's partitions"),
            }
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

#[cfg(test)]
mod tests {
    //! The sweep's pacing on paused time, with a store that answers from a script:
    //! a sweep every `sweep_every`, full batches followed 20 ms apart until a short
    //! one, the cutoff `retention` before now, and an end on cancel.

    use std::sync::Mutex;

    use madeira_store::Result;
    use tokio::time::Instant;

    use super::*;

    /// Answers `prune` from `script` (then 0), recording when and with which cutoff.
    struct Scripted {
        script: Mutex<Vec<u64>>,
        calls: Mutex<Vec<(Duration, i64)>>,
        start: Instant,
    }

    #[async_trait::async_trait]
    impl RetentionStore for Scripted {
        async fn prune(&self, before_ms: i64, batch: u32) -> Result<u64> {
            assert_eq!(batch, BATCH);
            self.calls.lock().expect("calls").push((self.start.elapsed(), before_ms));
            let mut script = self.script.lock().expect("script");
            Ok(if script.is_empty() { 0 } else { script.remove(0) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn full_batches_follow_20_ms_apart_and_the_next_sweep_waits_its_interval() {
        let store = Arc::new(Scripted {
            script: Mutex::new(vec![200, 200, 37, 200, 5]),
            calls: Mutex::new(Vec::new()),
            start: Instant::now(),
        });
        let options = EngineOptions {
            retention: Duration::from_secs(7 * 86_400),
            sweep_every: Duration::from_secs(3_600),
            ..EngineOptions::default()
        };
        let cancel = CancellationToken::new();
        let before = now_ms();
        let task = spawn(store.clone(), options, cancel.clone());
        tokio::time::sleep(Duration::from_secs(3_599)).await;
        let first: Vec<Duration> = store.calls.lock().expect("calls").iter().map(|c| c.0).collect();
        let ms = |d: &Duration| d.as_millis();
        assert_eq!(first.iter().map(ms).collect::<Vec<_>>(), [0, 20, 40], "a sweep's batches, 20 ms apart");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let calls = store.calls.lock().expect("calls").clone();
        assert_eq!(calls.len(), 5, "{calls:?}");
        assert_eq!((ms(&calls[3].0), ms(&calls[4].0)), (3_600_000, 3_600_020), "the next sweep, an hour on");
        let week = 7 * 86_400_000;
        assert!(
            calls.iter().all(|(_, cutoff)| *cutoff <= now_ms() - week && *cutoff >= before - week),
            "{calls:?}"
        );
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(1), task).await.expect("ends on cancel").expect("task");
    }
}
