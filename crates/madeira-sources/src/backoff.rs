//! Jittered exponential backoff for reconnecting to a broker: 200 ms doubling to
//! 30 s, each wait drawn uniformly from its upper half ("equal jitter"), so
//! replicas do not reconnect in lockstep after an outage.

use std::time::Duration;

use rand::Rng;

pub const FIRST: Duration = Duration::from_millis(200);
pub const MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// The wait before the next attempt, after one more failure.
    pub fn next_wait(&mut self) -> Duration {
        let ceiling = FIRST.saturating_mul(1u32 << self.failures.min(16)).min(MAX);
        self.failures = self.failures.saturating_add(1);
        let half = ceiling / 2;
        half + rand::rng().random_range(Duration::ZERO..=half)
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_with_jitter_and_is_capped() {
        let mut b = Backoff::default();
        let first = b.next_wait();
        assert!(first >= FIRST / 2 && first <= FIRST, "{first:?}");
        for _ in 0..20 {
            let w = b.next_wait();
            assert!(w <= MAX, "{w:?}");
        }
        assert!(b.next_wait() >= MAX / 2);
        b.reset();
        assert!(b.next_wait() <= FIRST);
    }
}
