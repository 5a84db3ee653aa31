//! `/estate?date=YYYY-MM-DD`: the estate map of one business date (the engine's
//! `estate_map`, as `GET /api/v1/estate` serves it). Every flow the viewer may
//! see is a box coloured by the state of its newest run for the date — done,
//! running, held (and whom it waits for), failed, cancelled, queued, no run —
//! and marked when late against its deadline; cross-flow `after` and
//! `flow_succeeded` edges join them, drawn with the flow DAG's layout and boxes
//! (`layout`, `dag`: across, and top to bottom on a phone). Above the drawing,
//! the roots of the trouble ("payments-pull.pull failed: holds warehouse-clean,
//! finance-settle"); below it, a table linking each flow's run for the date.
//! Another team's flow named by a visible flow's `after` is drawn as a plain
//! box without state or link. Without `date`: the latest business date among
//! the newest runs the viewer may see, else today in the server's timezone.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::hash::{Hash, Hasher};

use axum::extract::{Query, State};
use axum::response::Response;
use chrono::NaiveDate;
use madeira_core::bizdate::{format_date, parse_date};
use madeira_engine::estate_map::MapFlow;
use madeira_store::RunQuery;
use maud::{Markup, PreEscaped, html};
use serde::Deserialize;

use super::{flow_href, run::short, run_href};
use crate::dag::{BoxSvg, box_open, edge_svg, svg_open};
use crate::i18n::{Lang, t};
use crate::layout::{Graph, Layout, Orient, layout_oriented};
use crate::page::{self, Nav, Shell};
use crate::session::Ctx;
use crate::{Console, ConsoleError};

/// Newest runs looked at for the default date.
const DEFAULT_FROM: u32 = 200;

#[derive(Debug, Default, Deserialize)]
pub struct EstateQuery {
    #[serde(default)]
    date: Option<String>,
}

/// Why the page shows the date it shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateFrom {
    Asked,
    LatestWithRuns,
    Today,
}

/// One box of the map, as this viewer may see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub flow: String,
    pub after: Vec<String>,
    /// The map's state, or `hidden` (another team's flow a visible one names).
    pub state: &'static str,
    pub run_id: Option<String>,
    /// The upstream a held flow waits for (`payments-pull`, `fx-rates.publish`).
    pub waits_for: Option<String>,
    /// `payments-pull.pull`: the failed upstream at the root of a held flow's wait.
    pub root: Option<String>,
    /// The root is a flow the viewer may not see.
    pub root_hidden: bool,
    /// For a failed flow: the visible flows held behind it.
    pub holds: Vec<String>,
    /// Nodes of a running run held by their own `after`: `(node, upstream)`.
    pub held_nodes: Vec<(String, String)>,
    pub late: bool,
    pub deadline: Option<String>,
}

/// The map for a viewer who sees the flows `sees` accepts.
pub fn shown(map: Vec<MapFlow>, sees: &dyn Fn(&str) -> bool) -> Vec<Shown> {
    let mut out: Vec<Shown> = Vec::new();
    let mut named: Vec<String> = Vec::new();
    let mut present = HashSet::new();
    for m in &map {
        if !sees(&m.flow) {
            continue;
        }
        present.insert(m.flow.clone());
        named.extend(m.after.iter().filter(|u| !sees(u)).cloned());
        let root_hidden = m.root_cause.as_ref().is_some_and(|r| !sees(&r.flow));
        let root = m.root_cause.as_ref().filter(|_| !root_hidden).map(|r| match &r.node {
            Some(node) => format!("{}.{node}", r.flow),
            None => r.flow.clone(),
        });
        out.push(Shown {
            flow: m.flow.clone(),
            after: m.after.clone(),
            state: m.state,
            run_id: m.run_id.clone(),
            waits_for: m.waiting_for.as_deref().map(upstream_of),
            root,
            root_hidden,
            holds: m.holds.iter().filter(|h| sees(h)).cloned().collect(),
            held_nodes: m.held_nodes.iter().map(|h| (h.node.clone(), upstream_of(&h.waiting_for))).collect(),
            late: m.late,
            deadline: m.deadline.clone(),
        });
    }
    // Another team's upstreams, upstream first (before the flows naming them).
    let mut hidden = Vec::new();
    for name in named {
        if present.insert(name.clone()) {
            hidden.push(Shown {
                flow: name,
                after: Vec::new(),
                state: "hidden",
                run_id: None,
                waits_for: None,
                root: None,
                root_hidden: false,
                holds: Vec::new(),
                held_nodes: Vec::new(),
                late: false,
                deadline: None,
            });
        }
    }
    hidden.extend(out);
    hidden
}

