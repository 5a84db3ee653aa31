//! Time for the alert component: wall-clock milliseconds and sleeping until an
//! instant. Injected, so tests of group_wait, rate limits and a receiver that is
//! down for minutes advance a manual clock instead of sleeping.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;

pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Resolves once `now_ms() >= at_ms`.
    fn sleep_until(&self, at_ms: i64) -> Sleep;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        madeira_engine::now_ms()
    }

    fn sleep_until(&self, at_ms: i64) -> Sleep {
        let wait = u64::try_from(at_ms - self.now_ms()).unwrap_or(0);
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }
}

/// A clock that only moves when told to (tests, benchmarks).
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: watch::Sender<i64>,
}

impl ManualClock {
    pub fn new(start_ms: i64) -> Self {
        Self { now: watch::Sender::new(start_ms) }
    }

    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 4);
        self.now.send_modify(|now| *now += by);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        *self.now.borrow()
    }

    fn sleep_until(&self, at_ms: i64) -> Sleep {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as the clock; if it is gone, never wake.
            if rx.wait_for(|now| *now >= at_ms).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}
