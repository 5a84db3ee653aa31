//! Run idempotency keys (SPEC §6): the namespaces Madeira makes itself
//! (`cron:<flow>:<instant>`, `event:<type>:<id>`, `message:<source>:<key>`,
//! `exec:<exec id>`), which a caller's `Idempotency-Key` may never take: a forged
//! `cron:` key would swallow that cron tick, a forged `event:` key would capture
//! the real event.

/// Prefixes of the keys Madeira makes; a caller's key may start with none of them.
pub const RESERVED_PREFIXES: &[&str] = &["cron:", "event:", "message:", "exec:", "after:", "backfill:"];

/// The idempotency key of a backfill's run of `flow` for business date `date`
/// (`YYYY-MM-DD`): one run per (backfill, flow, date), whichever replica creates it.
/// The backfill's id is part of it, so a later backfill with `rerun: existing`
/// makes a new run for the date.
pub fn backfill_key(backfill: &str, flow: &str, date: &str) -> String {
    format!("backfill:{backfill}:{flow}:{date}")
}

/// The reserved prefix `key` starts with, if any (case-insensitive).
pub fn reserved_prefix(key: &str) -> Option<&'static str> {
    RESERVED_PREFIXES
        .iter()
        .copied()
        .find(|prefix| key.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix)))
}

/// Why a caller's key cannot be used, if it cannot.
pub fn caller_key_problem(key: &str) -> Option<String> {
    if key.is_empty() || key.len() > 256 {
        return Some("must be 1 to 256 characters".to_string());
    }
    reserved_prefix(key).map(|prefix| {
        format!(
            "starts with `{prefix}`, which Madeira reserves for its own triggers ({}); choose a key \
             without these prefixes",
            RESERVED_PREFIXES.join(" ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_namespaces_are_refused_to_callers() {
        for key in
            ["cron:daily:2026-11-30T01:05:00.000Z", "event:pay:1", "EVENT:pay:1", "exec:x", "message:q:1"]
        {
            let why = caller_key_problem(key).expect(key);
            assert!(why.contains("reserves"), "{key}: {why}");
        }
        for key in ["order-42", "cronjob-1", "events", "a:b", "x"] {
            assert_eq!(caller_key_problem(key), None, "{key}");
        }
        assert!(caller_key_problem("").is_some());
        assert!(caller_key_problem(&"k".repeat(257)).is_some());
    }
}
