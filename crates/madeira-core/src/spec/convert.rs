//! From `RawFlow` to `FlowDef`: the flow name, concurrency, rate limit, routing and
//! defaults, then every node and the graph. Each check reports and carries on with a
//! placeholder, so one pass finds every problem in the file.

use std::time::Duration;

use crate::expr::Condition;
use crate::model::{
    ConcurrencyDef, DepKind, FlowDef, NodeDef, OnOverlap, RateLimitDef, RoutingDef, RoutingRule,
};

use super::graph::{self, Ids};
use super::node::{self, Defaults};
use super::raw::{RawConcurrency, RawDefaults, RawFlow, RawNode, RawRouting, Span};
use super::report::{At, Report, did_you_mean, line_of, one_of};
use super::trigger;

const OVERLAPS: &[&str] = &["queue", "skip", "cancel_previous"];
const MAX_NAME: usize = 63;

/// Validates the whole flow; `None` only when nothing usable could be built (the
/// report then holds the reasons).
pub(crate) fn flow(raw: &RawFlow, report: &mut Report) -> Option<FlowDef> {
    let name = flow_name(raw.flow.as_ref(), report);
    let triggers: Vec<crate::model::TriggerDef> =
        raw.triggers.iter().flatten().filter_map(|t| trigger::trigger(report, t)).collect();
    let concurrency = raw.concurrency.as_ref().map(|c| concurrency(report, c)).unwrap_or_default();
    let rate_limit = raw.rate_limit.as_ref().and_then(|r| rate_limit(report, r));
    let routing = raw.routing.as_ref().and_then(|r| routing(report, r));
    let defaults = raw.defaults.as_ref().map(|d| defaults(report, d)).unwrap_or_default();
    let business = super::bizdate::business(raw, &triggers, report);
    let Graph { nodes, downstream, topo } = nodes(raw, &defaults, report);
    let own = raw.flow.as_ref().map(|f| f.value.as_str());
    let after = raw.after.as_deref().map(|a| super::after::after(report, own, None, a)).unwrap_or_default();
    let has_after = !after.is_empty() || nodes.iter().any(|n| !n.after.is_empty());
    let after_policy =
        raw.after_policy.as_ref().map(|p| super::after::policy(report, p, has_after)).unwrap_or_default();
    Some(FlowDef {
        name: name?,
        description: raw.description.clone(),
        labels: raw.labels.clone().unwrap_or_default(),
        triggers,
        concurrency,
        rate_limit,
        routing,
        observe: raw.observe.unwrap_or(false),
        business,
        nodes,
        downstream,
        topo,
        after,
        after_policy,
        max_duration: raw
            .max_duration
            .as_ref()
            .and_then(|d| node::positive_duration(report, At::top(line_of(d)), "max_duration", d)),
    })
}

fn flow_name(raw: Option<&Span<String>>, report: &mut Report) -> Option<String> {
    let Some(raw) = raw else {
        report.push(
            At::top(None),
            "missing `flow`; name the flow at the top of the file, e.g. `flow: daily-settlement`",
        );
        return None;
    };
    let name = raw.value.as_str();
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if !name.is_empty() && name.len() <= MAX_NAME && name.chars().all(valid) {
        return Some(name.to_string());
    }
    let mut fixed: String =
        name.trim().to_lowercase().chars().map(|c| if valid(c) { c } else { '-' }).take(MAX_NAME).collect();
    if fixed.is_empty() || !fixed.chars().all(valid) {
        fixed = "my-flow".to_string();
    }
    report.push(
        At::top(line_of(raw)),
        format!("flow name `{name}` must be 1 to {MAX_NAME} characters of a-z, 0-9 and `-`; try `{fixed}`"),
    );
    None
}

/// A node id must be a CEL identifier (`nodes.<id>`): `[a-z][a-z0-9_]*`.
fn check_node_id(id: &str, at: At<'_>, report: &mut Report) {
    let mut chars = id.chars();
    let valid_first = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if valid_first && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return;
    }
    let mut fixed: String = id
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '_' })
        .collect();
    if !fixed.starts_with(|c: char| c.is_ascii_lowercase()) {
        fixed.insert_str(0, "n_");
    }
    report.push(
        at,
        format!(
            "node id `{id}` must start with a lowercase letter and use only a-z, 0-9 and `_` \
             (conditions read it as `nodes.{fixed}`); try `{fixed}`"
        ),
    );
}

fn concurrency(report: &mut Report, raw: &Span<RawConcurrency>) -> ConcurrencyDef {
    let at = At::top(line_of(raw));
    let mut def =
        ConcurrencyDef { depends_on_past: raw.value.depends_on_past.unwrap_or(false), ..Default::default() };
    if let Some(n) =
        raw.value.max_active_runs.as_ref().and_then(|m| report.limit(at, "max_active_runs", m, 0))
    {
        def.max_active_runs = n;
    }
    if let Some(o) = &raw.value.on_overlap {
        def.on_overlap = match o.value.as_str() {
            "queue" => OnOverlap::Queue,
            "skip" => OnOverlap::Skip,
            "cancel_previous" => OnOverlap::CancelPrevious,
            other => {
                let hint = did_you_mean(other, OVERLAPS.iter().copied());
                report.push(
                    at.at(o),
                    format!("unknown `on_overlap` `{other}`{hint}; use {}", one_of(OVERLAPS)),
                );
                OnOverlap::Queue
            }
        };
    }
    def
}