/// `payments-pull` from `waiting for payments-pull 2026-12-04`.
fn upstream_of(reason: &str) -> String {
    let what = reason.strip_prefix("waiting for ").unwrap_or(reason);
    // A held node's reason goes on: `…, RUNNING since 01:05`.
    let what = what.split_once(',').map_or(what, |(w, _)| w);
    what.rsplit_once(' ').map_or(what, |(name, _)| name).to_string()
}

/// The roots of the trouble: `(root, held flows)` per failed flow holding visible ones.
pub fn roots(flows: &[Shown]) -> Vec<(String, Vec<String>)> {
    flows
        .iter()
        .filter(|f| f.state == "failed" && !f.holds.is_empty())
        .map(|f| {
            let label = flows
                .iter()
                .filter_map(|h| h.root.as_deref())
                .find(|r| *r == f.flow || r.starts_with(&format!("{}.", f.flow)))
                .unwrap_or(&f.flow)
                .to_string();
            (label, f.holds.clone())
        })
        .collect()
}

/// The graph over `flows`: an edge from each upstream to the flow naming it.
fn graph(flows: &[Shown]) -> Graph {
    let index: HashMap<&str, usize> = flows.iter().enumerate().map(|(i, f)| (f.flow.as_str(), i)).collect();
    let mut edges = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        for up in &f.after {
            if let Some(&u) = index.get(up.as_str()) {
                edges.push((u, i));
            }
        }
    }
    Graph { n: flows.len(), edges }
}

fn state_text(lang: Lang, state: &str) -> &'static str {
    t(
        lang,
        match state {
            "done" => "done",
            "running" => "running",
            "held" => "held",
            "queued" => "queued",
            "failed" => "failed",
            "cancelled" => "cancelled",
            "hidden" => "outside your scope",
            _ => "no run",
        },
    )
}

/// The colour class of a map state (the run states' colours; `held` its own).
fn state_class(state: &str) -> &'static str {
    match state {
        "done" => "st-SUCCESS",
        "running" => "st-RUNNING",
        "failed" => "st-FAILED",
        "cancelled" => "st-CANCELLED",
        "queued" => "st-QUEUED",
        "held" => "st-HELD",
        "hidden" => "st-DEF outside",
        _ => "st-DEF",
    }
}

fn state_icon(state: &str, late: bool) -> &'static str {
    if late {
        return "⚠";
    }
    match state {
        "done" => "✓",
        "running" => "▶",
        "failed" => "✗",
        "cancelled" => "⊘",
        "held" => "‖",
        "queued" => "…",
        _ => "○",
    }
}

/// What a box's second line says.
fn second_line(lang: Lang, f: &Shown) -> String {
    match (f.state, &f.waits_for) {
        ("held", Some(up)) => format!("{} {up}", t(lang, "waits for")),
        ("running", _) if !f.held_nodes.is_empty() => {
            let (node, up) = &f.held_nodes[0];
            format!("{} {node} {} {up}", t(lang, "node"), t(lang, "waits for"))
        }
        ("failed", _) if !f.holds.is_empty() => {
            format!("{} · {} {}", state_text(lang, f.state), t(lang, "holds"), f.holds.len())
        }
        _ if f.late => format!("{} · {}", state_text(lang, f.state), t(lang, "late")),
        _ => state_text(lang, f.state).to_string(),
    }
}

/// A box's tooltip: everything the map knows of it.
fn title(lang: Lang, f: &Shown) -> String {
    let mut title = format!("{} — {}", f.flow, state_text(lang, f.state));
    if let Some(up) = &f.waits_for {
        let _ = write!(title, " — {} {up}", t(lang, "waits for"));
    }
    if let Some(root) = &f.root {
        let _ = write!(title, " — {} {root}", t(lang, "root cause"));
    }
    if !f.holds.is_empty() {
        let _ = write!(title, " — {} {}", t(lang, "holds"), f.holds.join(", "));
    }
    if f.late {
        let _ = write!(title, " — {} {}", t(lang, "late"), f.deadline.as_deref().unwrap_or(""));
    }
    title
}

fn href(f: &Shown) -> Option<String> {
    match (&f.run_id, f.state) {
        (_, "hidden") => None,
        (Some(run), _) => Some(run_href(run)),
        (None, _) => Some(flow_href(&f.flow)),
    }
}

