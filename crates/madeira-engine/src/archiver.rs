//! The archiver: runs that finished more than `archive_after` ago are folded
//! into one compressed archive row each (`ArchiveStore::fold_finished`), in
//! small batches paced like retention's, in a task of its own so the engine's
//! commits are never held up for long: the batch adapts so that one holds the
//! store (SQLite's single writer, a server's WAL flush) about `TARGET`, and the
//! archiver rests at least as long as its last batch took. Every replica runs it: each batch locks
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

/// Runs per batch: the first, and the bounds the batch adapts within.
const FIRST_BATCH: u32 = 50;
const MIN_BATCH: u32 = 10;
const MAX_BATCH: u32 = 200;
/// How long one batch should hold the store.
const TARGET: Duration = Duration::from_millis(25);
/// The least rest between two batches of a sweep.
const REST: Duration = Duration::from_millis(20);

/// The next batch size after one of `batch` runs took `took`: halved when it
/// held the store over twice `TARGET`, doubled when under half of it.
fn next_batch(batch: u32, took: Duration) -> u32 {
    if took > TARGET * 2 {
        (batch / 2).max(MIN_BATCH)
    } else if took < TARGET / 2 {
        batch.saturating_mul(2).min(MAX_BATCH)
    } else {
        batch
    }
}
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
        let mut batch = FIRST_BATCH;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let cutoff = now_ms() - i64::try_from(after.as_millis()).unwrap_or(i64::MAX / 2);
            let mut total = 0;
            loop {
                let started = tokio::time::Instant::now();
                match store.fold_finished(cutoff, batch).await {
                    Ok(n) => {
                        total += n;
                        folded.fetch_add(n, Ordering::Relaxed);
                        let took = started.elapsed();
                        let full = n >= u64::from(batch);
                        batch = next_batch(batch, took);
                        if !full || cancel.is_cancelled() {
                            break;
                        }
                        tokio::time::sleep(took.max(REST)).await;
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
        /// What each fold answers (runs folded), in order; then 0.
        script: Mutex<Vec<u64>>,
        /// How long each fold holds the store.
        takes: Duration,
        /// (when, batch asked, cutoff) of every call.
        calls: Mutex<Vec<(Duration, u32, i64)>>,
        start: Instant,
    }

    impl Scripted {
        fn new(script: Vec<u64>, takes: Duration) -> Arc<Self> {
            Arc::new(Scripted {
                script: Mutex::new(script),
                takes,
                calls: Mutex::new(Vec::new()),
                start: Instant::now(),
            })
        }

        fn calls(&self) -> Vec<(u128, u32)> {
            self.calls.lock().expect("calls").iter().map(|c| (c.0.as_millis(), c.1)).collect()
        }
    }

    #[async_trait::async_trait]
    impl ArchiveStore for Scripted {
        async fn fold_finished(&self, before_ms: i64, batch: u32) -> Result<u64> {
            self.calls.lock().expect("calls").push((self.start.elapsed(), batch, before_ms));
            tokio::time::sleep(self.takes).await;
            let mut script = self.script.lock().expect("script");
            Ok(if script.is_empty() { 0 } else { script.remove(0).min(u64::from(batch)) })
        }
        async fn folded(&self) -> Result<(u64, u64)> {
            Ok((0, 0))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn quick_full_batches_grow_follow_20_ms_apart_and_count_what_was_folded() {
        let store = Scripted::new(vec![50, 100, 3, 1], Duration::ZERO);
        let folded = Arc::new(AtomicU64::new(0));
        let cancel = CancellationToken::new();
        let before = now_ms();
        let after = Duration::from_secs(300);
        let task = spawn(store.clone(), after, EVERY, folded.clone(), cancel.clone());
        tokio::time::sleep(EVERY - Duration::from_millis(1)).await;
        assert_eq!(store.calls(), [(0, 50), (20, 100), (40, 200)], "a sweep's batches, 20 ms apart, growing");
        assert_eq!(folded.load(Ordering::Relaxed), 153);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let calls = store.calls();
        assert_eq!(calls.len(), 4, "{calls:?}");
        assert_eq!(calls[3], (EVERY.as_millis(), MAX_BATCH), "the next sweep, at the size reached");
        let cutoffs = store.calls.lock().expect("calls").iter().map(|c| c.2).collect::<Vec<_>>();
        assert!(cutoffs.iter().all(|cutoff| *cutoff <= now_ms() - 300_000 && *cutoff >= before - 300_000));
        assert_eq!(folded.load(Ordering::Relaxed), 154);
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(1), task).await.expect("ends on cancel").expect("task");
    }

    #[tokio::test(start_paused = true)]
    async fn slow_batches_shrink_and_the_archiver_rests_as_long_as_each_took() {
        // Every fold holds the store 100 ms (a busy SQLite writer): the batch
        // halves down to its floor and each rest is as long as the fold was.
        let store = Scripted::new(vec![1_000; 5], Duration::from_millis(100));
        let folded = Arc::new(AtomicU64::new(0));
        let cancel = CancellationToken::new();
        let task = spawn(store.clone(), Duration::ZERO, EVERY, folded.clone(), cancel.clone());
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert_eq!(store.calls(), [(0, 50), (200, 25), (400, 12), (600, 10), (800, 10)]);
        assert_eq!(folded.load(Ordering::Relaxed), 50 + 25 + 12 + 10 + 10);
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(1), task).await.expect("ends on cancel").expect("task");
    }

    #[test]
    fn the_batch_adapts_within_its_bounds() {
        assert_eq!(next_batch(50, Duration::from_millis(5)), 100);
        assert_eq!(next_batch(150, Duration::from_millis(5)), MAX_BATCH);
        assert_eq!(next_batch(50, Duration::from_millis(25)), 50);
        assert_eq!(next_batch(50, Duration::from_millis(60)), 25);
        assert_eq!(next_batch(15, Duration::from_millis(60)), MIN_BATCH);
    }
}
