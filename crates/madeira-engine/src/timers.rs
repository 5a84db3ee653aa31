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

#[cfg(test)]
mod tests {
    //! On paused time: a timer fires at its instant, not before, in due order,
    //! whatever order it was armed in (retry backoff, confirmation escalation).

    use super::*;

    fn timer(node: usize, kind: TimerKind) -> Timer {
        Timer { run_id: "r1".into(), node, kind }
    }

    #[tokio::test(start_paused = true)]
    async fn timers_fire_at_their_instant_in_due_order_and_not_before() {
        let mut timers = Timers::default();
        let now = crate::now_ms();
        timers.at(now + 3_600_000, timer(2, TimerKind::ConfirmFallback));
        timers.at(now + 60_000, timer(1, TimerKind::ConfirmOverdue));
        timers.at(now + 1_500, timer(0, TimerKind::RetryDue));
        let start = tokio::time::Instant::now();
        let first = timers.next().await;
        assert_eq!((first.node, first.kind), (0, TimerKind::RetryDue));
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(1_400) && waited < Duration::from_millis(1_600),
            "{waited:?}"
        );
        let second = timers.next().await;
        assert_eq!((second.node, second.kind), (1, TimerKind::ConfirmOverdue));
        assert!(start.elapsed() >= Duration::from_millis(59_900), "{:?}", start.elapsed());
        // Nothing else is due before the hour: the fallback waits for it.
        let early = tokio::time::timeout(Duration::from_secs(3_000), timers.next()).await;
        assert!(early.is_err(), "the fallback fired before its hour");
        let third = timers.next().await;
        assert_eq!((third.node, third.kind), (2, TimerKind::ConfirmFallback));
        assert!(start.elapsed() >= Duration::from_millis(3_599_900), "{:?}", start.elapsed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_in_the_past_fires_at_once() {
        let mut timers = Timers::default();
        timers.at(crate::now_ms() - 10_000, timer(0, TimerKind::RetryDue));
        let start = tokio::time::Instant::now();
        assert_eq!(timers.next().await.kind, TimerKind::RetryDue);
        assert!(start.elapsed() < Duration::from_millis(5), "{:?}", start.elapsed());
    }
}
