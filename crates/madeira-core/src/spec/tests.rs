//! Tests for the flow parser: the SPEC §2 example end to end, model details (defaults,
//! retry merge, triggers, executors); error classes live in `errors`, fuzzing in `props`.

use std::time::Duration;

use super::*;
use crate::model::{
    BuiltinKind, DepKind, ExecutorDef, Misfire, NodeAction, OnOverlap, RateLimitDef, TriggerDef,
};

mod bizdates;
mod errors;
mod props;
mod sql;
mod subflows;
mod xxl;

/// The SPEC §2 example, verbatim.
pub(super) const SETTLEMENT: &str = r#"flow: daily-settlement            # [a-z0-9-], unique
description: End-of-day settlement
labels: {team: finance}
triggers:
  - cron: "5 1 * * *"             # 5 fields, or 6 with seconds
    timezone: Asia/Shanghai        # IANA; DST handled (no double/missed runs)
    misfire: run_once              # skip | run_once | run_all  (after downtime)
    jitter: 30s                    # random offset so hundreds of 00:00 jobs don't stampede
  - event: payment.batch_closed    # message trigger (POST /api/v1/events)
concurrency:
  max_active_runs: 1
  on_overlap: queue                # queue | skip | cancel_previous
defaults:
  timeout: 30m
  retry: {attempts: 3, backoff: 5s, factor: 2, max_backoff: 5m, jitter: 1s}
nodes:
  pull_payments:  {run: {sidecar: {group: billing, job: pull-payments}}}
  pull_refunds:   {run: {sidecar: {group: billing, job: pull-refunds}}}
  verify:
    needs: [pull_payments, pull_refunds]          # strong by default
    run: {http: {url: "http://recon.internal/verify", method: POST}}
  coupons:        {needs: [pull_payments], run: {sidecar: {group: billing, job: coupons}}}
  receivables:    {needs: [verify, coupons], run: {sidecar: {group: billing, job: receivables}}}
  refund_check:
    needs: [verify]
    when: "nodes.pull_refunds.outputs.refund_count > 0"   # CEL; false => SKIPPED
    run: {sidecar: {group: billing, job: refund-check}}
  notify:
    needs: [{node: receivables, kind: weak}]      # runs whatever receivables ended as
    run: {http: {url: "http://push.internal/notify"}}
  confirm:
    needs: [receivables, refund_check]
    manual:
      prompt: "Balance diff is {{ nodes.receivables.outputs.diff }}"
      alert_after: 12h
      fallback_after: 36h
      fallback: {sidecar: {group: billing, job: draft-from-last-template}}
  export:
    needs: [confirm]
    throttle: {max_permits: 2, queue_size: 50}
    run: {sidecar: {group: billing, job: export-statement, shards: 4}}
"#;

pub(super) fn parse(source: &str) -> FlowDef {
    match parse_flow("flow.yaml", source) {
        Ok(flow) => flow,
        Err(e) => panic!("expected a valid flow, got:\n{e}"),
    }
}

/// The printed error lines (`FILE:LINE: node X: message`).
pub(super) fn errors(source: &str) -> Vec<String> {
    match parse_flow("flow.yaml", source) {
        Ok(flow) => panic!("expected errors, got a flow with {} nodes", flow.nodes.len()),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

fn sidecar(job: &str, shards: u32) -> ExecutorDef {
    ExecutorDef::Sidecar(crate::model::SidecarDef {
        group: "billing".into(),
        job: job.into(),
        shards,
        route: Default::default(),
    })
}

fn names(flow: &FlowDef, idx: impl IntoIterator<Item = usize>) -> Vec<&str> {
    idx.into_iter().map(|i| flow.nodes[i].id.as_str()).collect()
}

#[test]
fn settlement_example_top_level() {
    let flow = parse(SETTLEMENT);
    assert_eq!(flow.name, "daily-settlement");
    assert_eq!(flow.description.as_deref(), Some("End-of-day settlement"));
    assert_eq!(flow.labels.get("team").map(String::as_str), Some("finance"));
    assert_eq!(flow.concurrency.max_active_runs, 1);
    assert_eq!(flow.concurrency.on_overlap, OnOverlap::Queue);
    assert!(!flow.observe && flow.rate_limit.is_none() && flow.routing.is_none());
    let [TriggerDef::Cron(cron), TriggerDef::Event { event, .. }] = flow.triggers.as_slice() else {
        panic!("unexpected triggers {:?}", flow.triggers);
    };
    assert_eq!(cron.expr, "5 1 * * *");
    assert_eq!(cron.timezone, "Asia/Shanghai");
    assert_eq!(cron.misfire, Misfire::RunOnce);
    assert_eq!(cron.jitter, Duration::from_secs(30));
    assert_eq!(cron.grace, None);
    assert_eq!(event, "payment.batch_closed");
}

#[test]
fn settlement_example_nodes_and_graph() {
    let flow = parse(SETTLEMENT);
    let ids: Vec<&str> = flow.nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "pull_payments",
            "pull_refunds",
            "verify",
            "coupons",
            "receivables",
            "refund_check",
            "notify",
            "confirm",
            "export"
        ]
    );
    let idx = |id: &str| flow.node_index(id).expect("node exists");
    let needs = |id: &str| {
        flow.nodes[idx(id)]
            .needs
            .iter()
            .map(|n| (flow.nodes[n.upstream].id.as_str(), n.kind))
            .collect::<Vec<_>>()
    };
    assert_eq!(needs("verify"), [("pull_payments", DepKind::Strong), ("pull_refunds", DepKind::Strong)]);
    assert_eq!(needs("notify"), [("receivables", DepKind::Weak)]);
    assert_eq!(needs("confirm"), [("receivables", DepKind::Strong), ("refund_check", DepKind::Strong)]);
    assert!(needs("pull_payments").is_empty());

    let when = flow.nodes[idx("refund_check")].when.as_ref().expect("refund_check has a when");
    assert_eq!(when.source(), "nodes.pull_refunds.outputs.refund_count > 0");

    // Downstream mirrors needs; topo is file order here (already a valid order).
    let down: Vec<(&str, DepKind)> =
        flow.downstream[idx("receivables")].iter().map(|(d, k)| (flow.nodes[*d].id.as_str(), *k)).collect();
    assert_eq!(down, [("notify", DepKind::Weak), ("confirm", DepKind::Strong)]);
    assert_eq!(names(&flow, flow.topo.iter().copied()), ids);
}

