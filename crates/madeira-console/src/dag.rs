//! A flow's DAG as SVG: boxes at the cached layout's places with stable ids
//! (`n-<node>`, edges `e-<from>-<to>`), so live updates only toggle a box's
//! `st-<STATE>` class and its state text. Strong edges are solid, weak ones
//! dashed, edges into a node with `when` dotted, the CEL text under the node.
//! Above `FOCUS_ABOVE` nodes the default is a focused view: the selected node and
//! its neighbours up to `depth` hops, laid out on its own.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;

use madeira_core::{DepKind, FlowDef, NodeAction};
use maud::{Markup, PreEscaped, html};

use crate::Console;
use crate::i18n::{Lang, t};
use crate::layout::{Graph, Layout, NODE_H, NODE_W, Orient, layout_oriented};
use crate::page::icon;

thread_local! {
    /// How long the layout computed by the last `svg` call on this thread took
    /// (for the page's `Server-Timing`); `None` when it came from the cache.
    static LAYOUT_MS: std::cell::Cell<Option<f64>> = const { std::cell::Cell::new(None) };
}

/// Takes what the last `svg` call on this thread spent computing a layout.
pub fn take_layout_ms() -> Option<f64> {
    LAYOUT_MS.with(|c| c.take())
}

/// Flows with more nodes than this open on a focused view.
pub const FOCUS_ABOVE: usize = 300;
pub const DEFAULT_DEPTH: usize = 2;

/// What part of the flow to draw.
#[derive(Debug, Clone)]
pub enum Scope {
    All,
    Focus { node: usize, depth: usize },
}

/// Node indexes within `depth` hops of `center` (edges either way).
fn neighbourhood(def: &FlowDef, center: usize, depth: usize) -> Vec<usize> {
    let mut dist = vec![usize::MAX; def.nodes.len()];
    let mut queue = VecDeque::from([center]);
    dist[center] = 0;
    while let Some(v) = queue.pop_front() {
        if dist[v] == depth {
            continue;
        }
        let ups = def.nodes[v].needs.iter().map(|n| n.upstream);
        let downs = def.downstream[v].iter().map(|(d, _)| *d);
        for w in ups.chain(downs) {
            if dist[w] == usize::MAX {
                dist[w] = dist[v] + 1;
                queue.push_back(w);
            }
        }
    }
    (0..def.nodes.len()).filter(|&v| dist[v] != usize::MAX).collect()
}

/// The drawn nodes (flow indexes) and the graph over them.
fn subgraph(def: &FlowDef, scope: &Scope) -> (Vec<usize>, Graph, Vec<(usize, usize)>) {
    let nodes: Vec<usize> = match scope {
        Scope::All => (0..def.nodes.len()).collect(),
        Scope::Focus { node, depth } => neighbourhood(def, *node, *depth),
    };
    let local: HashMap<usize, usize> = nodes.iter().enumerate().map(|(i, &v)| (v, i)).collect();
    let mut edges = Vec::new();
    let mut flow_edges = Vec::new();
    for &v in &nodes {
        for need in &def.nodes[v].needs {
            if let Some(&from) = local.get(&need.upstream) {
                edges.push((from, local[&v]));
                flow_edges.push((need.upstream, v));
            }
        }
    }
    (nodes.clone(), Graph { n: nodes.len(), edges }, flow_edges)
}

/// The layout of `def`/`version` for `scope`, computed once.
fn cached_layout(
    console: &Console,
    def: &FlowDef,
    version: u32,
    scope: &Scope,
    orient: Orient,
) -> (Vec<usize>, Vec<(usize, usize)>, std::sync::Arc<Layout>) {
    let (nodes, graph, flow_edges) = subgraph(def, scope);
    let key = match scope {
        Scope::All => format!("{}:{version}:{orient:?}", def.name),
        Scope::Focus { node, depth } => format!("{}:{version}:{node}:{depth}:{orient:?}", def.name),
    };
    let (laid, took) = console.layouts.get_timed(&key, || layout_oriented(&graph, orient));
    if let Some(took) = took {
        tracing::info!(flow = %def.name, version, nodes = graph.n, took_ms = took.as_secs_f64() * 1000.0, "dag layout computed");
        LAYOUT_MS.with(|c| c.set(Some(took.as_secs_f64() * 1000.0)));
    }
    (nodes, flow_edges, laid)
}