/// `"10/s"`, `"100/m"`, `"1000/h"`.
pub(crate) fn parse_rate_limit(text: &str) -> Result<RateLimitDef, String> {
    let usage = "write it as COUNT/UNIT, e.g. `10/s`, `100/m` or `1000/h`";
    let (count, unit) = text.split_once('/').ok_or_else(|| format!("bad `rate_limit` `{text}`: {usage}"))?;
    let count: u32 = count.trim().parse().map_err(|_| {
        format!("bad `rate_limit` `{text}`: `{}` is not a whole number; {usage}", count.trim())
    })?;
    if count == 0 {
        return Err(format!("bad `rate_limit` `{text}`: the count must be at least 1"));
    }
    let per = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        other => {
            return Err(format!("bad `rate_limit` `{text}`: unknown unit `{other}`; {usage}"));
        }
    };
    Ok(RateLimitDef { count, per })
}

fn rate_limit(report: &mut Report, raw: &Span<String>) -> Option<RateLimitDef> {
    parse_rate_limit(&raw.value).map_err(|e| report.push(At::top(line_of(raw)), e)).ok()
}

fn routing(report: &mut Report, raw: &Span<RawRouting>) -> Option<RoutingDef> {
    let at = At::top(line_of(raw));
    let default = match &raw.value.default {
        Some(d) => report.limit(at, "routing.default", d, 1),
        None => {
            report.push(at, "`routing` needs `default`, the version that runs when no rule matches");
            None
        }
    };
    let mut rules = Vec::new();
    for rule in raw.value.rules.iter().flatten() {
        let at = at.at(rule);
        let version = match &rule.value.version {
            Some(v) => report.limit(at, "version", v, 1),
            None => {
                report.push(at, "a routing rule needs `version`");
                None
            }
        };
        let when = match &rule.value.when {
            Some(w) => routing_condition(report, at.at(w), &w.value),
            None => {
                report.push(at, "a routing rule needs `when`, e.g. `when: \"params.tenant in ['t1']\"`");
                None
            }
        };
        if let (Some(when), Some(version)) = (when, version) {
            rules.push(RoutingRule { when, version });
        }
    }
    Some(RoutingDef { default: default?, rules })
}

/// Routing runs before the run exists: only `params` can be read.
fn routing_condition(report: &mut Report, at: At<'_>, source: &str) -> Option<Condition> {
    let cond = Condition::compile(source)
        .map_err(|e| {
            report.push(at, format!("routing `when` is not valid CEL: {e}"));
        })
        .ok()?;
    let others: Vec<String> = cond.variables().into_iter().filter(|v| v != "params").collect();
    for var in &others {
        report.push(
            at,
            format!("routing `when` reads `{var}`; routing is decided before the run starts, so only `params` can be read"),
        );
    }
    others.is_empty().then_some(cond)
}

fn defaults(report: &mut Report, raw: &Span<RawDefaults>) -> Defaults {
    let at = At::top(line_of(raw));
    let base = Defaults::default();
    let timeout = raw.value.timeout.as_ref().and_then(|t| node::positive_duration(report, at, "timeout", t));
    let duration = |report: &mut Report, field: &str, value: &Option<Span<String>>| {
        value.as_ref().and_then(|d| node::positive_duration(report, at, field, d))
    };
    let stall_after = duration(report, "stall_after", &raw.value.stall_after);
    let warn_after = duration(report, "warn_after", &raw.value.warn_after);
    Defaults {
        timeout: timeout.unwrap_or(base.timeout),
        retry: node::merge_retry(&base.retry, raw.value.retry.as_ref(), at, report),
        stall_after: stall_after.unwrap_or(base.stall_after),
        warn_after,
    }
}

/// The nodes with their edges resolved, as `FlowDef` holds them.
#[derive(Default)]
struct Graph {
    nodes: Vec<NodeDef>,
    downstream: Vec<Vec<(usize, DepKind)>>,
    topo: Vec<usize>,
}

fn nodes(raw: &RawFlow, defaults: &Defaults, report: &mut Report) -> Graph {
    let entries = raw.nodes.as_ref().map(|n| n.value.0.as_slice()).unwrap_or_default();
    if entries.is_empty() {
        let line = raw.nodes.as_ref().and_then(line_of);
        report.push(
            At::top(line),
            "the flow has no nodes; add at least one under `nodes:`, e.g. `hello: {run: {builtin: noop}}`",
        );
        return Graph::default();
    }
    let ids = Ids::new(
        entries.iter().map(|(k, _)| k.value.as_str()).collect(),
        entries.iter().map(|(k, _)| line_of(k)).collect(),
    );
    let empty = RawNode::default();
    let mut nodes = Vec::with_capacity(entries.len());
    let mut when_lines = Vec::with_capacity(entries.len());
    for (i, (key, body)) in entries.iter().enumerate() {
        let id = key.value.as_str();
        let at = At { node: Some(id), line: line_of(key) };
        check_node_id(id, at, report);
        if let Some(first) = entries[..i].iter().find(|(k, _)| k.value == key.value) {
            let first = line_of(&first.0).map(|l| format!(" (first at line {l})")).unwrap_or_default();
            report.push(at, format!("duplicate node id `{id}`{first}; rename one of them"));
        }
        let body = body.value.as_ref().unwrap_or(&empty);
        let mut def = node::build(id, at, body, defaults, report);
        let own = raw.flow.as_ref().map(|f| f.value.as_str());
        def.after =
            body.after.as_deref().map(|a| super::after::after(report, own, Some(id), a)).unwrap_or_default();
        def.needs = graph::resolve_needs(i, body.needs.as_deref().unwrap_or_default(), &ids, report);
        when_lines.push(graph::when_line(body.when.as_ref()));
        nodes.push(def);
    }
    let topo = graph::topo(&nodes, &ids, report);
    graph::check_when(&nodes, &when_lines, &ids, report);
    let downstream = graph::downstream(&nodes);
    Graph { nodes, downstream, topo }
}