#[test]
fn settlement_example_actions_and_policies() {
    let flow = parse(SETTLEMENT);
    let node = |id: &str| &flow.nodes[flow.node_index(id).expect("node exists")];
    assert_eq!(node("pull_payments").action_exec(), Some(&sidecar("pull-payments", 1)));
    assert_eq!(node("export").action_exec(), Some(&sidecar("export-statement", 4)));
    let Some(ExecutorDef::Http(http)) = node("verify").action_exec() else { panic!("verify is http") };
    assert_eq!((http.url.as_str(), http.method.as_str()), ("http://recon.internal/verify", "POST"));
    let Some(ExecutorDef::Http(http)) = node("notify").action_exec() else { panic!("notify is http") };
    assert_eq!(http.method, "GET");

    let NodeAction::Manual(manual) = &node("confirm").action else { panic!("confirm is manual") };
    assert!(node("confirm").is_manual());
    assert_eq!(manual.prompt, "Balance diff is {{ nodes.receivables.outputs.diff }}");
    assert_eq!(manual.alert_after, Some(Duration::from_secs(12 * 3600)));
    assert_eq!(manual.fallback_after, Some(Duration::from_secs(36 * 3600)));
    assert_eq!(manual.fallback, Some(sidecar("draft-from-last-template", 1)));

    let throttle = node("export").throttle.expect("export is throttled");
    assert_eq!((throttle.max_permits, throttle.queue_size), (2, 50));
    assert!(node("verify").throttle.is_none());

    // defaults.retry applies to every node; defaults.timeout too.
    for n in &flow.nodes {
        assert_eq!(n.retry.attempts, 3, "{}", n.id);
        assert_eq!(n.retry.backoff, Duration::from_secs(5));
        assert_eq!(n.retry.factor, 2.0);
        assert_eq!(n.retry.max_backoff, Duration::from_secs(300));
        assert_eq!(n.retry.jitter, Duration::from_secs(1));
        assert_eq!(n.timeout, Duration::from_secs(1800));
    }
}

impl crate::model::NodeDef {
    fn action_exec(&self) -> Option<&ExecutorDef> {
        match &self.action {
            NodeAction::Run(e) => Some(e),
            NodeAction::Manual(_) => None,
        }
    }
}

#[test]
fn node_retry_overrides_defaults_field_by_field() {
    let flow = parse(
        "flow: f
defaults:
  timeout: 10m
  retry: {attempts: 3, backoff: 10s, no_retry_exit_codes: [2]}
nodes:
  a: {run: {builtin: noop}, retry: {attempts: 5, jitter: 0s}, timeout: 90s}
  b: {run: {builtin: noop}}
",
    );
    let (a, b) = (&flow.nodes[0], &flow.nodes[1]);
    assert_eq!(a.retry.attempts, 5);
    assert_eq!(a.retry.backoff, Duration::from_secs(10));
    assert_eq!(a.retry.jitter, Duration::ZERO);
    assert_eq!(a.retry.no_retry_exit_codes, [2]);
    assert_eq!(a.retry.max_backoff, Duration::from_secs(300));
    assert_eq!(a.timeout, Duration::from_secs(90));
    assert_eq!(b.retry.attempts, 3);
    assert_eq!(b.retry.jitter, Duration::from_secs(1));
    assert_eq!(b.timeout, Duration::from_secs(600));
}