/// The drawing of `flows` laid out `orient` (ids `estate-map`, `n-<flow>`,
/// `e-<up>-<flow>`; the phone's copy prefixed `v-`).
fn svg(lang: Lang, flows: &[Shown], laid: &Layout, orient: Orient) -> Markup {
    let prefix = if orient == Orient::Down { "v-" } else { "" };
    let g = graph(flows);
    let mut out = String::with_capacity(flows.len() * 700);
    svg_open(&mut out, prefix, "estate-map", laid, t(lang, "Estate"), flows.len() <= 60);
    for (i, &(from, to)) in g.edges.iter().enumerate() {
        let Some(route) = laid.routes.get(i).filter(|r| r.len() >= 2) else { continue };
        let id = format!("{}-{}", flows[from].flow, flows[to].flow);
        let class = if flows[from].state == "failed"
            && (flows[to].state == "held" || !flows[to].held_nodes.is_empty())
        {
            "holding"
        } else {
            "strong"
        };
        edge_svg(&mut out, prefix, &id, class, route);
    }
    out.push_str(r#"</g><g class="nodes">"#);
    for (i, f) in flows.iter().enumerate() {
        let class = format!("{}{}", state_class(f.state), if f.late { " late" } else { "" });
        let attrs =
            format!(r#" data-state="{}"{}"#, f.state, if f.late { r#" data-late="true""# } else { "" });
        let (title, second) = (title(lang, f), second_line(lang, f));
        let link = href(f);
        if let Some(url) = &link {
            let _ = write!(out, r#"<a href="{}">"#, crate::dag::html_escape(url));
        }
        let b = BoxSvg {
            prefix,
            id: &f.flow,
            class: &class,
            attrs: &attrs,
            title: &title,
            icon: state_icon(f.state, f.late),
            label: &f.flow,
            second: &second,
            at: (laid.x[i], laid.y[i]),
        };
        box_open(&mut out, &b);
        out.push_str("</g>");
        if link.is_some() {
            out.push_str("</a>");
        }
    }
    out.push_str("</g></svg>");
    PreEscaped(out)
}

/// The layout of the map's graph, cached by its shape.
fn laid(console: &Console, flows: &[Shown], orient: Orient) -> std::sync::Arc<Layout> {
    let g = graph(flows);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for f in flows {
        f.flow.hash(&mut hasher);
    }
    g.edges.hash(&mut hasher);
    let key = format!("estate:{}:{:x}:{orient:?}", flows.len(), hasher.finish());
    console.layouts.get_or(&key, || layout_oriented(&g, orient))
}

/// The date to show when none was asked for.
async fn default_date(
    console: &Console,
    scope: Option<&HashSet<String>>,
) -> Result<(NaiveDate, DateFrom), ConsoleError> {
    let sees = |flow: &str| scope.is_none_or(|v| v.contains(flow));
    let runs =
        console.app.reads.runs.list_runs(&RunQuery { limit: DEFAULT_FROM, ..Default::default() }).await?;
    let latest = runs
        .iter()
        .filter(|r| sees(&r.flow))
        .filter_map(|r| r.biz_date.as_deref().and_then(|d| parse_date(d).ok()))
        .max();
    Ok(match latest {
        Some(d) => (d, DateFrom::LatestWithRuns),
        None => (chrono::Local::now().date_naive(), DateFrom::Today),
    })
}

pub async fn page(
    State(console): State<Console>,
    ctx: Ctx,
    Query(q): Query<EstateQuery>,
) -> Result<Response, ConsoleError> {
    let started = std::time::Instant::now();
    let lang = ctx.lang;
    let scope = super::visible(&console, &ctx.user).await?;
    let sees = |flow: &str| scope.as_ref().is_none_or(|v| v.contains(flow));
    let (date, from) = match q.date.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) => {
            (parse_date(d).map_err(|e| ConsoleError::BadRequest(format!("date: {e}")))?, DateFrom::Asked)
        }
        None => default_date(&console, scope.as_ref()).await?,
    };
    let day = format_date(date);
    let flows = shown(console.app.engine.estate_map(&day).await?, &sees);
    let roots = roots(&flows);
    let across = laid(&console, &flows, Orient::Across);
    let down = laid(&console, &flows, Orient::Down);
    let body = render(lang, &day, date, from, &flows, &roots, (&across, &down));
    let shell = Shell::new(&ctx, format!("{} {day}", t(lang, "Estate")), &console.assets, Nav::Estate);
    Ok(page::timed_response(shell.render(body), started, None))
}

fn render(
    lang: Lang,
    day: &str,
    date: NaiveDate,
    from: DateFrom,
    flows: &[Shown],
    roots: &[(String, Vec<String>)],
    (across, down): (&Layout, &Layout),
) -> Markup {
    let step = |days: i64| format_date(date + chrono::Duration::days(days));
    let counts: Vec<(&str, usize)> = ["failed", "held", "running", "queued", "done", "cancelled", "none"]
        .into_iter()
        .map(|s| (s, flows.iter().filter(|f| f.state == s).count()))
        .filter(|(_, n)| *n > 0)
        .collect();
    let late = flows.iter().filter(|f| f.late).count();
    html! {
        div.estate-page data-date=(day) {
            h1 { (t(lang, "Estate for business date")) " " span.biz-date { (day) } }
            form.estate-date method="get" action="/estate" {
                a.button.prev href=(format!("/estate?date={}", step(-1))) { "← " (t(lang, "Previous day")) }
                label.inline { span.sr { (t(lang, "Business date")) } input type="date" name="date" value=(day) required; }
                button type="submit" { (t(lang, "Show")) }
                a.button.next href=(format!("/estate?date={}", step(1))) { (t(lang, "Next day")) " →" }
                @match from {
                    DateFrom::LatestWithRuns => span.muted.date-note { (t(lang, "the latest business date with runs")) },
                    DateFrom::Today => span.muted.date-note { (t(lang, "today (server time): no run has a business date yet")) },
                    DateFrom::Asked => {},
                }
            }
            @if flows.is_empty() {
                p.muted { (t(lang, "No flows.")) }
            } @else {
                p.estate-counts {
                    @for (i, (state, n)) in counts.iter().enumerate() {
                        @if i > 0 { " · " }
                        span class=(format!("count {}", state_class(state))) data-state=(state) { (n) " " (state_text(lang, state)) }
                    }
                    @if late > 0 { " · " span.count.late data-state="late" { (late) " " (t(lang, "late")) } }
                }
                @if roots.is_empty() {
                    p.muted.no-roots { (t(lang, "Nothing is held behind a failure on this date.")) }
                } @else {
                    ul.estate-roots {
                        @for (root, held) in roots {
                            li.root-line data-root=(root) { span.badge.st-FAILED { "✗ " (root) } " " (t(lang, "failed: holds")) " " strong { (held.join(", ")) } }
                        }
                    }
                }
                section.dag-section {
                    div.dag-legend { span.edge-key.strong { (t(lang, "waits for")) } span.edge-key.holding { (t(lang, "held behind a failure")) } }
                    div.dag-wrap.dag-across { (svg(lang, flows, across, Orient::Across)) }
                    div.dag-wrap.dag-down { (svg(lang, flows, down, Orient::Down)) }
                }
                (table(lang, day, flows))
            }
        }
    }
}

fn table(lang: Lang, day: &str, flows: &[Shown]) -> Markup {
    html! {
        div.table-wrap { table.estate-table {
            thead { tr { th { (t(lang, "Flow")) } th { (t(lang, "State")) } th { (t(lang, "Run")) } th { (t(lang, "Waiting because")) } th.opt { (t(lang, "Deadline")) } } }
            tbody {
                @for f in flows.iter().filter(|f| f.state != "hidden") {
                    tr id=(format!("row-{}", f.flow)) data-state=(f.state) {
                        td { a href=(flow_href(&f.flow)) { strong { (f.flow) } } }
                        td { span class=(format!("badge {}", state_class(f.state))) { (state_icon(f.state, false)) " " (state_text(lang, f.state)) }
                            @if f.late { " " span.badge.late { "⚠ " (t(lang, "late")) } } }
                        td { @match &f.run_id {
                            Some(run) => a href=(run_href(run)) { code { (short(run)) } },
                            None => span.muted { (t(lang, "no run for this date")) },
                        } }
                        td.waits {
                            @if let Some(up) = &f.waits_for { (t(lang, "waits for")) " " strong { (up) } " " (day) }
                            @if let Some(root) = &f.root { br; span.root { (t(lang, "root cause")) " " code { (root) } " " (state_text(lang, "failed")) } }
                            @if f.root_hidden { br; span.muted { (t(lang, "held behind a failure outside your scope")) } }
                            @if !f.holds.is_empty() { (t(lang, "holds")) " " (f.holds.join(", ")) }
                            @for (node, up) in &f.held_nodes { span.held-node data-node=(node) { (t(lang, "node")) " " code { (node) } " " (t(lang, "waits for")) " " strong { (up) } } br; }
                        }
                        td.opt { @if let Some(d) = &f.deadline { (d) } @else { "-" } }
                    }
                }
            }
        } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use madeira_engine::estate_map::RootCause;

    fn flow(name: &str, after: &[&str], state: &'static str) -> MapFlow {
        MapFlow {
            flow: name.into(),
            after: after.iter().map(|s| s.to_string()).collect(),
            state,
            run_id: Some(format!("run-{name}")),
            waiting_for: None,
            node_after: Vec::new(),
            held_nodes: Vec::new(),
            root_cause: None,
            holds: Vec::new(),
            deadline: None,
            late: false,
        }
    }

    fn estate() -> Vec<MapFlow> {
        let mut pull = flow("payments-pull", &[], "failed");
        pull.holds = vec!["warehouse-clean".into(), "finance-settle".into()];
        let mut clean = flow("warehouse-clean", &["payments-pull"], "held");
        clean.waiting_for = Some("waiting for payments-pull 2026-12-04".into());
        clean.root_cause = Some(RootCause { flow: "payments-pull".into(), node: Some("pull".into()) });
        let mut settle = flow("finance-settle", &["warehouse-clean"], "held");
        settle.waiting_for = Some("waiting for warehouse-clean 2026-12-04".into());
        settle.root_cause = clean.root_cause.clone();
        settle.late = true;
        vec![pull, clean, settle]
    }

    #[test]
    fn a_failed_upstream_is_one_root_holding_the_flows_behind_it() {
        let flows = shown(estate(), &|_| true);
        assert_eq!(flows[1].waits_for.as_deref(), Some("payments-pull"));
        assert_eq!(
            roots(&flows),
            [(
                "payments-pull.pull".to_string(),
                vec!["warehouse-clean".to_string(), "finance-settle".into()]
            )]
        );
        assert_eq!(second_line(Lang::En, &flows[0]), "failed · holds 2");
        assert_eq!(second_line(Lang::En, &flows[2]), "waits for warehouse-clean");
        assert_eq!(second_line(Lang::ZhCn, &flows[1]), "等待 payments-pull");
        assert_eq!(graph(&flows).edges, [(0, 1), (1, 2)]);
        assert_eq!(upstream_of("waiting for fx-rates.publish 2026-12-03"), "fx-rates.publish");
    }

    #[test]
    fn another_teams_upstream_is_a_plain_box_and_its_failure_is_not_named() {
        let flows = shown(estate(), &|f| f != "payments-pull");
        let names: Vec<(&str, &str)> = flows.iter().map(|f| (f.flow.as_str(), f.state)).collect();
        assert_eq!(
            names,
            [("payments-pull", "hidden"), ("warehouse-clean", "held"), ("finance-settle", "held")]
        );
        assert!(flows[0].run_id.is_none() && href(&flows[0]).is_none(), "no state, no link");
        assert!(flows.iter().all(|f| f.root.is_none()) && flows[1].root_hidden);
        assert!(roots(&flows).is_empty(), "the root is theirs");
        let only_settle = shown(estate(), &|f| f == "finance-settle");
        assert_eq!(only_settle.len(), 2, "its direct upstream as a plain box, nothing further");
    }

    #[test]
    fn a_running_flow_with_a_held_node_says_which_node_waits_for_whom() {
        let mut fx = flow("fx-rates", &[], "failed");
        fx.holds = vec!["finance-settle".into()];
        let mut settle = flow("finance-settle", &["fx-rates"], "running");
        settle.held_nodes = vec![madeira_engine::estate_map::HeldNodeView {
            node: "post".into(),
            waiting_for: "waiting for fx-rates.publish 2026-12-03, FAILED".into(),
        }];
        settle.root_cause = Some(RootCause { flow: "fx-rates".into(), node: Some("publish".into()) });
        let flows = shown(vec![fx, settle], &|_| true);
        assert_eq!(flows[1].held_nodes, [("post".to_string(), "fx-rates.publish".to_string())]);
        assert_eq!(second_line(Lang::En, &flows[1]), "node post waits for fx-rates.publish");
        assert_eq!(second_line(Lang::ZhCn, &flows[1]), "节点 post 等待 fx-rates.publish");
        assert_eq!(roots(&flows), [("fx-rates.publish".to_string(), vec!["finance-settle".to_string()])]);
    }
}
