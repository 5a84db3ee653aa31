//! Whether the store takes writes. Every group commit and every batch of run
//! creations reports its outcome here. While the last one failed because the
//! store could not write (`StoreError::is_unavailable`: disk full, I/O error, lost
//! connection, deleted store file), the handle reports the store down (`/readyz`
//! answers 503 with the reason) and a probe writes one small row every second;
//! the first write that succeeds — probe, commit or creation — marks it up again.
//! While it is up and nothing has written for `IDLE_PROBE`, the probe writes too,
//! so a store that went away (a database frozen or unreachable, which fails a write
//! within the store's own wait) is told while no run is writing.
//! Observers hear each change (`EngineObserver::store_up`, the metrics).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madeira_store::{HealthStore, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::observer::EngineObserver;

/// How long the store may go without a write before the probe writes one.
const IDLE_PROBE: Duration = Duration::from_secs(5);

pub(crate) struct StoreHealth {
    down: AtomicBool,
    last_error: Mutex<Option<String>>,
    failures: AtomicU64,
    /// When a write last succeeded.
    last_write: Mutex<tokio::time::Instant>,
    observers: Vec<Arc<dyn EngineObserver>>,
    /// Wakes the probe when the store goes down.
    went_down: tokio::sync::Notify,
    /// Wakes the engine when the store takes writes again (it then resumes the
    /// runs whose resumption failed meanwhile).
    pub(crate) came_up: tokio::sync::Notify,
}

impl StoreHealth {
    pub(crate) fn new(observers: Vec<Arc<dyn EngineObserver>>) -> Self {
        Self {
            down: AtomicBool::new(false),
            last_error: Mutex::new(None),
            failures: AtomicU64::new(0),
            last_write: Mutex::new(tokio::time::Instant::now()),
            observers,
            went_down: tokio::sync::Notify::new(),
            came_up: tokio::sync::Notify::new(),
        }
    }

    /// A write succeeded.
    pub(crate) fn wrote(&self) {
        *self.last_write.lock().unwrap_or_else(|p| p.into_inner()) = tokio::time::Instant::now();
        if self.down.swap(false, Ordering::AcqRel) {
            info!("the store takes writes again; ready");
            self.came_up.notify_one();
            for o in &self.observers {
                o.store_up(true);
            }
        }
    }

    /// A write failed with `e` (`what` names it in the log).
    pub(crate) fn failed(&self, what: &str, e: &StoreError) {
        if !e.is_unavailable() {
            return;
        }
        self.failures.fetch_add(1, Ordering::Relaxed);
        // The reason (`/readyz` says "store unavailable: " before it).
        let reason = match e {
            StoreError::Unavailable(reason) => reason.clone(),
            other => other.to_string(),
        };
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
        if !self.down.swap(true, Ordering::AcqRel) {
            error!(error = %e, what, "the store cannot write; answering 503 and not ready until it can");
            for o in &self.observers {
                o.store_up(false);
            }
            self.went_down.notify_one();
        }
    }

    /// `Err(the last failure's reason)` while the store is down.
    pub(crate) fn status(&self) -> Result<(), String> {
        if self.down.load(Ordering::Acquire) {
            let last = self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
            Err(last.unwrap_or_else(|| "store unavailable".into()))
        } else {
            Ok(())
        }
    }

    /// Writes failed since start.
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// While the store is down, probes it every second until a write succeeds;
    /// while it is up, whenever nothing has written for `IDLE_PROBE`.
    pub(crate) fn spawn_probe(
        self: Arc<Self>,
        store: Arc<dyn HealthStore>,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                if self.status().is_ok() {
                    let last = *self.last_write.lock().unwrap_or_else(|p| p.into_inner());
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        // Probed a second after going down, then every second (below).
                        _ = self.went_down.notified() => continue,
                        // Written since: due again `IDLE_PROBE` after that write.
                        _ = tokio::time::sleep_until(last + IDLE_PROBE) => {
                            if *self.last_write.lock().unwrap_or_else(|p| p.into_inner()) != last {
                                continue;
                            }
                        }
                    }
                } else {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
                let probed = tokio::select! {
                    _ = cancel.cancelled() => return,
                    probed = store.probe(crate::now_ms()) => probed,
                };
                match probed {
                    Ok(()) => self.wrote(),
                    Err(e) => self.failed("probe", &e),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Duration;

    use madeira_store::{HealthStore, StoreError};
    use tokio_util::sync::CancellationToken;

    use super::StoreHealth;

    /// A store whose probe write fails while `down`, counting probes.
    #[derive(Default)]
    struct Probed {
        down: AtomicBool,
        probes: AtomicU64,
    }

    #[async_trait::async_trait]
    impl HealthStore for Probed {
        async fn probe(&self, _now_ms: i64) -> madeira_store::Result<()> {
            self.probes.fetch_add(1, Ordering::Relaxed);
            if self.down.load(Ordering::Relaxed) {
                return Err(StoreError::Unavailable("the database did not answer".into()));
            }
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_store_is_probed_and_told_down_without_any_run_writing() {
        let health = Arc::new(StoreHealth::new(Vec::new()));
        let store = Arc::new(Probed::default());
        let cancel = CancellationToken::new();
        let task = health.clone().spawn_probe(store.clone(), cancel.clone());
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(store.probes.load(Ordering::Relaxed), 2, "a probe every 5 s of idleness");
        assert!(health.status().is_ok());
        store.down.store(true, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            health.status(),
            Err("the database did not answer".into()),
            "told down while nothing else writes"
        );
        store.down.store(false, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(health.status().is_ok(), "up again at the next probe, a second later");
        cancel.cancel();
        task.await.expect("probe task");
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_written_to_is_not_probed() {
        let health = Arc::new(StoreHealth::new(Vec::new()));
        let store = Arc::new(Probed::default());
        let cancel = CancellationToken::new();
        let task = health.clone().spawn_probe(store.clone(), cancel.clone());
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            health.wrote();
        }
        assert_eq!(store.probes.load(Ordering::Relaxed), 0, "commits say enough");
        cancel.cancel();
        task.await.expect("probe task");
    }
}
