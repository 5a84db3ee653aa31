//! Whether the store takes writes. Every group commit and every batch of run
//! creations reports its outcome here. While the last one failed because the
//! store could not write (`StoreError::is_unavailable`: disk full, I/O error, lost
//! connection, deleted store file), the handle reports the store down (`/readyz`
//! answers 503 with the reason) and a probe writes one small row every second;
//! the first write that succeeds — probe, commit or creation — marks it up again.
//! Observers hear each change (`EngineObserver::store_up`, the metrics).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madeira_store::{HealthStore, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::observer::EngineObserver;

pub(crate) struct StoreHealth {
    down: AtomicBool,
    last_error: Mutex<Option<String>>,
    failures: AtomicU64,
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
            observers,
            went_down: tokio::sync::Notify::new(),
            came_up: tokio::sync::Notify::new(),
        }
    }

    /// A write succeeded.
    pub(crate) fn wrote(&self) {
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
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
        if !self.down.swap(true, Ordering::AcqRel) {
            error!(error = %e, what, "the store cannot write; answering 503 and not ready until it can");
            for o in &self.observers {
                o.store_up(false);
            }
            self.went_down.notify_one();
        }
    }

    /// `Err(last error)` while the store is down.
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

    /// While the store is down, probes it every second until a write succeeds.
    pub(crate) fn spawn_probe(
        self: Arc<Self>,
        store: Arc<dyn HealthStore>,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                if self.status().is_ok() {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = self.went_down.notified() => {}
                    }
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                match store.probe(crate::now_ms()).await {
                    Ok(()) => self.wrote(),
                    Err(e) => self.failed("probe", &e),
                }
            }
        })
    }
}