/// What to draw a node's second line with: its state, or (on a flow page) its kind.
pub fn node_kind(def: &FlowDef, v: usize) -> String {
    match &def.nodes[v].action {
        NodeAction::Manual(_) => "manual".into(),
        NodeAction::Run(madeira_core::ExecutorDef::Sidecar(s)) => format!("sidecar {}", s.job),
        NodeAction::Run(madeira_core::ExecutorDef::Http(_)) => "http".into(),
        NodeAction::Run(madeira_core::ExecutorDef::Sql(s)) => format!("sql {}", s.datasource),
        NodeAction::Run(madeira_core::ExecutorDef::Builtin(_)) => "builtin".into(),
        NodeAction::Run(madeira_core::ExecutorDef::Xxl(x)) => format!("xxl {}", x.handler),
        NodeAction::Run(madeira_core::ExecutorDef::Subflow(s)) => format!("flow {}", s.flow),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// Most nodes drawn a second time, top to bottom, for narrow screens; a larger
/// view keeps its one drawing at full size and scrolls.
const DOWN_MAX_NODES: usize = 60;

/// The SVG of `def` for `scope`; `states` (node → state) colours a run's boxes.
/// Drawn `Across` its ids are `dag`, `n-<node>`, `e-<from>-<to>`; `Down` (the
/// phone's copy) prefixes them with `v-`.
pub fn svg(
    console: &Console,
    lang: Lang,
    def: &FlowDef,
    version: u32,
    scope: &Scope,
    states: Option<&HashMap<String, String>>,
    orient: Orient,
) -> Markup {
    let (nodes, flow_edges, laid) = cached_layout(console, def, version, scope, orient);
    let prefix = match orient {
        Orient::Across => "",
        Orient::Down => "v-",
    };
    let mut out = String::with_capacity(nodes.len() * 600 + flow_edges.len() * 200);
    let label = format!("{} {}", t(lang, "Flow"), def.name);
    // Small graphs shrink to the box; large ones keep their size and scroll.
    svg_open(&mut out, prefix, "dag", &laid, &label, nodes.len() <= 60);
    for (i, &(from, to)) in flow_edges.iter().enumerate() {
        let Some(route) = laid.routes.get(i).filter(|r| r.len() >= 2) else { continue };
        let id = format!("{}-{}", def.nodes[from].id, def.nodes[to].id);
        edge_svg(&mut out, prefix, &id, edge_kind(def, from, to), route);
    }
    out.push_str(r#"</g><g class="nodes">"#);
    for (&v, i) in nodes.iter().zip(0..) {
        node_svg(&mut out, lang, def, v, (laid.x[i], laid.y[i]), states, prefix);
    }
    out.push_str("</g></svg>");
    PreEscaped(out)
}

/// Opens a drawing: the `<svg>` element (id `prefix` + `id`, sized to `laid`),
/// its arrowhead and the edges' group (`edge_svg` adds to it; the caller closes
/// it with `</g><g class="nodes">`, adds boxes, and ends with `</g></svg>`).
pub(crate) fn svg_open(out: &mut String, prefix: &str, id: &str, laid: &Layout, label: &str, fit: bool) {
    let _ = write!(
        out,
        r#"<svg class="dag{fit}" id="{prefix}{id}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w:.0} {h:.0}" width="{w:.0}" height="{h:.0}" role="img" aria-label="{label}">"#,
        w = laid.width,
        h = laid.height,
        label = html_escape(label),
        fit = if fit { " fit" } else { "" },
    );
    let _ = write!(
        out,
        r#"<defs><marker id="{prefix}arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs><g class="edges">"#
    );
}

/// One edge (`id` `prefix` + `e-<id>`) along `route`.
pub(crate) fn edge_svg(out: &mut String, prefix: &str, id: &str, class: &str, route: &[(f64, f64)]) {
    let _ = write!(
        out,
        r#"<path id="{prefix}e-{id}" class="edge {class}" d="{d}" marker-end="url(#{prefix}arrow)"/>"#,
        id = html_escape(id),
        d = path_d(route)
    );
}

/// A box of a drawing: its place, element id (`prefix` + `n-<id>`), classes
/// after `node`, tooltip, icon and two lines of text.
pub(crate) struct BoxSvg<'a> {
    pub prefix: &'a str,
    pub id: &'a str,
    pub class: &'a str,
    /// More attributes of the box's `<g>` (`tabindex`, `role`, `data-*`), written as is.
    pub attrs: &'a str,
    pub title: &'a str,
    pub icon: &'a str,
    pub label: &'a str,
    pub second: &'a str,
    pub at: (f64, f64),
}

/// Writes the box's `<g>`, rectangle and text; the caller may add to it and
/// closes it with `</g>`.
pub(crate) fn box_open(out: &mut String, b: &BoxSvg<'_>) {
    let (x, y) = b.at;
    let _ = write!(
        out,
        r#"<g class="node {class}" id="{prefix}n-{id}" data-node="{id}"{attrs} aria-label="{title}"><title>{title}</title><rect x="{x:.1}" y="{y:.1}" width="{NODE_W}" height="{NODE_H}" rx="7"/><text class="icon" x="{ix:.1}" y="{ty:.1}">{icon}</text><text class="label" x="{lx:.1}" y="{ty:.1}">{label}</text><text class="state" x="{lx:.1}" y="{sy:.1}">{second}</text>"#,
        class = b.class,
        prefix = b.prefix,
        id = html_escape(b.id),
        attrs = b.attrs,
        title = html_escape(b.title),
        ix = x + 10.0,
        lx = x + 28.0,
        ty = y + 18.0,
        sy = y + 34.0,
        icon = b.icon,
        label = html_escape(&truncate(b.label, 18)),
        second = html_escape(&truncate(b.second, 24)),
    );
}

fn edge_kind(def: &FlowDef, from: usize, to: usize) -> &'static str {
    let need = def.nodes[to].needs.iter().find(|n| n.upstream == from);
    if def.nodes[to].when.is_some() {
        "cond"
    } else if need.is_some_and(|n| n.kind == DepKind::Weak) {
        "weak"
    } else {
        "strong"
    }
}

/// A smooth path through `route` (horizontal tangents at each point).
fn path_d(route: &[(f64, f64)]) -> String {
    let mut d = format!("M{:.1},{:.1}", route[0].0, route[0].1);
    for w in route.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        let dx = (x1 - x0) / 2.0;
        let _ = write!(d, " C{:.1},{y0:.1} {:.1},{y1:.1} {x1:.1},{y1:.1}", x0 + dx, x1 - dx);
    }
    d
}

