//! Picking an executor of an app for a trigger, per XXL-JOB's route strategies.
//! `failover` and `busyover` probe (`/beat`, `/idleBeat`) in address order and are
//! resolved by the executor; the others are pure choices over the live addresses
//! (sorted), with per-job state for round robin, LFU and LRU.

use std::collections::HashMap;
use std::time::Instant;

use madeira_core::XxlRoute;
use sha2::{Digest, Sha256};

/// Per-job routing state.
#[derive(Default)]
pub struct RouteState {
    round: HashMap<i32, usize>,
    /// (job, address) → times picked.
    used: HashMap<(i32, String), u64>,
    /// (job, address) → last pick.
    last: HashMap<(i32, String), Instant>,
}

fn hash64(text: &str) -> u64 {
    let d = Sha256::digest(text.as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

impl RouteState {
    /// The addresses to try, in order, for `route` (`candidates` live and sorted,
    /// never empty). Probing routes get all of them in address order.
    pub fn order(&mut self, route: XxlRoute, job: i32, candidates: &[String]) -> Vec<String> {
        let n = candidates.len();
        let first = match route {
            XxlRoute::First | XxlRoute::Failover | XxlRoute::Busyover | XxlRoute::ShardingBroadcast => 0,
            XxlRoute::Last => n - 1,
            XxlRoute::Round => {
                let next = self.round.entry(job).or_insert(0);
                let i = *next % n;
                *next = next.wrapping_add(1);
                i
            }
            XxlRoute::Random => rand::random_range(0..n),
            // Rendezvous hashing on the job: the same executor while it lives; when
            // it goes only its jobs move.
            XxlRoute::ConsistentHash => {
                (0..n).max_by_key(|&i| hash64(&format!("{job}|{}", candidates[i]))).unwrap_or(0)
            }
            XxlRoute::LeastFrequentlyUsed => (0..n)
                .min_by_key(|&i| self.used.get(&(job, candidates[i].clone())).copied().unwrap_or(0))
                .unwrap_or(0),
            XxlRoute::LeastRecentlyUsed => {
                (0..n).min_by_key(|&i| self.last.get(&(job, candidates[i].clone())).copied()).unwrap_or(0)
            }
        };
        // The pick first, then the others in address order (where a dead pick moves).
        let mut out = vec![candidates[first].clone()];
        out.extend(candidates.iter().enumerate().filter(|(i, _)| *i != first).map(|(_, a)| a.clone()));
        out
    }

    /// Records that `address` got a trigger of `job`.
    pub fn picked(&mut self, job: i32, address: &str) {
        *self.used.entry((job, address.to_string())).or_insert(0) += 1;
        self.last.insert((job, address.to_string()), Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs() -> Vec<String> {
        vec!["http://a".into(), "http://b".into(), "http://c".into()]
    }

    #[test]
    fn fixed_routes() {
        let mut s = RouteState::default();
        assert_eq!(s.order(XxlRoute::First, 1, &addrs())[0], "http://a");
        assert_eq!(s.order(XxlRoute::Last, 1, &addrs())[0], "http://c");
        let rounds: Vec<String> = (0..4).map(|_| s.order(XxlRoute::Round, 1, &addrs())[0].clone()).collect();
        assert_eq!(rounds, ["http://a", "http://b", "http://c", "http://a"]);
        assert_eq!(s.order(XxlRoute::Last, 1, &addrs()).len(), 3, "the others follow the pick");
    }

    #[test]
    fn consistent_hash_keeps_a_job_on_its_executor_unless_it_goes() {
        let mut s = RouteState::default();
        let all = addrs();
        let pick = s.order(XxlRoute::ConsistentHash, 42, &all)[0].clone();
        assert_eq!(s.order(XxlRoute::ConsistentHash, 42, &all)[0], pick);
        let others: Vec<String> = all.iter().filter(|a| **a != pick).cloned().collect();
        let moved = s.order(XxlRoute::ConsistentHash, 42, &others)[0].clone();
        assert_ne!(moved, pick);
        let spread: std::collections::HashSet<String> =
            (0..50).map(|job| s.order(XxlRoute::ConsistentHash, job, &all)[0].clone()).collect();
        assert!(spread.len() > 1, "jobs spread over executors");
    }

    #[test]
    fn least_used_routes_follow_the_picks() {
        let mut s = RouteState::default();
        s.picked(7, "http://a");
        s.picked(7, "http://a");
        s.picked(7, "http://b");
        assert_eq!(s.order(XxlRoute::LeastFrequentlyUsed, 7, &addrs())[0], "http://c");
        s.picked(7, "http://c");
        assert_eq!(s.order(XxlRoute::LeastRecentlyUsed, 7, &addrs())[0], "http://a");
    }
}
