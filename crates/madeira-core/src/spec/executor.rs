//! Executors, the shape shared by `run` and `manual.fallback`: exactly one of
//! `builtin` (noop, sleep, fail), `http` (URL and method checked), `sidecar` or
//! `sql` (checked in `sql`) or `xxl` (checked in `xxl`).

use crate::keyexpr::{KeyExpr, ValueExpr};
use crate::model::{BuiltinDef, BuiltinKind, ExecutorDef, HttpDef, SidecarDef, SidecarRoute};
use crate::subflow::{SubflowDef, SubflowParam};

use super::raw::{RawExecutor, RawHttp, RawShards, RawSidecar, Span};
use super::report::{At, Report, did_you_mean, one_of};
use serde_saphyr::Spanned;

const BUILTINS: &[&str] = &["noop", "sleep", "fail"];
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

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
        raw.sql.as_ref().map(|_| "sql"),
        raw.xxl.as_ref().map(|_| "xxl"),
        raw.flow.as_ref().map(|_| "flow"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(then) = raw.then.as_ref().filter(|_| field != "manual.fallback") {
        report
            .push(at.at(then), format!("`then` only applies to `manual.fallback`; remove it from `{field}`"));
    }
    if kinds.len() != 1 {
        let has = if kinds.is_empty() { "none".to_string() } else { one_of(&kinds).replace(" or ", " and ") };
        report.push(
            at,
            format!(
                "`{field}` needs exactly one of `builtin`, `http`, `sidecar`, `sql`, `xxl` or `flow` (has {has})"
            ),
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
        report.push(at, format!("{fields} only apply to `builtin` executors; remove them from `{field}`"));
    }
    if let (Some(p), None) = (&raw.params, &raw.flow) {
        let line = p.0.first().and_then(|(k, _)| super::report::line_of(k));
        report.push(
            at.on(line),
            format!("`params` only applies to a sub-flow (`{field}: {{flow: NAME, params: …}}`)"),
        );
    }
    if let Some(f) = &raw.flow {
        if field == "manual.fallback" {
            report.push(
                at.at(f),
                "a sub-flow cannot be a manual node's fallback; use `run: {flow: …}` on a node of its own",
            );
            return None;
        }
        return subflow(report, at, f, raw);
    }
    if let Some(s) = &raw.sql {
        return super::sql::sql(report, at.at(s), &s.value).map(ExecutorDef::Sql);
    }
    if let Some(x) = &raw.xxl {
        return super::xxl::xxl(report, at.at(x), &x.value).map(ExecutorDef::Xxl);
    }
    match (&raw.http, &raw.sidecar) {
        (Some(h), _) => http(report, at.at(h), &h.value).map(ExecutorDef::Http),
        (_, Some(s)) => sidecar(report, at.at(s), &s.value).map(ExecutorDef::Sidecar),
        (None, None) => None,
    }
}

fn builtin(report: &mut Report, at: At<'_>, kind: &Span<String>, raw: &RawExecutor) -> Option<BuiltinDef> {
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
                report.push(at_kind, "`builtin: sleep` needs `for`, e.g. `{builtin: sleep, for: 2s}`");
                return None;
            }
        },
        "fail" => BuiltinKind::Fail {
            message: raw.message.clone().unwrap_or_else(|| "failed by builtin `fail`".to_string()),
            times: match &raw.times {
                Some(t) => Some(report.limit(at, "times", t, 1)?),
                None => None,
            },
        },
        other => {
            let hint = did_you_mean(other, BUILTINS.iter().copied());
            report.push(at_kind, format!("unknown builtin `{other}`{hint}; use {}", one_of(BUILTINS)));
            return None;
        }
    };
    Some(BuiltinDef { kind, outputs: raw.outputs.clone().unwrap_or_default() })
}

