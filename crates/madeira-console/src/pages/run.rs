//! `/runs/{id}`: the run page. Header (state, trigger, version, params, actor,
//! duration), the live DAG, the nodes table with attempts and a Gantt bar, the
//! node side panel (attempts, error, outputs with data version and stale mark,
//! idempotency key, actions, log viewer with a tab per attempt) and the run's
//! audit trail. `#run-live` is refetched from `/runs/{id}/live`; the SVG stays and
//! only its classes change.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use madeira_core::NodeAction;
use madeira_server::Role;
use madeira_store::{AuditQuery, NodeRow};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::json;

use super::{LoadedRun, load_run, run_terminal};
use crate::dag;
use crate::i18n::{Lang, state_gloss, t};
use crate::page::{self, ActionDialog, Nav, Shell, badge};
use crate::session::Ctx;
use crate::terms::{Term, state_label, term, term_markup};
use crate::time::{duration_ms, stamp};
use crate::{Console, ConsoleError};

#[derive(Debug, Default, Deserialize)]
pub struct RunQuery {
    #[serde(default)]
    node: Option<String>,
    #[serde(default)]
    focus: Option<String>,
    #[serde(default)]
    depth: Option<usize>,
    /// Node search of a large run's table.
    #[serde(default)]
    q: Option<String>,
}

/// Rows a large run's table shows at once (the search finds the others).
const TABLE_ROWS: usize = 200;

/// The table's rows: every node of a small run; of a large one the nodes whose
/// name contains `q`, or the ones that need a look (failed, waiting, running)
/// first, up to `TABLE_ROWS`. Returns the rows and whether some were left out.
fn table_rows<'a>(run: &'a LoadedRun, q: Option<&str>) -> (Vec<&'a NodeRow>, bool) {
    let all: Vec<&NodeRow> = run.def.topo.iter().filter_map(|&i| run.stored.nodes.get(i)).collect();
    if all.len() <= dag::FOCUS_ABOVE && q.is_none() {
        return (all, false);
    }
    let mut rows: Vec<&NodeRow> = match q.map(str::trim).filter(|q| !q.is_empty()) {
        Some(q) => all.iter().copied().filter(|n| n.node.contains(q)).collect(),
        None => {
            let rank = |n: &NodeRow| match n.state.as_str() {
                "FAILED" => 0,
                "MANUAL_CONFIRM" => 1,
                "RUNNING" | "RETRYING" => 2,
                "INIT" => 3,
                _ => 4,
            };
            let mut v = all.clone();
            v.sort_by_key(|n| rank(n));
            v
        }
    };
    let cut = rows.len() > TABLE_ROWS;
    rows.truncate(TABLE_ROWS);
    (rows, cut)
}

pub async fn page(
    State(console): State<Console>,
    ctx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<RunQuery>,
) -> Result<Response, ConsoleError> {
    let started = std::time::Instant::now();
    let run = load_run(&console, &ctx.user, &id).await?;
    let states: HashMap<String, String> =
        run.stored.nodes.iter().map(|n| (n.node.clone(), n.state.as_str().to_string())).collect();
    let preferred = preferred_node(&run);
    let focus = q.focus.as_deref().or(q.node.as_deref().filter(|_| run.def.nodes.len() > dag::FOCUS_ABOVE));
    let scope = dag::scope_of(&run.def, focus, q.depth, preferred);
    let base = format!("/runs/{id}");
    let (head, details) = fragments(&console, &ctx, &run, q.q.as_deref()).await?;
    let panel = match q.node.as_deref() {
        Some(node) => Some(panel_markup(&console, &ctx, &run, node).await?),
        None => None,
    };
    let lang = ctx.lang;
    let title = format!("{} {}", run.stored.run.flow, short(&id));
    let body = html! {
        div.run-page data-run=(id) data-flow=(run.stored.run.flow) data-tz=(crate::time::flow_tz(&run.def)) data-terminal=(run_terminal(run.stored.run.state.shown().as_str())) {
            h1 { a href=(super::flow_href(&run.stored.run.flow)) { (run.stored.run.flow) } " · " (t(lang, "Run")) " " code.runid { (short(&id)) } }
            div #live-status.live-status data-ok=(t(lang, "Live")) data-retry=(t(lang, "Reconnecting…")) data-poll=(t(lang, "Live updates lost: polling every 5 s.")) {}
            (head)
            div.run-grid {
                section.dag-section aria-label=(t(lang, "Nodes")) {
                    (dag::section(&console, lang, &run.def, run.stored.run.version, &scope, Some(&states), &base))
                }
                aside #panel.panel aria-live="polite" {
                    @if let Some(p) = panel { (p) }
                }
            }
            (details)
        }
    };
    let shell = Shell::new(&ctx, title, &console.assets, Nav::Runs).module("run.js").live("run");
    let markup = shell.render(body);
    tracing::debug!(run_id = %id, nodes = run.def.nodes.len(), took_ms = started.elapsed().as_millis() as u64, "run page rendered");
    Ok(page::timed_response(markup, started, dag::take_layout_ms()))
}

