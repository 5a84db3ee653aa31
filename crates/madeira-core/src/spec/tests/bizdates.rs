//! `timezone:`, `biz_date:`, `deadline:` and `concurrency.depends_on_past` in flow files.

use chrono::NaiveTime;

use super::{errors, parse};

#[test]
fn business_settings_are_read_with_their_defaults() {
    let f = parse(
        "flow: settle\ntriggers:\n  - {cron: \"5 1 * * *\", timezone: Asia/Shanghai}\n\
         concurrency: {depends_on_past: true}\nnodes:\n  a: {run: {builtin: noop}}\n",
    );
    assert_eq!(f.business.timezone, chrono_tz::Asia::Shanghai, "the cron trigger's timezone");
    assert_eq!((f.business.rule.offset, f.business.declared), (-1, false));
    assert!(f.concurrency.depends_on_past);
    assert!(f.business.deadline.is_none());
    let f = parse(
        "flow: settle\ntimezone: Europe/Paris\nbiz_date: {offset: 0, calendar: all_days}\n\
         deadline: {by: \"06:00:30\", timezone: Asia/Shanghai, days: 2}\n\
         nodes:\n  a: {run: {builtin: noop}}\n",
    );
    assert_eq!(f.business.timezone, chrono_tz::Europe::Paris);
    assert_eq!((f.business.rule.offset, f.business.declared), (0, true));
    assert_eq!(f.business.rule.calendar.as_deref(), Some("all_days"), "kept by name, checked on apply");
    let d = f.business.deadline.expect("deadline");
    assert_eq!(d.by, NaiveTime::from_hms_opt(6, 0, 30).expect("time"));
    assert_eq!((d.timezone, d.days), (chrono_tz::Asia::Shanghai, 2));
    assert_eq!(d.warn_before, None);
    // The deadline's timezone defaults to the flow's.
    let f = parse(
        "flow: f\ntimezone: Asia/Tokyo\ndeadline: {by: \"07:30\"}\nnodes:\n  a: {run: {builtin: noop}}\n",
    );
    assert_eq!(f.business.deadline.expect("deadline").timezone, chrono_tz::Asia::Tokyo);
}

#[test]
fn mistakes_are_named_with_their_line() {
    let got = errors(
        "flow: f\ntimezone: Asia/Shangai\nbiz_date: {offset: 400, calendar: cn-workdays}\n\
         deadline: {by: \"6am\", days: 40}\nnodes:\n  a: {run: {builtin: noop}, when: 'biz_date == \"2026-10-08\"'}\n",
    );
    assert!(
        got[0].starts_with("flow.yaml:2: unknown timezone `Asia/Shangai`; did you mean `Asia/Shanghai`?"),
        "{got:#?}"
    );
    assert!(
        got.iter().any(|e| e.starts_with("flow.yaml:3: `biz_date.offset` must be between -366 and 366")),
        "{got:#?}"
    );
    assert!(got.iter().any(|e| e.starts_with("flow.yaml:4: `deadline.by` `6am` is not a time")), "{got:#?}");
    assert!(got.iter().any(|e| e.starts_with("flow.yaml:4: `deadline.days` must be 0 to 31")), "{got:#?}");
    assert_eq!(got.len(), 4, "biz_date is a variable conditions may read: {got:#?}");
    let warn = errors(
        "flow: f\ndeadline:\n  by: \"06:00\"\n  warn_before: soon\nnodes:\n  a: {run: {builtin: noop}}\n",
    );
    assert!(warn[0].starts_with("flow.yaml:4: `deadline.warn_before`: "), "{warn:#?}");
    let zero =
        errors("flow: f\ndeadline: {by: \"06:00\", warn_before: 0s}\nnodes:\n  a: {run: {builtin: noop}}\n");
    assert!(zero[0].starts_with("flow.yaml:2: `deadline.warn_before` must be more than zero"), "{zero:#?}");
    let ok =
        parse("flow: f\ndeadline: {by: \"06:00\", warn_before: 30m}\nnodes:\n  a: {run: {builtin: noop}}\n");
    let warn_before = ok.business.deadline.expect("deadline").warn_before;
    assert_eq!(warn_before, Some(std::time::Duration::from_secs(1800)));
    let missing_by = errors("flow: f\ndeadline: {days: 1}\nnodes:\n  a: {run: {builtin: noop}}\n");
    assert!(missing_by[0].starts_with("flow.yaml:2: `deadline` needs `by`"), "{missing_by:#?}");
}

#[test]
fn max_duration_is_read_on_the_flow_and_its_nodes_and_named_with_its_line_when_wrong() {
    let f = parse(
        "flow: f\nmax_duration: 2h\nnodes:\n  a: {run: {builtin: noop}, max_duration: 15m}\n  b: {run: {builtin: noop}}\n",
    );
    assert_eq!(f.max_duration, Some(std::time::Duration::from_secs(7200)));
    assert_eq!(f.nodes[0].max_duration, Some(std::time::Duration::from_secs(900)));
    assert_eq!(f.nodes[1].max_duration, None);
    let got =
        errors("flow: f\nmax_duration: soon\nnodes:\n  a:\n    run: {builtin: noop}\n    max_duration: 0s\n");
    assert!(got.iter().any(|e| e.starts_with("flow.yaml:2: `max_duration`: ")), "{got:#?}");
    assert!(
        got.iter().any(|e| e.starts_with("flow.yaml:6: node a: `max_duration` must be more than zero")),
        "{got:#?}"
    );
}
