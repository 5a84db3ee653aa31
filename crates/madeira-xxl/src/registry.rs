//! Registered executors by app, expiring like XXL-JOB's `xxl_job_registry`: an
//! executor re-registers every 30 s (`HEARTBEAT`), and one not heard from for
//! 90 s (`DEAD_AFTER`) is dead and gets no trigger. `registryRemove` drops it at
//! once. Addresses are kept as sent, less a trailing `/`.
//!
//! The store holds the registrations (`XxlStore`: an executor registers with one
//! replica, every replica triggers it); this is each replica's copy, written
//! through by its own registrations and replaced by the store's rows every
//! `REFRESH` (`Xxl::keep_registry`). Times are wall-clock milliseconds (the receiving
//! replica's clock, judged by the reading one's: a skew of seconds against a
//! 90 s lifetime).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use madeira_store::XxlExecutorRow;

/// XXL-JOB's registry heartbeat interval.
pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// Silence after which an executor is dead (3 missed heartbeats).
pub const DEAD_AFTER: Duration = Duration::from_secs(90);
/// How often a replica reads the registrations from the store.
pub const REFRESH: Duration = Duration::from_secs(2);

/// One executor of an app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// First registration of this lifetime, epoch milliseconds.
    pub since_ms: i64,
    /// Last registration, epoch milliseconds.
    pub last_ms: i64,
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

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Registry {
    /// Records a registration; true when `app` had no live executor before.
    pub fn register(&mut self, app: &str, address: &str, now_ms: i64, dead_after: Duration) -> bool {
        let was_empty = self.live(app, now_ms, dead_after).is_empty();
        let entry = self.apps.entry(app.to_string()).or_default();
        let seen = entry.entry(normalize(address)).or_insert(Seen { since_ms: now_ms, last_ms: now_ms });
        if now_ms.saturating_sub(seen.last_ms) >= ms(dead_after) {
            seen.since_ms = now_ms;
        }
        seen.last_ms = seen.last_ms.max(now_ms);
        was_empty
    }

    /// Drops an executor (`registryRemove`, or found dead by its `/beat`); true when it was there.
    pub fn remove(&mut self, app: &str, address: &str) -> bool {
        let address = normalize(address);
        self.apps.get_mut(app).is_some_and(|m| m.remove(&address).is_some())
    }

    /// Replaces every registration with the store's `rows`; returns the apps that
    /// had no live executor before and have one now.
    pub fn replace(&mut self, rows: Vec<XxlExecutorRow>, now_ms: i64, dead_after: Duration) -> Vec<String> {
        let before: BTreeSet<String> =
            self.apps.keys().filter(|app| !self.live(app, now_ms, dead_after).is_empty()).cloned().collect();
        self.apps.clear();
        for row in rows {
            let seen = Seen { since_ms: row.since_ms, last_ms: row.seen_ms };
            self.apps.entry(row.app).or_default().insert(normalize(&row.address), seen);
        }
        self.apps
            .keys()
            .filter(|app| !before.contains(*app) && !self.live(app, now_ms, dead_after).is_empty())
            .cloned()
            .collect()
    }

    /// Live addresses of `app`, sorted (XXL-JOB sorts them too: `first` is stable).
    pub fn live(&self, app: &str, now_ms: i64, dead_after: Duration) -> Vec<String> {
        self.apps
            .get(app)
            .map(|m| m.iter().filter(|(_, s)| alive(s, now_ms, dead_after)).map(|(a, _)| a.clone()).collect())
            .unwrap_or_default()
    }

    /// Every executor with its liveness, for the fleet view.
    pub fn entries(&self, now_ms: i64, dead_after: Duration) -> Vec<(String, String, Seen, bool)> {
        self.apps
            .iter()
            .flat_map(|(app, m)| {
                m.iter().map(move |(a, s)| (app.clone(), a.clone(), s.clone(), alive(s, now_ms, dead_after)))
            })
            .collect()
    }
}

fn alive(seen: &Seen, now_ms: i64, dead_after: Duration) -> bool {
    now_ms.saturating_sub(seen.last_ms) < ms(dead_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executors_expire_and_are_removed() {
        let mut r = Registry::default();
        assert!(r.register("app", "http://b:9999/", 1, DEAD_AFTER), "first executor of the app");
        assert!(!r.register("app", "http://a:9999", 2, DEAD_AFTER));
        assert_eq!(r.live("app", 10, DEAD_AFTER), vec!["http://a:9999", "http://b:9999"]);
        assert!(r.live("app", 10, Duration::ZERO).is_empty(), "all expired with a zero lifetime");
        assert_eq!(r.live("app", 90_001, DEAD_AFTER), vec!["http://a:9999"], "b is 90 s silent");
        assert!(r.remove("app", "http://b:9999/"));
        assert_eq!(r.live("app", 10, DEAD_AFTER), vec!["http://a:9999"]);
        assert!(r.live("other", 10, DEAD_AFTER).is_empty());
        assert!(r.register("app", "http://a:9999", 200_000, DEAD_AFTER), "dead, so the app had none live");
        assert_eq!(r.entries(200_000, DEAD_AFTER)[0].2, Seen { since_ms: 200_000, last_ms: 200_000 });
    }

    #[test]
    fn the_store_rows_replace_the_copy_and_name_apps_that_came_alive() {
        let mut r = Registry::default();
        r.register("gone", "http://g:1", 1_000, DEAD_AFTER);
        let row = |app: &str, address: &str| XxlExecutorRow {
            app: app.into(),
            address: address.into(),
            since_ms: 500,
            seen_ms: 1_000,
        };
        let woke = r.replace(vec![row("app", "http://a:1/"), row("gone", "http://h:1")], 1_500, DEAD_AFTER);
        assert_eq!(woke, ["app"], "`gone` was live before");
        assert_eq!(r.live("app", 1_500, DEAD_AFTER), ["http://a:1"]);
        assert_eq!(r.live("gone", 1_500, DEAD_AFTER), ["http://h:1"], "g is no longer in the store");
    }
}
