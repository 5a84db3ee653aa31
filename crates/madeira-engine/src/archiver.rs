//! The archiver: runs that finished more than `archive_after` ago are folded
//! into one compressed archive row each (`ArchiveStore::fold_finished`), in
//! small batches paced like retention's, in a task of its own so the engine's
//! commits are never held up for long. Every replica runs it: each batch locks
//! the runs it folds (`FOR UPDATE SKIP LOCKED`), so two replicas fold different
//! runs, and a run a replica holds (a live lease) is left alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use madeira_store::ArchiveStore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

use crate::clock::now_ms;

const BATCH: u32 = 200;
/// How often the archiver looks for runs to fold.
pub const EVERY: Duration = Duration::from_secs(10);

pub(crate) fn spawn(
    store: Arc<dyn ArchiveStore>,
    after: Duration,
    every: Duration,
    folded: Arc<AtomicU64>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let cutoff = now_ms() - i64::try_from(after.as_millis()).unwrap_or(i64::MAX / 2);
            let mut total = 0;
            loop {
                match store.fold_finished(cutoff, BATCH).await {
                    Ok(n) => {
                        total += n;
                        folded.fetch_add(n, Ordering::Relaxed);
                        if n < u64::from(BATCH) || cancel.is_cancelled() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => {
                        error!(error = %e, "archiver: folding finished runs failed");
                        break;
                    }
                }
            }
            if total > 0 {
                debug!(runs = total, "archiver folded finished runs");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    //! The loop's pacing on paused time, with a store that answers from a script.

    use std::sync::Mutex;

    use madeira_store::Result;
    use tokio::time::Instant;

    use super::*;

    struct Scripted {
        script: Mutex<Vec<u64>>,
        calls: Mutex<Vec<(Duration, i64)>>,
        start: Instant,
    }

    #[async_trait::async_trait]
    impl ArchiveStore for Scripted {
        async fn fold_finished(&self, before_ms: i64, batch: u32) -> Result<u64> {
            assert_eq!(batch, BATCH);
            self.calls.lock().expect("calls").push((self.start.elapsed(), before_ms));
            let mut script = self.script.lock().expect("script");
            Ok(if script.is_empty() { 0 } else { script.remove(0) })
        }
        async fn folded(&self) -> Result<(u64, u64)> {
            Ok((0, 0))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn full_batches_follow_20_ms_apart_and_count_what_was_folded() {
        let store = Arc::new(Scripted {
            script: Mutex::new(vec![200, 200, 3, 1]),
            calls: Mutex::new(Vec::new()),
            start: Instant::now(),
        });
        let folded = Arc::new(AtomicU64::new(0));
        let cancel = CancellationToken::new();
        let before = now_ms();
        let after = Duration::from_secs(300);
        let task = spawn(store.clone(), after, EVERY, folded.clone(), cancel.clone());
        tokio::time::sleep(EVERY - Duration::from_millis(1)).await;
        let ms: Vec<u128> = store.calls.lock().expect("calls").iter().map(|c| c.0.as_millis()).collect();
        assert_eq!(ms, [0, 20, 40], "a sweep's batches, 20 ms apart");
        assert_eq!(folded.load(Ordering::Relaxed), 403);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let calls = store.calls.lock().expect("calls").clone();
        assert_eq!(calls.len(), 4, "{calls:?}");
        assert_eq!(calls[3].0.as_millis(), EVERY.as_millis(), "the next sweep");
        assert!(calls.iter().all(|(_, cutoff)| *cutoff <= now_ms() - 300_000 && *cutoff >= before - 300_000));
        assert_eq!(folded.load(Ordering::Relaxed), 404);
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(1), task).await.expect("ends on cancel").expect("task");
    }
}