fn http(report: &mut Report, at: At<'_>, raw: &RawHttp) -> Option<HttpDef> {
    let Some(url) = &raw.url else {
        report.push(at, "`http` needs `url`, e.g. `{http: {url: \"http://host/path\"}}`");
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
                    format!("unknown HTTP method `{}`{hint}; use {}", m.value, one_of(METHODS)),
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
    let host = if host.starts_with('[') { host } else { host.split(':').next().unwrap_or_default() };
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
            report.push(
                at,
                format!(
                    "`sidecar` needs `{field}`, e.g. `{{sidecar: {{group: billing, job: pull-payments}}}}`"
                ),
            );
            None
        }
    };
    let group = text("group", &raw.group);
    let job = text("job", &raw.job);
    let shards = match &raw.shards {
        Some(s) => match &s.value {
            RawShards::Count(n) => report.limit(at, "shards", &Spanned::new(*n, s.referenced, s.defined), 1),
            RawShards::Word(w) if w == "all" => Some(SidecarDef::ALL),
            RawShards::Word(w) => {
                report.push(
                    at.at(s),
                    format!("`shards` is a number or `all` (one attempt per live sidecar), got `{w}`"),
                );
                None
            }
        },
        None => Some(1),
    };
    let route = route(report, at, raw);
    Some(SidecarDef { group: group?, job: job?, shards: shards?, route: route? })
}

const ROUTES: &[&str] = &["round_robin", "least_busy", "random"];

/// `route: round_robin | least_busy | random`, or `hash_key: CEL` for consistent hashing.
fn route(report: &mut Report, at: At<'_>, raw: &RawSidecar) -> Option<SidecarRoute> {
    match (&raw.route, &raw.hash_key) {
        (Some(r), Some(_)) => {
            report.push(at.at(r), "give either `route` or `hash_key` (consistent hashing), not both");
            None
        }
        (None, Some(key)) => match KeyExpr::compile(&key.value) {
            Ok(expr) => Some(SidecarRoute::Hash(expr)),
            Err(e) => {
                report.push(at.at(key), format!("bad `hash_key` `{}`: {e}", key.value));
                None
            }
        },
        (Some(r), None) => match r.value.as_str() {
            "round_robin" => Some(SidecarRoute::RoundRobin),
            "least_busy" => Some(SidecarRoute::LeastBusy),
            "random" => Some(SidecarRoute::Random),
            other => {
                let hint = did_you_mean(other, ROUTES.iter().copied());
                report.push(
                    at.at(r),
                    format!(
                        "unknown route `{other}`{hint}; use {} (or `hash_key` for consistent hashing)",
                        one_of(ROUTES)
                    ),
                );
                None
            }
        },
        (None, None) => Some(SidecarRoute::RoundRobin),
    }
}

/// `run: {flow: NAME, params: {k: CEL or literal}}`. Whether `NAME` exists (and does
/// not run this flow back) is checked on apply, against the stored flows.
fn subflow(report: &mut Report, at: At<'_>, flow: &Span<String>, raw: &RawExecutor) -> Option<ExecutorDef> {
    let name = flow.value.trim();
    if name.is_empty() {
        report.push(at.at(flow), "`flow` is empty; name the flow to run as a sub-flow");
        return None;
    }
    let mut params = Vec::new();
    let mut ok = true;
    for (key, value) in raw.params.iter().flat_map(|p| p.0.iter()) {
        let param = match value {
            serde_json::Value::String(source) => match ValueExpr::compile(source) {
                Ok(e) => {
                    let bad: Vec<String> = e_variables(&e)
                        .into_iter()
                        .filter(|v| !["params", "nodes", "biz_date"].contains(&v.as_str()))
                        .collect();
                    for var in bad {
                        report.push(
                            at.at(key),
                            format!(
                                "sub-flow param `{}` reads `{var}`; it can read `params`, `nodes.<id>` and \
                                 `biz_date` (quote a literal text as CEL: `\"'text'\"`)",
                                key.value
                            ),
                        );
                        ok = false;
                    }
                    SubflowParam::Expr(e)
                }
                Err(e) => {
                    report.push(at.at(key), format!("bad CEL in sub-flow param `{}`: {e}", key.value));
                    ok = false;
                    continue;
                }
            },
            other => SubflowParam::Literal(other.clone()),
        };
        params.push((key.value.clone(), param));
    }
    ok.then(|| {
        ExecutorDef::Subflow(SubflowDef {
            flow: name.to_string(),
            line: super::report::line_of(flow),
            params,
        })
    })
}

fn e_variables(e: &ValueExpr) -> Vec<String> {
    crate::expr::Condition::compile(e.source()).map(|c| c.variables()).unwrap_or_default()
}
