use chrono::TimeZone;

use super::*;

fn tick() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 1, 5, 0).single().expect("a valid instant")
}

/// Every kind, with the exact text stores already hold: these strings must never
/// change (a run made before an upgrade must still deduplicate its trigger).
fn pinned() -> Vec<(RunKey, &'static str)> {
    let s = String::from;
    vec![
        (
            RunKey::Cron { flow: s("daily-settlement"), tick: tick() },
            "cron:daily-settlement:2026-11-30T01:05:00.000Z",
        ),
        (RunKey::Event { kind: s("payment.batch_closed"), id: s("b-42") }, "event:payment.batch_closed:b-42"),
        (RunKey::Event { kind: s("pay"), id: s("a:b:c") }, "event:pay:a:b:c"),
        (RunKey::Message { source: s("bus"), key: s("order-7") }, "message:bus:order-7"),
        (RunKey::Message { source: s("bus"), key: s("k:1") }, "message:bus:k:1"),
        (RunKey::Exec { exec_id: s("0193a7c2-e1") }, "exec:0193a7c2-e1"),
        (
            RunKey::After { upstream: s("payments-pull"), biz_date: s("2026-11-30") },
            "after:payments-pull:2026-11-30",
        ),
        (
            RunKey::Backfill { backfill: s("0193b1"), flow: s("warehouse"), biz_date: s("2026-11-02") },
            "backfill:0193b1:warehouse:2026-11-02",
        ),
        (
            RunKey::Subflow { parent_run: s("0193a7c2"), node: s("settle"), attempt: 2 },
            "subflow:0193a7c2:settle:2",
        ),
        (RunKey::Caller(s("settle-2026-11-30")), "settle-2026-11-30"),
    ]
}

#[test]
fn every_kind_builds_its_pinned_text_and_parses_back() {
    for (key, text) in pinned() {
        assert_eq!(key.to_string(), text, "{key:?}");
        assert_eq!(RunKey::parse(text), key, "{text}");
    }
}

#[test]
fn cron_keys_carry_their_tick_in_milliseconds_utc() {
    let key = RunKey::Cron { flow: "f".into(), tick: tick() + chrono::Duration::milliseconds(7) };
    assert_eq!(key.to_string(), "cron:f:2026-11-30T01:05:00.007Z");
    assert_eq!(RunKey::parse(&key.to_string()).cron_tick(), key.cron_tick());
    assert_eq!(RunKey::parse("event:x:1").cron_tick(), None);
    assert!(key.to_string().starts_with(CRON_PREFIX));
}

#[test]
fn a_reserved_prefix_that_does_not_parse_is_a_callers_text() {
    for text in ["cron:f:not-a-time", "event:no-id", "subflow:r:n:x", "backfill:", "a:b", "plain"] {
        assert_eq!(RunKey::parse(text), RunKey::Caller(text.into()), "{text}");
    }
}

#[test]
fn internal_namespaces_are_refused_to_callers() {
    for key in [
        "cron:daily:2026-11-30T01:05:00.000Z",
        "event:pay:1",
        "EVENT:pay:1",
        "exec:x",
        "message:q:1",
        "after:a:2026-11-30",
        "backfill:b1:a:2026-11-30",
        "subflow:r:n:1",
    ] {
        let why = RunKey::caller(key).expect_err(key);
        assert!(matches!(why, KeyProblem::Reserved(_)), "{key}: {why}");
        assert!(why.to_string().contains("reserves"), "{key}: {why}");
    }
    for key in ["order-42", "cronjob-1", "events", "a:b", "x"] {
        assert_eq!(RunKey::caller(key), Ok(RunKey::Caller(key.into())), "{key}");
    }
    assert_eq!(RunKey::caller(""), Err(KeyProblem::Length));
    assert_eq!(RunKey::caller(&"k".repeat(257)), Err(KeyProblem::Length));
}

#[test]
fn every_generated_kind_is_reserved() {
    for (key, text) in pinned() {
        let reserved = reserved_prefix(text).is_some();
        assert_eq!(reserved, !matches!(key, RunKey::Caller(_)), "{text}");
    }
}