/// The node a large run's focused view centres on: the first failed, waiting or
/// running one, else the first in topological order.
fn preferred_node(run: &LoadedRun) -> usize {
    let rank = |s: &str| match s {
        "FAILED" => 0,
        "MANUAL_CONFIRM" => 1,
        "RUNNING" | "RETRYING" => 2,
        _ => 3,
    };
    run.def
        .topo
        .iter()
        .copied()
        .min_by_key(|&i| run.stored.nodes.get(i).map_or(9, |n| rank(n.state.as_str())))
        .unwrap_or(0)
}

pub fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}

/// `GET /runs/{id}/live`: the part of the run page that is refetched.
pub async fn live(
    State(console): State<Console>,
    ctx: Ctx,
    Path(id): Path<String>,
    Query(q): Query<RunQuery>,
) -> Result<Response, ConsoleError> {
    let run = load_run(&console, &ctx.user, &id).await?;
    Ok(page::html_response(live_fragment(&console, &ctx, &run, q.q.as_deref()).await?))
}

async fn live_fragment(
    console: &Console,
    ctx: &Ctx,
    run: &LoadedRun,
    q: Option<&str>,
) -> Result<Markup, ConsoleError> {
    let (head, details) = fragments(console, ctx, run, q).await?;
    Ok(html! { (head) (details) })
}

