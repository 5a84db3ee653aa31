//! One node's body: its action (`run` executor or `manual` step), timeout, retry
//! merged over the flow defaults, throttle and `when` condition. Needs are resolved
//! later by `graph`, once every node id is known.

use std::time::Duration;

use crate::expr::Condition;
use crate::model::{
    BuiltinDef, BuiltinKind, ExecutorDef, HttpDef, ManualDef, NodeAction, NodeDef, SidecarDef,
    ThrottleDef,
};
use crate::retry::RetryPolicy;

use super::raw::{
    RawExecutor, RawHttp, RawManual, RawNode, RawRetry, RawSidecar, RawThrottle, Span,
};
use super::report::{At, Report, did_you_mean, one_of};

/// Default node timeout when neither the node nor `defaults` sets one.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default `throttle.queue_size`.
pub(crate) const DEFAULT_QUEUE_SIZE: u32 = 100;

const BUILTINS: &[&str] = &["noop", "sleep", "fail"];
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// Flow-wide node defaults (`defaults:`), already merged over the built-in ones.
#[derive(Debug, Clone)]
pub(crate) struct Defaults {
    pub timeout: Duration,
    pub retry: RetryPolicy,
}

impl Default for Defaults {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
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
    NodeDef {
        id: id.to_string(),
        needs: Vec::new(),
        when: raw.when.as_ref().and_then(|w| condition(report, at, w)),
        action: action(id, at, raw, report),
        timeout,
        retry: merge_retry(&defaults.retry, raw.retry.as_ref(), at, report),
        throttle: raw
            .throttle
            .as_ref()
            .and_then(|t| throttle(report, at.at(t), &t.value)),
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
        .filter(|v| v != "params" && v != "nodes")
        .collect();
    for var in &unknown {
        let hint = did_you_mean(var, ["params", "nodes"]);
        report.push(
            at,
            format!(
                "`when` reads `{var}`{hint}; a condition can only read `params` and `nodes.<id>`"
            ),
        );
    }
    unknown.is_empty().then_some(cond)
}

fn action(id: &str, at: At<'_>, raw: &RawNode, report: &mut Report) -> NodeAction {
    match (&raw.run, &raw.manual) {
        (Some(_), Some(m)) => {
            report.push(
                at.at(m),
                "has both `run` and `manual`; a manual node waits for a person, \
                 so move the automatic action to `manual.fallback` or drop `manual`",
            );
        }
        (None, None) => {
            report.push(
                at,
                "has neither `run` nor `manual`; add e.g. `run: {builtin: noop}` \
                 or `manual: {prompt: \"...\"}`",
            );
        }
        (Some(run), None) => {
            if let Some(exec) = executor(report, at.at(run), "run", &run.value) {
                return NodeAction::Run(exec);
            }
        }
        (None, Some(manual)) => {
            return NodeAction::Manual(manual_def(id, at.at(manual), &manual.value, report));
        }
    }
    NodeAction::Run(ExecutorDef::Builtin(BuiltinDef {
        kind: BuiltinKind::Noop,
        outputs: serde_json::Map::new(),
    }))
}

fn manual_def(id: &str, at: At<'_>, raw: &RawManual, report: &mut Report) -> ManualDef {
    let alert_after = raw
        .alert_after
        .as_ref()
        .and_then(|d| positive_duration(report, at, "alert_after", d));
    let fallback_after = raw
        .fallback_after
        .as_ref()
        .and_then(|d| positive_duration(report, at, "fallback_after", d));
    if let (Some(alert), Some(fallback), Some(raw_fb)) =
        (alert_after, fallback_after, &raw.fallback_after)
        && fallback <= alert
    {
        report.push(
            at.at(raw_fb),
            format!(
                "`fallback_after` ({}) must be later than `alert_after` ({}): \
                 people are alerted first, then the fallback runs",
                raw_fb.value,
                raw.alert_after
                    .as_ref()
                    .map(|a| a.value.as_str())
                    .unwrap_or_default()
            ),
        );
    }
    let fallback = raw
        .fallback
        .as_ref()
        .and_then(|f| executor(report, at.at(f), "manual.fallback", &f.value));
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
    ManualDef {
        prompt: raw
            .prompt
            .clone()
            .unwrap_or_else(|| format!("Confirm node {id}")),
        alert_after,
        fallback_after,
        fallback,
    }
}

/// One of `builtin`, `http`, `sidecar`; `field` names where it sits (`run`, `manual.fallback`).
pub(crate) fn executor(
    report: &mut Report,
    at: At<'_>,
    field: &str,
    raw: &RawExecutor,
) -> Option<ExecutorDef> {
    let kinds: Vec<&str> = [
        raw.builtin.as_ref().map(|_| "builtin"),
        raw.http.as_ref().map(|_| "http"),
        raw.sidecar.as_ref().map(|_| "sidecar"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if kinds.len() != 1 {
        let has = if kinds.is_empty() {
            "none".to_string()
        } else {
            one_of(&kinds).replace(" or ", " and ")
        };
        report.push(
            at,
            format!("`{field}` needs exactly one of `builtin`, `http` or `sidecar` (has {has})"),
        );
        return None;
    }
    if let Some(b) = &raw.builtin {
        return builtin(report, at, b, raw).map(ExecutorDef::Builtin);
    }
    let extra: Vec<&str> = [
        raw.for_.as_ref().map(|_| "for"),
        raw.message.as_ref().map(|_| "message"),
        raw.times.as_ref().map(|_| "times"),
        raw.outputs.as_ref().map(|_| "outputs"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !extra.is_empty() {
        let fields = one_of(&extra).replace(" or ", ", ");
        report.push(
            at,
            format!("{fields} only apply to `builtin` executors; remove them from `{field}`"),
        );
    }
    match (&raw.http, &raw.sidecar) {
        (Some(h), _) => http(report, at.at(h), &h.value).map(ExecutorDef::Http),
        (_, Some(s)) => sidecar(report, at.at(s), &s.value).map(ExecutorDef::Sidecar),
        (None, None) => None,
    }
}

fn builtin(
    report: &mut Report,
    at: At<'_>,
    kind: &Span<String>,
    raw: &RawExecutor,
) -> Option<BuiltinDef> {
    let name = kind.value.as_str();
    let at_kind = at.at(kind);
    let misplaced = |field: &str, present: bool, owner: &str| {
        (present && name != owner).then(|| format!("`{field}` only applies to `builtin: {owner}`"))
    };
    let misplaced = [
        misplaced("for", raw.for_.is_some(), "sleep"),
        misplaced("message", raw.message.is_some(), "fail"),
        misplaced("times", raw.times.is_some(), "fail"),
    ];
    if BUILTINS.contains(&name) {
        for msg in misplaced.into_iter().flatten() {
            report.push(at_kind, msg);
        }
    }
    let kind = match name {
        "noop" => BuiltinKind::Noop,
        "sleep" => match &raw.for_ {
            Some(d) => BuiltinKind::Sleep(report.duration(at, "for", d)?),
            None => {
                report.push(
                    at_kind,
                    "`builtin: sleep` needs `for`, e.g. `{builtin: sleep, for: 2s}`",
                );
                return None;
            }
        },
        "fail" => BuiltinKind::Fail {
            message: raw
                .message
                .clone()
                .unwrap_or_else(|| "failed by builtin `fail`".to_string()),
            times: match &raw.times {
                Some(t) => Some(report.limit(at, "times", t, 1)?),
                None => None,
            },
        },
        other => {
            let hint = did_you_mean(other, BUILTINS.iter().copied());
            report.push(
                at_kind,
                format!("unknown builtin `{other}`{hint}; use {}", one_of(BUILTINS)),
            );
            return None;
        }
    };
    Some(BuiltinDef {
        kind,
        outputs: raw.outputs.clone().unwrap_or_default(),
    })
}

fn http(report: &mut Report, at: At<'_>, raw: &RawHttp) -> Option<HttpDef> {
    let Some(url) = &raw.url else {
        report.push(
            at,
            "`http` needs `url`, e.g. `{http: {url: \"http://host/path\"}}`",
        );
        return None;
    };
    if let Err(why) = check_url(&url.value) {
        report.push(at.at(url), format!("bad `url` `{}`: {why}", url.value));
    }
    let method = match &raw.method {
        Some(m) => {
            let upper = m.value.trim().to_ascii_uppercase();
            if !METHODS.contains(&upper.as_str()) {
                let hint = did_you_mean(&upper, METHODS.iter().copied());
                report.push(
                    at.at(m),
                    format!(
                        "unknown HTTP method `{}`{hint}; use {}",
                        m.value,
                        one_of(METHODS)
                    ),
                );
            }
            upper
        }
        None => "GET".to_string(),
    };
    Some(HttpDef {
        url: url.value.clone(),
        method,
        headers: raw.headers.clone().unwrap_or_default(),
        body: raw.body.clone(),
    })
}

/// A light check: `http://` or `https://`, then a host without spaces.
fn check_url(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let rest = ["http://", "https://"]
        .iter()
        .find_map(|s| lower.strip_prefix(s).map(|_| &url[s.len()..]))
        .ok_or("it must start with `http://` or `https://`")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    let host = if host.starts_with('[') {
        host
    } else {
        host.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Err("it has no host".to_string());
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the host contains spaces".to_string());
    }
    Ok(())
}

fn sidecar(report: &mut Report, at: At<'_>, raw: &RawSidecar) -> Option<SidecarDef> {
    let mut text = |field: &str, value: &Option<Span<String>>| match value {
        Some(v) if !v.value.trim().is_empty() => Some(v.value.clone()),
        Some(v) => {
            report.push(at.at(v), format!("`sidecar.{field}` is empty"));
            None
        }
        None => {
            report.push(at, format!("`sidecar` needs `{field}`, e.g. `{{sidecar: {{group: billing, job: pull-payments}}}}`"));
            None
        }
    };
    let group = text("group", &raw.group);
    let job = text("job", &raw.job);
    let shards = match &raw.shards {
        Some(s) => report.limit(at, "shards", s, 1),
        None => Some(1),
    };
    Some(SidecarDef {
        group: group?,
        job: job?,
        shards: shards?,
    })
}

fn throttle(report: &mut Report, at: At<'_>, raw: &RawThrottle) -> Option<ThrottleDef> {
    let max_permits = match &raw.max_permits {
        Some(p) => report.limit(at, "throttle.max_permits", p, 1),
        None => {
            report.push(
                at,
                "`throttle` needs `max_permits`, e.g. `{max_permits: 2, queue_size: 50}`",
            );
            None
        }
    };
    let queue_size = match &raw.queue_size {
        Some(q) => report.limit(at, "throttle.queue_size", q, 0),
        None => Some(DEFAULT_QUEUE_SIZE),
    };
    Some(ThrottleDef {
        max_permits: max_permits?,
        queue_size: queue_size?,
    })
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
    if let Some(n) = r
        .attempts
        .as_ref()
        .and_then(|a| report.limit(at, "retry.attempts", a, 1))
    {
        policy.attempts = n;
    }
    if let Some(d) = r
        .backoff
        .as_ref()
        .and_then(|d| report.duration(at, "retry.backoff", d))
    {
        policy.backoff = d;
    }
    if let Some(d) = r
        .max_backoff
        .as_ref()
        .and_then(|d| report.duration(at, "retry.max_backoff", d))
    {
        policy.max_backoff = d;
    }
    if let Some(d) = r
        .jitter
        .as_ref()
        .and_then(|d| report.duration(at, "retry.jitter", d))
    {
        policy.jitter = d;
    }
    if let Some(f) = &r.factor {
        if f.value.is_finite() && f.value >= 1.0 {
            policy.factor = f.value;
        } else {
            report.push(
                at.at(f),
                format!(
                    "`retry.factor` must be a number of at least 1, got {}",
                    f.value
                ),
            );
        }
    }
    if let Some(codes) = &r.no_retry_exit_codes {
        policy.no_retry_exit_codes = codes
            .iter()
            .filter_map(|c| match i32::try_from(c.value) {
                Ok(code) => Some(code),
                Err(_) => {
                    report.push(at.at(c), format!("exit code {} is out of range", c.value));
                    None
                }
            })
            .collect();
    }
    policy
}
