//! Registered executors by app, expiring like XXL-JOB's `xxl_job_registry`: an
//! executor re-registers every 30 s (`BEAT_TIMEOUT`), and one not heard from for
//! 90 s (`DEAD_TIMEOUT`) is dead and gets no trigger. `registryRemove` drops it at
//! once. Addresses are kept as sent, less a trailing `/`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// XXL-JOB's registry heartbeat interval.
pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// Silence after which an executor is dead (3 missed heartbeats).
pub const DEAD_AFTER: Duration = Duration::from_secs(90);

/// One executor of an app.
#[derive(Debug, Clone)]
pub struct Seen {
    /// First registration, epoch milliseconds.
    pub since_ms: i64,
    /// Last registration, epoch milliseconds.
    pub last_ms: i64,
    last: Instant,
}

/// Executors by app and address.
#[derive(Debug, Default)]
pub struct Registry {
    apps: BTreeMap<String, BTreeMap<String, Seen>>,
}

/// `http://host:port/` → `http://host:port`.
pub fn normalize(address: &str) -> String {
    address.trim().trim_end_matches('/').to_string()
}

impl Registry {
    /// Records a registration; true when `app` had no live executor before.
    pub fn register(&mut self, app: &str, address: &str, now_ms: i64, dead_after: Duration) -> bool {
        let was_empty = self.live(app, dead_after).is_empty();
        let entry = self.apps.entry(app.to_string()).or_default();
        let seen = entry.entry(normalize(address)).or_insert(Seen {
            since_ms: now_ms,
            last_ms: now_ms,
            last: Instant::now(),
        });
        if seen.last.elapsed() >= dead_after {
            seen.since_ms = now_ms;
        }
        seen.last_ms = now_ms;
        seen.last = Instant::now();
        was_empty
    }

    /// Drops an executor (`registryRemove`, or found dead by its `/beat`); true when it was there.
    pub fn remove(&mut self, app: &str, address: &str) -> bool {
        let address = normalize(address);
        self.apps.get_mut(app).is_some_and(|m| m.remove(&address).is_some())
    }

    /// Live addresses of `app`, sorted (XXL-JOB sorts them too: `first` is stable).
    pub fn live(&self, app: &str, dead_after: Duration) -> Vec<String> {
        self.apps
            .get(app)
            .map(|m| {
                m.iter().filter(|(_, s)| s.last.elapsed() < dead_after).map(|(a, _)| a.clone()).collect()
            })
            .unwrap_or_default()
    }

    /// True while `address` of `app` is registered and not expired.
    pub fn is_live(&self, app: &str, address: &str, dead_after: Duration) -> bool {
        self.apps
            .get(app)
            .and_then(|m| m.get(&normalize(address)))
            .is_some_and(|s| s.last.elapsed() < dead_after)
    }

    /// Every executor with its liveness, for the fleet view; forgets ones dead for
    /// ten times `dead_after`.
    pub fn entries(&mut self, dead_after: Duration) -> Vec<(String, String, Seen, bool)> {
        for m in self.apps.values_mut() {
            m.retain(|_, s| s.last.elapsed() < dead_after * 10);
        }
        self.apps
            .iter()
            .flat_map(|(app, m)| {
                m.iter().map(move |(a, s)| (app.clone(), a.clone(), s.clone(), s.last.elapsed() < dead_after))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executors_expire_and_are_removed() {
        let mut r = Registry::default();
        assert!(r.register("app", "http://b:9999/", 1, DEAD_AFTER), "first executor of the app");
        assert!(!r.register("app", "http://a:9999", 2, DEAD_AFTER));
        assert_eq!(r.live("app", DEAD_AFTER), vec!["http://a:9999", "http://b:9999"]);
        assert!(r.live("app", Duration::ZERO).is_empty(), "all expired with a zero lifetime");
        assert!(r.remove("app", "http://b:9999/"));
        assert_eq!(r.live("app", DEAD_AFTER), vec!["http://a:9999"]);
        assert!(r.live("other", DEAD_AFTER).is_empty());
    }
}
