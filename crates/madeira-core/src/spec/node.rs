//! One node's body: its action (`run` executor or `manual` step), timeout, retry
//! merged over the flow defaults, throttle and `when` condition. Needs are resolved
//! later by `graph`, once every node id is known.

use std::time::Duration;

use crate::expr::Condition;
use crate::model::{
    BuiltinDef, BuiltinKind, ExecutorDef, FallbackThen, ManualDef, NodeAction, NodeDef, ThrottleDef,
};
use crate::retry::RetryPolicy;

use super::executor::executor;
use super::raw::{RawManual, RawNode, RawRetry, RawThrottle, Span};
use super::report::{At, Report, did_you_mean, line_of};

/// Default node timeout when neither the node nor `defaults` sets one.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default `throttle.queue_size`.
pub(crate) const DEFAULT_QUEUE_SIZE: u32 = 100;
/// Default `stall_after`: how long a node may wait in INIT for its executor unreported.
pub(crate) const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(10 * 60);

/// Flow-wide node defaults (`defaults:`), already merged over the built-in ones.
#[derive(Debug, Clone)]
pub(crate) struct Defaults {
    pub timeout: Duration,
    pub retry: RetryPolicy,
    pub stall_after: Duration,
    pub warn_after: Option<Duration>,
}

impl Default for Defaults {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
            stall_after: DEFAULT_STALL_AFTER,
            warn_after: None,
        }
    }
}

/// Builds a node without its needs (`graph` fills them in).
pub(crate) fn build(
    id: &str,
    at: At<'_>,
    raw: &RawNode,
    defaults: &Defaults,
    report: &mut Report,
) -> NodeDef {
    let timeout = match &raw.timeout {
        Some(t) => positive_duration(report, at, "timeout", t).unwrap_or(defaults.timeout),
        None => defaults.timeout,
    };
    let action = action(id, at, raw, report);
    NodeDef {
        id: id.to_string(),
        needs: Vec::new(),
        when: raw.when.as_ref().and_then(|w| condition(report, at, w)),
        foreach: super::foreach::foreach(report, at, raw, &action),
        action,
        timeout,
        retry: merge_retry(&defaults.retry, raw.retry.as_ref(), at, report),
        throttle: raw.throttle.as_ref().and_then(|t| throttle(report, at.at(t), &t.value)),
        stall_after: match &raw.stall_after {
            Some(d) => positive_duration(report, at, "stall_after", d).unwrap_or(defaults.stall_after),
            None => defaults.stall_after,
        },
        warn_after: match &raw.warn_after {
            Some(d) => positive_duration(report, at, "warn_after", d).or(defaults.warn_after),
            None => defaults.warn_after,
        },
        max_duration: raw
            .max_duration
            .as_ref()
            .and_then(|d| positive_duration(report, at, "max_duration", d)),
        // Set by the caller, which knows the flow's name (`super::after`).
        after: Vec::new(),
    }
}

/// A duration that must be more than zero.
pub(crate) fn positive_duration(
    report: &mut Report,
    at: At<'_>,
    field: &str,
    value: &Span<String>,
) -> Option<Duration> {
    let d = report.duration(at, field, value)?;
    if d.is_zero() {
        report.push(at.at(value), format!("`{field}` must be more than zero"));
        return None;
    }
    Some(d)
}

/// Compiles a node's `when`: CEL over `params` and `nodes` only.
fn condition(report: &mut Report, at: At<'_>, when: &Span<String>) -> Option<Condition> {
    let at = at.at(when);
    let cond = match Condition::compile(&when.value) {
        Ok(c) => c,
        Err(e) => {
            report.push(at, format!("`when` is not valid CEL: {e}"));
            return None;
        }
    };
    let unknown: Vec<String> = cond
        .variables()
        .into_iter()
        .filter(|v| !["params", "nodes", "biz_date"].contains(&v.as_str()))
        .collect();
    for var in &unknown {
        let hint = did_you_mean(var, ["params", "nodes", "biz_date"]);
        report.push(
            at,
            format!(
                "`when` reads `{var}`{hint}; a condition can only read `params`, `nodes.<id>` and `biz_date`"
            ),
        );
    }
    unknown.is_empty().then_some(cond)
}

fn action(id: &str, at: At<'_>, raw: &RawNode, report: &mut Report) -> NodeAction {
    // Both halves are checked even when only one may stay, so every mistake shows.
    let run = raw.run.as_ref().map(|r| executor(report, at.at(r), "run", &r.value));
    let manual = raw.manual.as_ref().map(|m| manual_def(id, at.at(m), &m.value, report));
    match (run, manual) {
        (Some(_), Some(_)) => report.push(
            at.on(raw.manual.as_ref().and_then(line_of)),
            "has both `run` and `manual`; a manual node waits for a person, \
             so move the automatic action to `manual.fallback` or drop `manual`",
        ),
        (None, None) => report.push(
            at,
            "has neither `run` nor `manual`; add e.g. `run: {builtin: noop}` \
             or `manual: {prompt: \"...\"}`",
        ),
        (Some(Some(exec)), None) => return NodeAction::Run(exec),
        (None, Some(manual)) => return NodeAction::Manual(manual),
        (Some(None), None) => {}
    }
    NodeAction::Run(ExecutorDef::Builtin(BuiltinDef {
        kind: BuiltinKind::Noop,
        outputs: serde_json::Map::new(),
    }))
}

