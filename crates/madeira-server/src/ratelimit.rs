//! Per-flow trigger rate limits (governor): manual and event triggers beyond a
//! flow's `rate_limit` (default 100/s) answer 429 with `Retry-After`. Cron runs are
//! not limited here: the schedule itself bounds them.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use madeira_core::model::RateLimitDef;

/// The limit of a flow without `rate_limit`.
pub const DEFAULT_LIMIT: RateLimitDef = RateLimitDef { count: 100, per: Duration::from_secs(1) };

#[derive(Default)]
pub struct RateLimits {
    limiters: Mutex<HashMap<String, (RateLimitDef, Arc<DefaultDirectRateLimiter>)>>,
}

impl RateLimits {
    /// Takes one trigger from `flow`'s budget, or says how long to wait.
    pub fn check(&self, flow: &str, limit: Option<RateLimitDef>) -> Result<(), Duration> {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        let limiter = {
            let mut map = match self.limiters.lock() {
                Ok(m) => m,
                Err(poisoned) => poisoned.into_inner(),
            };
            let entry = map.entry(flow.to_string()).or_insert_with(|| (limit, Arc::new(limiter_for(limit))));
            if entry.0 != limit {
                *entry = (limit, Arc::new(limiter_for(limit)));
            }
            entry.1.clone()
        };
        limiter.check().map_err(|not_until| {
            not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()))
        })
    }
}

fn limiter_for(limit: RateLimitDef) -> DefaultDirectRateLimiter {
    let count = NonZeroU32::new(limit.count.max(1)).unwrap_or(NonZeroU32::MIN);
    let period = (limit.per / count.get()).max(Duration::from_nanos(1));
    let quota =
        Quota::with_period(period).map(|q| q.allow_burst(count)).unwrap_or_else(|| Quota::per_second(count));
    RateLimiter::direct(quota)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_burst_and_names_a_wait() {
        let limits = RateLimits::default();
        let limit = Some(RateLimitDef { count: 3, per: Duration::from_secs(60) });
        for _ in 0..3 {
            assert!(limits.check("f", limit).is_ok());
        }
        let wait = limits.check("f", limit).expect_err("fourth is limited");
        assert!(wait > Duration::from_secs(1) && wait <= Duration::from_secs(20), "{wait:?}");
        assert!(limits.check("other", limit).is_ok(), "limits are per flow");
    }
}
