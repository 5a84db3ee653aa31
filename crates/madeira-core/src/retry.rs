//! Retry policy as plain data: `delay = min(backoff * factor^(n-1), max_backoff) +
//! uniform(0, jitter)` for the n-th retry, and which exit codes never retry.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, the first included (`1` = no retry).
    pub attempts: u32,
    pub backoff: Duration,
    pub factor: f64,
    pub max_backoff: Duration,
    pub jitter: Duration,
    pub no_retry_exit_codes: Vec<i32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 1,
            backoff: Duration::from_secs(5),
            factor: 2.0,
            max_backoff: Duration::from_secs(300),
            jitter: Duration::from_secs(1),
            no_retry_exit_codes: Vec::new(),
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `retry` (1-based). `unit` is a uniform sample in
    /// `[0, 1)` supplied by the caller, so the policy itself stays deterministic.
    pub fn delay(&self, retry: u32, unit: f64) -> Duration {
        let exp = retry.saturating_sub(1).min(1_000) as i32;
        let base = self.backoff.as_secs_f64() * self.factor.max(1.0).powi(exp);
        let capped = base.min(self.max_backoff.as_secs_f64());
        let jitter = self.jitter.as_secs_f64() * unit.clamp(0.0, 1.0);
        Duration::from_secs_f64(capped.max(0.0) + jitter)
    }

    /// Whether an attempt numbered `attempt_in_series` (1-based) may be followed by another.
    pub fn allows_another(&self, attempt_in_series: u32) -> bool {
        attempt_in_series < self.attempts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn grows_exponentially_then_caps() {
        let p = RetryPolicy {
            attempts: 10,
            backoff: Duration::from_secs(5),
            factor: 2.0,
            max_backoff: Duration::from_secs(60),
            jitter: Duration::ZERO,
            no_retry_exit_codes: vec![],
        };
        assert_eq!(p.delay(1, 0.5), Duration::from_secs(5));
        assert_eq!(p.delay(2, 0.5), Duration::from_secs(10));
        assert_eq!(p.delay(4, 0.5), Duration::from_secs(40));
        assert_eq!(p.delay(5, 0.5), Duration::from_secs(60));
    }

    proptest! {
        #[test]
        fn delay_stays_within_bounds(
            backoff_ms in 0u64..100_000, factor in 1.0f64..10.0, max_ms in 0u64..1_000_000,
            jitter_ms in 0u64..10_000, retry in 1u32..10_000, unit in 0.0f64..1.0,
        ) {
            let p = RetryPolicy {
                attempts: 3,
                backoff: Duration::from_millis(backoff_ms),
                factor,
                max_backoff: Duration::from_millis(max_ms),
                jitter: Duration::from_millis(jitter_ms),
                no_retry_exit_codes: vec![],
            };
            let d = p.delay(retry, unit).as_secs_f64();
            let lower = (backoff_ms.min(max_ms)) as f64 / 1000.0;
            let upper = (max_ms + jitter_ms) as f64 / 1000.0;
            prop_assert!(d + 1e-9 >= lower, "{d} < {lower}");
            prop_assert!(d <= upper + 1e-9, "{d} > {upper}");
        }
    }
}