fn manual_def(id: &str, at: At<'_>, raw: &RawManual, report: &mut Report) -> ManualDef {
    let alert_after = raw.alert_after.as_ref().and_then(|d| positive_duration(report, at, "alert_after", d));
    let fallback_after =
        raw.fallback_after.as_ref().and_then(|d| positive_duration(report, at, "fallback_after", d));
    if let (Some(alert), Some(fallback), Some(raw_fb)) = (alert_after, fallback_after, &raw.fallback_after)
        && fallback <= alert
    {
        report.push(
            at.at(raw_fb),
            format!(
                "`fallback_after` ({}) must be later than `alert_after` ({}): \
                 people are alerted first, then the fallback runs",
                raw_fb.value,
                raw.alert_after.as_ref().map(|a| a.value.as_str()).unwrap_or_default()
            ),
        );
    }
    let fallback =
        raw.fallback.as_ref().and_then(|f| executor(report, at.at(f), "manual.fallback", &f.value));
    match (&raw.fallback, &raw.fallback_after) {
        (Some(f), None) => report.push(
            at.at(f),
            "`manual.fallback` needs `fallback_after` to say when it runs, e.g. `fallback_after: 36h`",
        ),
        (None, Some(fa)) => report.push(
            at.at(fa),
            "`fallback_after` needs a `fallback` executor, e.g. `fallback: {builtin: noop}`",
        ),
        _ => {}
    }
    let fallback_then = match raw.fallback.as_ref().and_then(|f| f.value.then.as_ref()) {
        None => FallbackThen::Success,
        Some(then) => match then.value.as_str() {
            "success" => FallbackThen::Success,
            "skip" => FallbackThen::Skip,
            other => {
                let hint = did_you_mean(other, ["skip", "success"]);
                report.push(
                    at.at(then),
                    format!(
                        "`manual.fallback.then` is `{other}`{hint}; it says how the node ends once \
                         its fallback succeeded: `skip` or `success`"
                    ),
                );
                FallbackThen::Success
            }
        },
    };
    ManualDef {
        prompt: raw.prompt.clone().unwrap_or_else(|| format!("Confirm node {id}")),
        alert_after,
        fallback_after,
        fallback,
        fallback_then,
    }
}

fn throttle(report: &mut Report, at: At<'_>, raw: &RawThrottle) -> Option<ThrottleDef> {
    let max_permits = match &raw.max_permits {
        Some(p) => report.limit(at, "throttle.max_permits", p, 1),
        None => {
            report.push(at, "`throttle` needs `max_permits`, e.g. `{max_permits: 2, queue_size: 50}`");
            None
        }
    };
    let queue_size = match &raw.queue_size {
        Some(q) => report.limit(at, "throttle.queue_size", q, 0),
        None => Some(DEFAULT_QUEUE_SIZE),
    };
    Some(ThrottleDef { max_permits: max_permits?, queue_size: queue_size? })
}

/// `base` with every field set in `raw` replaced (field by field).
pub(crate) fn merge_retry(
    base: &RetryPolicy,
    raw: Option<&Span<RawRetry>>,
    at: At<'_>,
    report: &mut Report,
) -> RetryPolicy {
    let mut policy = base.clone();
    let Some(raw) = raw else { return policy };
    let at = at.at(raw);
    let r = &raw.value;
    if let Some(n) = r.attempts.as_ref().and_then(|a| report.limit(at, "retry.attempts", a, 1)) {
        policy.attempts = n;
    }
    if let Some(d) = r.backoff.as_ref().and_then(|d| report.duration(at, "retry.backoff", d)) {
        policy.backoff = d;
    }
    if let Some(d) = r.max_backoff.as_ref().and_then(|d| report.duration(at, "retry.max_backoff", d)) {
        policy.max_backoff = d;
    }
    if let Some(d) = r.jitter.as_ref().and_then(|d| report.duration(at, "retry.jitter", d)) {
        policy.jitter = d;
    }
    if let Some(f) = &r.factor {
        if f.value.is_finite() && f.value >= 1.0 {
            policy.factor = f.value;
        } else {
            report.push(at.at(f), format!("`retry.factor` must be a number of at least 1, got {}", f.value));
        }
    }
    if let Some(codes) = &r.no_retry_exit_codes {
        policy.no_retry_exit_codes = codes
            .iter()
            .filter_map(|c| match i32::try_from(c.value) {
                Ok(code) => Some(code),
                Err(_) => {
                    let msg = format!("`retry.no_retry_exit_codes`: {} is not an exit code", c.value);
                    report.push(at.at(c), msg);
                    None
                }
            })
            .collect();
    }
    policy
}