fn node_svg(
    out: &mut String,
    lang: Lang,
    def: &FlowDef,
    v: usize,
    (x, y): (f64, f64),
    states: Option<&HashMap<String, String>>,
    prefix: &str,
) {
    let node = &def.nodes[v];
    let state = states.and_then(|s| s.get(&node.id)).map(String::as_str);
    let class = match state {
        Some(s) => format!("st-{s}"),
        None => "st-DEF".to_string(),
    };
    let second =
        state.map_or_else(|| node_kind(def, v), |s| format!("{s} · {}", crate::i18n::state_gloss(lang, s)));
    let when = node.when.as_ref().map(|w| w.source().to_string());
    let mut title = node.id.clone();
    if let Some(s) = state {
        let _ = write!(title, " — {s}");
    }
    if let Some(w) = &when {
        let _ = write!(title, " — when {w}");
    }
    let class = format!("{class}{}", if node.is_manual() { " manual" } else { "" });
    let b = BoxSvg {
        prefix,
        id: &node.id,
        class: &class,
        attrs: r#" tabindex="0" role="button""#,
        title: &title,
        icon: icon(state.unwrap_or("")),
        label: &node.id,
        second: &second,
        at: (x, y),
    };
    box_open(out, &b);
    if let Some(w) = when {
        let _ = write!(
            out,
            r#"<text class="when" x="{:.1}" y="{:.1}">when {}</text>"#,
            x + 4.0,
            y + NODE_H + 11.0,
            html_escape(&truncate(&w, 46))
        );
    }
    out.push_str("</g>");
}

pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The DAG section: legend, focus controls for large flows, the SVG.
pub fn section(
    console: &Console,
    lang: Lang,
    def: &FlowDef,
    version: u32,
    scope: &Scope,
    states: Option<&HashMap<String, String>>,
    base: &str,
) -> Markup {
    html! {
        div.dag-legend {
            span.edge-key.strong { (t(lang, "strong")) } span.edge-key.weak { (t(lang, "weak")) } span.edge-key.cond { (t(lang, "conditional")) }
            @if let Scope::Focus { node, depth } = scope {
                span.focus-note { (t(lang, "Large flow: showing the selected node and its neighbours.")) " "
                    strong { (def.nodes[*node].id) } " ± " (depth) " " (t(lang, "levels")) " · "
                    a href=(format!("{base}?focus=all")) { (t(lang, "Show all")) } }
            }
        }
        @let across = svg(console, lang, def, version, scope, states, Orient::Across);
        @if subgraph_len(def, scope) <= DOWN_MAX_NODES {
            div.dag-wrap.dag-across { (across) }
            div.dag-wrap.dag-down { (svg(console, lang, def, version, scope, states, Orient::Down)) }
        } @else {
            div.dag-wrap { (across) }
        }
    }
}

/// How many nodes `scope` draws.
fn subgraph_len(def: &FlowDef, scope: &Scope) -> usize {
    match scope {
        Scope::All => def.nodes.len(),
        Scope::Focus { node, depth } => neighbourhood(def, *node, *depth).len(),
    }
}

/// The scope a page asks for: `?focus=all`, `?focus=<node>&depth=N`, or the
/// default (all for small flows, else focused on `preferred`).
pub fn scope_of(def: &FlowDef, focus: Option<&str>, depth: Option<usize>, preferred: usize) -> Scope {
    let depth = depth.unwrap_or(DEFAULT_DEPTH).min(20);
    match focus {
        Some("all") => Scope::All,
        Some(name) => def.node_index(name).map_or(Scope::All, |node| Scope::Focus { node, depth }),
        None if def.nodes.len() > FOCUS_ABOVE => {
            Scope::Focus { node: preferred.min(def.nodes.len().saturating_sub(1)), depth }
        }
        None => Scope::All,
    }
}
