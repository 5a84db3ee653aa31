//! The engine's timer queue: retry backoffs and manual-confirmation escalation,
//! each an entry in a `DelayQueue` (no scan of every run per tick).

use std::time::Duration;

use futures::StreamExt;
use tokio_util::time::DelayQueue;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TimerKind {
    RetryDue,
    ConfirmOverdue,
    ConfirmFallback,
}

#[derive(Debug, Clone)]
pub(crate) struct Timer {
    pub run_id: String,
    pub node: usize,
    pub kind: TimerKind,
}

#[derive(Default)]
pub(crate) struct Timers {
    queue: DelayQueue<Timer>,
}

impl Timers {
    /// Fires `timer` at `at_ms` (now if that is past).
    pub fn at(&mut self, at_ms: i64, timer: Timer) {
        let delay = (at_ms - crate::now_ms()).max(0) as u64;
        self.queue.insert(timer, Duration::from_millis(delay));
    }

    /// The next due timer; pending forever while the queue is empty.
    pub async fn next(&mut self) -> Timer {
        loop {
            if self.queue.is_empty() {
                std::future::pending::<()>().await;
            }
            if let Some(expired) = self.queue.next().await {
                return expired.into_inner();
            }
        }
    }
}