/// The run's header (`#run-live`, with every node's state for the SVG) and the
/// nodes table with the audit trail (`#run-details`, swapped out of band).
async fn fragments(
    console: &Console,
    ctx: &Ctx,
    run: &LoadedRun,
    q: Option<&str>,
) -> Result<(Markup, Markup), ConsoleError> {
    let (rows, cut) = table_rows(run, q);
    let lang = ctx.lang;
    let r = &run.stored.run;
    let now = madeira_engine::now_ms();
    let store = console.app.engine.store();
    let transitions = store.transitions(&r.id).await?;
    let audit =
        store.audit(&AuditQuery { run_id: Some(r.id.clone()), limit: 200, ..Default::default() }).await?;
    // Runs older than `runs.actor` keep theirs in the first transition.
    let actor = Some(r.actor.clone())
        .filter(|a| !a.is_empty())
        .or_else(|| transitions.first().map(|t| t.actor.clone()))
        .unwrap_or_else(|| "-".into());
    let hosts = latest_hosts(run);
    let ended_by_hand = ended_by_hand(run, &transitions);
    let states: serde_json::Map<String, serde_json::Value> =
        run.stored.nodes.iter().map(|n| (n.node.clone(), json!(n.state.as_str()))).collect();
    let end = r.finished_at.unwrap_or(now);
    let span_start = r.started_at.unwrap_or(r.created_at);
    let terminal = run_terminal(r.state.shown().as_str());
    let cancel = ActionDialog {
        id: "dlg-cancel".into(),
        label: t(lang, "Cancel run"),
        action: format!("/runs/{}/cancel", r.id),
        hidden: vec![],
        preview: Some(format!(
            "{} {} {}",
            t(lang, "touches"),
            run.stored.nodes.iter().filter(|n| !n.state.is_terminal()).count(),
            t(lang, "nodes")
        )),
        danger: true,
        denied: ctx.denied(Role::Operator),
        extra: None,
    };
    let head = html! {
        div #run-live data-state=(r.state.shown().as_str()) data-event=(ctx.after) data-states=(serde_json::Value::Object(states).to_string()) {
            section.run-head {
                div.kv { span.k { (t(lang, "State")) } span #run-state.v { (badge(lang, r.state.shown().as_str())) " " span.muted { (if lang == Lang::En { state_gloss(lang, r.state.shown().as_str()) } else { r.state.shown().as_str() }) } } }
                div.kv { span.k { (t(lang, "Version")) } span.v { "v" (r.version) } }
                @if let Some(d) = &r.biz_date { div.kv { span.k { (t(lang, "Business date")) } span #run-biz-date.v { (d) } } }
                @if let Some(why) = &r.wait_reason { div.kv.wide { span.k { (t(lang, "Waiting because")) } span #run-wait-reason.v { (why) } } }
                div.kv { span.k { (t(lang, "Trigger")) } span.v { (term_markup(lang, Term::Trigger, &r.trigger)) } }
                div.kv { span.k { (t(lang, "Actor")) } span #run-actor.v { (actor) } }
                div.kv { span.k { (t(lang, "Created")) } span.v { (stamp(lang, Some(r.created_at), now)) } }
                div.kv { span.k { (t(lang, "Duration")) } span.v { (duration_ms(lang, end - span_start)) } }
                div.kv.wide { span.k { (t(lang, "Params")) } code.v.params { (r.params) } }
                @if let Some(key) = &r.idempotency_key { div.kv.wide { span.k { (t(lang, "Idempotency key")) } code.v { (key) } } }
                @if !terminal { div.run-actions { (page::denied_note(cancel.denied.as_ref())) (cancel.render(ctx)) } }
            }
        }
    };
    let details = html! {
        div #run-details hx-swap-oob="true" {
            section.nodes-section {
                h2 { (t(lang, "Nodes")) " " span.muted { "(" (run.stored.nodes.len()) ")" } }
                @if run.stored.nodes.len() > dag::FOCUS_ABOVE {
                    form.node-search method="get" action=(format!("/runs/{}", r.id)) {
                        input.node-filter type="search" name="q" value=(q.unwrap_or("")) placeholder=(t(lang, "Find a node")) aria-label=(t(lang, "Find a node"));
                        button type="submit" { (t(lang, "Search")) }
                        @if cut { span.muted.small { " " (rows.len()) " / " (run.stored.nodes.len()) } }
                    }
                } @else {
                    input.node-filter type="search" placeholder=(t(lang, "Find a node")) aria-label=(t(lang, "Find a node")) data-filter="#nodes-table";
                }
                div.table-wrap {
                    table #nodes-table.nodes {
                        thead { tr { th { (t(lang, "Node")) } th { (t(lang, "State")) } th.num { (t(lang, "Attempts")) } th.opt { (t(lang, "Host")) } th.opt { (t(lang, "Started")) } th { (t(lang, "Duration")) } th.gantt-h { (t(lang, "Timeline")) } } }
                        tbody {
                            @for n in &rows { (node_row(lang, &r.id, n, hosts.get(n.node.as_str()).copied(), ended_by_hand.get(n.node.as_str()), (span_start, end), now)) }
                        }
                    }
                }
            }
            section.audit-section {
                h2 { (t(lang, "Audit trail")) }
                @if audit.is_empty() { p.muted { (t(lang, "none")) } }
                @else {
                    ul.audit {
                        @for a in &audit {
                            li { (stamp(lang, Some(a.at), now)) " · " strong { (a.actor) } " · " (term_markup(lang, Term::Action, &a.action))
                                @if let Some(n) = &a.node { " · " code { (n) } }
                                @if let Some(reason) = &a.reason { " — " q { (reason) } } }
                        }
                    }
                }
                details.transitions {
                    summary { (transitions.len()) " " (t(lang, "transitions")) }
                    ol {
                        @for tr in transitions.iter().rev().take(500) {
                            li { (stamp(lang, Some(tr.at), now)) " " code { (tr.node.as_deref().unwrap_or("run")) } " " (state_label(lang, tr.edge.from_name())) " → " (state_label(lang, tr.edge.to_name())) " (" (tr.edge.cause_name()) ", " (tr.actor) ")" }
                        }
                    }
                }
            }
        }
    };
    Ok((head, details))
}

/// Where each node's latest attempt ran (node → host), for the nodes table.
fn latest_hosts(run: &LoadedRun) -> HashMap<&str, &str> {
    let mut hosts = HashMap::new();
    // Attempts come ordered by node, then attempt: the last one of a node wins.
    for a in &run.stored.attempts {
        if let Some(h) = a.host.as_deref() {
            hosts.insert(a.node.as_str(), h);
        }
    }
    hosts
}

/// A node an operator ended (mark-success or skip) after it had started: it
/// never ran to completion, so it has no duration to show.
struct ByHand<'a> {
    /// What they did (an audit action name: `mark_success`, `skip`).
    action: &'static str,
    actor: &'a str,
    /// When its last attempt ended (the timeline bar stops there).
    ran_until: Option<i64>,
}

/// The nodes whose last transition was an operator's mark-success or skip.
fn ended_by_hand<'a>(
    run: &'a LoadedRun,
    transitions: &'a [madeira_store::TransitionRecord],
) -> HashMap<&'a str, ByHand<'a>> {
    let mut ended = HashMap::new();
    // Transitions come in commit order: a node's last one decides.
    for tr in transitions {
        let Some(node) = tr.node.as_deref() else { continue };
        match tr.edge.cause_name() {
            action @ ("mark_success" | "skip") => {
                let ran_until =
                    run.stored.attempts.iter().filter(|a| a.node == node).filter_map(|a| a.finished_at).max();
                ended.insert(node, ByHand { action, actor: tr.actor.as_str(), ran_until });
            }
            _ => {
                ended.remove(node);
            }
        }
    }
    ended
}

fn node_row(
    lang: Lang,
    run_id: &str,
    n: &NodeRow,
    host: Option<&str>,
    by_hand: Option<&ByHand<'_>>,
    (span_start, span_end): (i64, i64),
    now: i64,
) -> Markup {
    let state = n.state.as_str();
    let duration = n.started_at.map(|s| n.finished_at.unwrap_or(now) - s);
    let total = (span_end - span_start).max(1) as f64;
    // A node ended by hand: the bar covers what ran (its attempts), not the wait.
    let bar_end = match by_hand {
        Some(h) => h.ran_until,
        None => Some(n.finished_at.unwrap_or(now)),
    };
    let bar = n.started_at.zip(bar_end).map(|(s, e)| {
        let x = ((s - span_start).max(0) as f64 / total * 100.0).clamp(0.0, 99.0);
        let w = ((e - s).max(0) as f64 / total * 100.0).clamp(0.8, 100.0 - x);
        (x, w)
    });
    html! {
        tr id=(format!("r-{}", n.node)) data-node=(n.node) {
            td { a.node-link href=(format!("/runs/{run_id}?node={}", n.node)) data-node=(n.node) { (n.node) }
                @if n.stale { " " span.tag.stale { (t(lang, "stale")) } } }
            td.state-cell { (badge(lang, state)) }
            td.num { (n.attempt) }
            td.opt.host { (host.unwrap_or("-")) }
            td.opt { (stamp(lang, n.started_at, now)) }
            @if let Some(h) = by_hand {
                td.by-hand data-action=(h.action) title=(term(lang, Term::Action, h.action)) {
                    (t(lang, if h.action == "skip" { "skipped by" } else { "marked by" })) " " (h.actor) }
            } @else {
                td { @if let Some(d) = duration { (duration_ms(lang, d)) } @else { "-" } }
            }
            td.gantt {
                svg.gantt viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true" {
                    @if let Some((x, w)) = bar { rect class=(format!("bar st-{state}")) x=(format!("{x:.2}")) y="1" width=(format!("{w:.2}")) height="8" {} }
                }
            }
        }
    }
}