#[test]
fn built_in_defaults_without_defaults_section() {
    let flow = parse("flow: f\nnodes:\n  a: {run: {builtin: noop}}\n");
    let a = &flow.nodes[0];
    assert_eq!(a.retry, crate::retry::RetryPolicy::default());
    assert_eq!(a.timeout, Duration::from_secs(30 * 60));
    assert_eq!(flow.concurrency, crate::model::ConcurrencyDef::default());
    assert!(flow.triggers.is_empty());
}

#[test]
fn builtins_triggers_rate_limit_and_routing() {
    let flow = parse(
        r#"flow: demo-1
observe: true
rate_limit: "10/m"
routing: {default: 3, rules: [{when: "params.tenant in ['t1','t2']", version: 4}]}
concurrency: {on_overlap: cancel_previous}
triggers:
  - cron: "@midnight"
    misfire: run_all
    grace: 5m
    catchup_window: 2h
  - cron: "*/10 * * * * *"
nodes:
  nap: {run: {builtin: sleep, for: 2s}}
  boom:
    needs: [nap]
    run: {builtin: fail, message: "nope", times: 2, outputs: {k: 1, s: "x"}}
"#,
    );
    assert!(flow.observe);
    assert_eq!(flow.rate_limit, Some(RateLimitDef { count: 10, per: Duration::from_secs(60) }));
    assert_eq!(flow.concurrency.on_overlap, OnOverlap::CancelPrevious);
    assert_eq!(flow.concurrency.max_active_runs, 0);
    let routing = flow.routing.as_ref().expect("routing");
    assert_eq!((routing.default, routing.rules.len(), routing.rules[0].version), (3, 1, 4));
    let TriggerDef::Cron(c) = &flow.triggers[0] else { panic!("cron") };
    assert_eq!((c.expr.as_str(), c.timezone.as_str(), c.misfire), ("@midnight", "UTC", Misfire::RunAll));
    assert_eq!((c.grace, c.catchup_window), (Some(Duration::from_secs(300)), Duration::from_secs(7200)));
    let Some(ExecutorDef::Builtin(nap)) = flow.nodes[0].action_exec() else { panic!("builtin") };
    assert_eq!(nap.kind, BuiltinKind::Sleep(Duration::from_secs(2)));
    let Some(ExecutorDef::Builtin(boom)) = flow.nodes[1].action_exec() else { panic!("builtin") };
    assert_eq!(boom.kind, BuiltinKind::Fail { message: "nope".into(), times: Some(2) });
    assert_eq!(boom.outputs.get("k"), Some(&serde_json::json!(1)));
}

#[test]
fn topo_puts_upstreams_first_whatever_the_file_order() {
    let flow = parse(
        "flow: f
nodes:
  c: {needs: [b], run: {builtin: noop}}
  b: {needs: [a], run: {builtin: noop}}
  a: {run: {builtin: noop}}
  d: {run: {builtin: noop}}
",
    );
    assert_eq!(names(&flow, flow.topo.iter().copied()), ["a", "b", "c", "d"]);
    assert_eq!(flow.downstream[2], [(1, DepKind::Strong)]);
}

#[test]
fn cron_helpers() {
    for ok in ["5 1 * * *", "0 5 1 * * *", "@hourly", "@DAILY", "@weekly", "@monthly", "@yearly", "@midnight"]
    {
        assert!(parse_cron(ok).is_ok(), "{ok}");
    }
    for bad in ["", "* * * *", "0 0 0 1 1 * 2030", "61 * * * *", "@fortnightly"] {
        assert!(parse_cron(bad).is_err(), "{bad}");
    }
    for (bad, says) in [
        ("0 25 * * *", "hour 25 out of range 0–23"),
        ("61 1 * * *", "minute 61 out of range 0–59"),
        ("0 1 * * 1-9", "weekday 9 out of range 0–7"),
        ("0 0 1 13 *", "month 13 out of range 1–12"),
        ("0 0 32 * *", "day of month 32 out of range 1–31"),
        ("70 0 1 * * *", "second 70 out of range 0–59"),
    ] {
        let err = parse_cron(bad).unwrap_err();
        assert!(err.contains(says), "{bad}: {err}");
    }
    assert!(parse_cron("*/15 0-23/2 * * MON#2").is_ok());
    assert!(parse_timezone("Europe/Paris").is_ok());
    assert_eq!(parse_rate_limit("5/h"), Ok(RateLimitDef { count: 5, per: Duration::from_secs(3600) }));
    assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
}