/// How attempt `a` of a node now in `state` ended, as the panel shows it: its
/// recorded outcome, except that a `RETRYABLE` failure that turned out to be the
/// node's last attempt (no retry left: the node is FAILED) shows `FAILED`, with
/// the recorded outcome in the second value (the cell's title).
fn attempt_outcome<'a>(
    a: &'a madeira_store::AttemptRecord,
    state: &str,
    last: Option<u32>,
) -> (&'a str, Option<&'static str>) {
    match a.outcome.as_deref() {
        None => ("RUNNING", None),
        Some("RETRYABLE") if state == "FAILED" && Some(a.attempt) == last => {
            ("FAILED", Some("RETRYABLE: no retry left"))
        }
        Some(outcome) => (outcome, None),
    }
}

/// `GET /runs/{id}/nodes/{node}`: the side panel (a fragment).
pub async fn panel(
    State(console): State<Console>,
    ctx: Ctx,
    Path((id, node)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    let run = load_run(&console, &ctx.user, &id).await?;
    let markup = panel_markup(&console, &ctx, &run, &node).await?;
    if crate::error::is_htmx(&headers) {
        return Ok(page::html_response(markup));
    }
    let shell = Shell::new(&ctx, format!("{} · {node}", short(&id)), &console.assets, Nav::Runs)
        .module("run.js")
        .live("run");
    Ok(page::html_response(
        shell.render(html! { div.run-page data-run=(id) { aside #panel.panel.standalone { (markup) } } }),
    ))
}

/// Nodes downstream of `v` (transitively).
fn descendants(def: &madeira_core::FlowDef, v: usize) -> Vec<usize> {
    let mut seen = vec![false; def.nodes.len()];
    let mut stack = vec![v];
    let mut out = Vec::new();
    while let Some(u) = stack.pop() {
        for &(w, _) in &def.downstream[u] {
            if !seen[w] {
                seen[w] = true;
                out.push(w);
                stack.push(w);
            }
        }
    }
    out
}

fn preview(lang: Lang, names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(8).map(String::as_str).collect();
    let more = if names.len() > 8 {
        format!(" … +{} {}", names.len() - 8, t(lang, "more"))
    } else {
        String::new()
    };
    format!("{} {} {}: {}{more}", t(lang, "touches"), names.len(), t(lang, "nodes"), shown.join(", "))
}

async fn panel_markup(
    console: &Console,
    ctx: &Ctx,
    run: &LoadedRun,
    node: &str,
) -> Result<Markup, ConsoleError> {
    let lang = ctx.lang;
    let r = &run.stored.run;
    let idx = run
        .def
        .node_index(node)
        .ok_or_else(|| ConsoleError::NotFound(format!("run {}: node {node} not found", r.id)))?;
    let row = run
        .stored
        .nodes
        .iter()
        .find(|n| n.node == node)
        .ok_or_else(|| ConsoleError::NotFound(format!("run {}: node {node} not found", r.id)))?;
    let now = madeira_engine::now_ms();
    let state = row.state.as_str();
    let attempts: Vec<_> = run.stored.attempts.iter().filter(|a| a.node == node).collect();
    let logs = console.app.engine.store().logs(&r.id, node).await?;
    let mut tabs: Vec<u32> =
        attempts.iter().map(|a| a.attempt).chain(logs.iter().map(|l| l.attempt)).collect();
    tabs.sort_unstable();
    tabs.dedup();
    let running_attempt = attempts.iter().filter(|a| a.finished_at.is_none()).map(|a| a.attempt).max();
    let last_attempt = attempts.iter().map(|a| a.attempt).max();
    let host_kind = match &run.def.nodes[idx].action {
        _ if run.def.observe => "madeira exec",
        NodeAction::Run(madeira_core::ExecutorDef::Sidecar(_)) => t(lang, "Sidecar"),
        NodeAction::Run(madeira_core::ExecutorDef::Xxl(_)) => "XXL-JOB executor",
        NodeAction::Run(madeira_core::ExecutorDef::Subflow(_)) => t(lang, "Child run"),
        _ => t(lang, "control plane"),
    };
    let children = child_runs(console, &r.id, &run.def.nodes[idx]).await?;
    let waiting = console.app.engine.waiting().reason(&r.id, node);
    let prompt = match &run.def.nodes[idx].action {
        NodeAction::Manual(m) => Some(madeira_server::render_prompt(&m.prompt, &run.stored, &run.def)),
        NodeAction::Run(_) => None,
    };
    let key_version =
        if state == "SUCCESS" && row.data_version > 0 { row.data_version } else { row.data_version + 1 };
    let below = descendants(&run.def, idx);
    let below_names: Vec<String> = below.iter().map(|&i| run.def.nodes[i].id.clone()).collect();
    let skipped_below: Vec<String> = below
        .iter()
        .filter_map(|&i| run.stored.nodes.get(i))
        .filter(|n| n.state.as_str() == "SKIPPED")
        .map(|n| n.node.clone())
        .collect();
    let mut with_self = vec![node.to_string()];
    with_self.extend(below_names.iter().cloned());
    let denied = ctx.denied(Role::Operator);
    let action = |name: &str,
                  label: &'static str,
                  preview_names: Option<Vec<String>>,
                  danger: bool,
                  hidden: Vec<(&'static str, String)>| ActionDialog {
        id: format!("dlg-{name}-{node}"),
        label: t(lang, label),
        action: format!("/runs/{}/nodes/{node}/{}", r.id, if name == "rerun-down" { "rerun" } else { name }),
        hidden,
        preview: preview_names.map(|n| preview(lang, &n)),
        danger,
        denied: denied.clone(),
        extra: None,
    };
    let mut actions = Vec::new();
    if state == "MANUAL_CONFIRM" {
        actions.push(action("confirm", "Confirm", None, false, vec![]));
        actions.push(action("reject", "Reject", None, true, vec![]));
    }
    // An observe-only node has no executor Madeira may start: the engine refuses
    // its rerun (promote the flow first), so no button offers one.
    if row.state.is_terminal() && !run.def.observe {
        actions.push(action("rerun", "Rerun", Some(vec![node.to_string()]), false, vec![]));
        if !below.is_empty() {
            actions.push(action(
                "rerun-down",
                "Rerun with downstream",
                Some(with_self.clone()),
                false,
                vec![("downstream", "true".into())],
            ));
        }
    }
    if state == "FAILED" {
        let mut touched = vec![node.to_string()];
        touched.extend(skipped_below.iter().cloned());
        actions.push(action("mark-success", "Mark success", Some(touched), false, vec![]));
    }
    if matches!(state, "INIT" | "RETRYING" | "FAILED" | "MANUAL_CONFIRM") {
        actions.push(action("skip", "Skip", Some(vec![node.to_string()]), true, vec![]));
    }
    Ok(html! {
        div.panel-body data-node=(node) data-state=(state) {
            header.panel-head {
                h2 { code { (node) } " " (badge(lang, state)) }
                a.close href=(format!("/runs/{}", r.id)) aria-label=(t(lang, "Close")) { "×" }
            }
            @if let Some(reason) = row.reason.as_ref().or(waiting.as_ref()) { p.reason { (t(lang, "Reason")) ": " (reason) } }
            @if let Some(p) = &prompt { blockquote.prompt { (p) } }
            @if !actions.is_empty() {
                div.node-actions {
                    (page::denied_note(denied.as_ref()))
                    @for a in &actions { (a.render(ctx)) }
                }
            }
            dl.facts {
                dt { (t(lang, "Idempotency key")) } dd { code { (format!("{}:{node}:v{key_version}", r.id)) } }
                dt { (t(lang, "Data version")) } dd { (row.data_version) @if row.stale { " " span.tag.stale { (t(lang, "stale")) } } }
                dt { (t(lang, "Started")) } dd { (stamp(lang, row.started_at, now)) }
                dt { (t(lang, "Finished")) } dd { (stamp(lang, row.finished_at, now)) }
            }
            @if !row.outputs.is_empty() {
                h3 { (t(lang, "Outputs")) " " span.muted { "v" (row.data_version) } }
                pre.outputs { (serde_json::to_string_pretty(&row.outputs).unwrap_or_default()) }
            }
            @if !attempts.is_empty() {
                h3 { (t(lang, "Attempts")) }
                div.table-wrap { table.attempts {
                    thead { tr { th { "#" } th { (t(lang, "Ran on")) } th { (t(lang, "Started")) } th { (t(lang, "Duration")) } th { (t(lang, "State")) } } }
                    // An attempt's error on a row of its own, the table's full width: a
                    // sixth column was clipped in the side panel.
                    tbody { @for a in &attempts {
                        tr {
                            td.num { (a.attempt) }
                            @if let Some(child) = children.get(&a.attempt) {
                                td.host title=(host_kind) { a.child-run href=(format!("/runs/{child}")) { (child) } }
                            } @else {
                                td.host title=(host_kind) { (a.host.as_deref().unwrap_or("-")) }
                            }
                            td { (stamp(lang, Some(a.started_at), now)) }
                            td { (duration_ms(lang, a.finished_at.unwrap_or(now) - a.started_at)) }
                            @let (outcome, why) = attempt_outcome(a, state, last_attempt);
                            td.outcome data-outcome=(outcome) title=[why.map(|w| t(lang, w))] { (term_markup(lang, Term::Outcome, outcome)) }
                        }
                        @if let Some(error) = a.error.as_deref().filter(|e| !e.is_empty()) {
                            tr.attempt-error { td.error colspan="5" { span.muted { (t(lang, "Error")) ": " } (error) } }
                        }
                    } }
                } }
            }
            @if !tabs.is_empty() {
                h3 { (t(lang, "Log")) }
                div.logs data-run=(r.id) data-node=(node) data-running=[running_attempt] data-empty=(t(lang, "No output kept for this attempt yet.")) data-empty-done=(t(lang, "This attempt printed nothing.")) {
                    div.tabs role="tablist" {
                        @for (i, a) in tabs.iter().enumerate() {
                            button.tab type="button" role="tab" data-attempt=(a) aria-selected=(if i + 1 == tabs.len() { "true" } else { "false" }) { (t(lang, "Attempt")) " " (a) }
                        }
                    }
                    div.log-tools {
                        input.log-search type="search" placeholder=(t(lang, "Search the log")) aria-label=(t(lang, "Search the log"));
                        a.log-download href=(format!("/runs/{}/nodes/{node}/log?attempt={}&download=1", r.id, tabs.last().copied().unwrap_or(1))) { (t(lang, "Download")) }
                    }
                    pre.log tabindex="0" {}
                }
            }
        }
    })
}

/// A sub-flow node's child runs by attempt (none for other nodes).
async fn child_runs(
    console: &Console,
    run_id: &str,
    def: &madeira_core::NodeDef,
) -> Result<HashMap<u32, String>, ConsoleError> {
    let NodeAction::Run(madeira_core::ExecutorDef::Subflow(sub)) = &def.action else {
        return Ok(HashMap::new());
    };
    let query = madeira_store::RunQuery {
        flow: Some(sub.flow.clone()),
        actor: Some(madeira_core::subflow::child_actor(run_id, &def.id)),
        limit: 1000,
        ..Default::default()
    };
    let runs = console.app.engine.store().list_runs(&query).await?;
    Ok(runs
        .into_iter()
        .filter_map(|r| {
            let (_, _, attempt) = madeira_core::subflow::parse_child_key(r.idempotency_key.as_deref()?)?;
            Some((attempt, r.id))
        })
        .collect())
}
