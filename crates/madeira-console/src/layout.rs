//! DAG layout (Sugiyama): layers by longest path from the sources, long edges cut
//! into chains of dummy points, crossings reduced by barycenter sweeps, then
//! coordinates: layers are columns (left to right), nodes within a layer are
//! pulled towards their neighbours' centre while keeping their order and a
//! minimum gap. Pure: a function of the graph, computed once per flow version
//! and cached by `LayoutCache`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Width and height of a drawn node box.
pub const NODE_W: f64 = 172.0;
pub const NODE_H: f64 = 44.0;
/// Horizontal distance between two layers' left edges.
const LAYER_GAP: f64 = NODE_W + 64.0;
/// Between layers drawn top to bottom (`Orient::Down`): room for an arrow and a
/// `when` line.
const LAYER_GAP_DOWN: f64 = NODE_H + 44.0;
/// Vertical gap between two boxes of a layer, and for a dummy point.
const NODE_GAP: f64 = 18.0;
const DUMMY_SPAN: f64 = 14.0;
const MARGIN: f64 = 16.0;
/// Barycenter sweeps (each one down and one up).
const SWEEPS: usize = 4;

/// The graph to lay out: `n` nodes, edges `(from, to)` by index.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub n: usize,
    pub edges: Vec<(usize, usize)>,
}

/// Where everything goes. `x`/`y` are a node box's top-left corner.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub layer: Vec<usize>,
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    /// Per input edge: the points it passes through, from the right side of its
    /// source box to the left side of its target box.
    pub routes: Vec<Vec<(f64, f64)>>,
    pub width: f64,
    pub height: f64,
    pub layers: usize,
}

/// Which way the layers go: left to right (wide screens) or top to bottom
/// (phones, where a wide graph would be shrunk past reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Orient {
    Across,
    Down,
}

impl Orient {
    /// A box's extent within its layer.
    fn breadth(self) -> f64 {
        match self {
            Orient::Across => NODE_H,
            Orient::Down => NODE_W,
        }
    }

    /// From one layer's start to the next's.
    fn layer_gap(self) -> f64 {
        match self {
            Orient::Across => LAYER_GAP,
            Orient::Down => LAYER_GAP_DOWN,
        }
    }
}

/// A vertex of the layered graph: a real node or a dummy point of a long edge.
#[derive(Debug, Clone, Copy)]
struct Vertex {
    layer: usize,
    real: bool,
}

/// Lays out `graph`. Edges must go forward in some topological order (a DAG);
/// an edge closing a cycle is ignored rather than looping.
pub fn layout(graph: &Graph) -> Layout {
    layout_oriented(graph, Orient::Across)
}

/// Lays out `graph` with its layers going `orient`.
pub fn layout_oriented(graph: &Graph, orient: Orient) -> Layout {
    let layer = longest_path_layers(graph);
    let layers = layer.iter().copied().max().map_or(0, |m| m + 1);
    let mut vertices: Vec<Vertex> = layer.iter().map(|&l| Vertex { layer: l, real: true }).collect();
    // Segments between consecutive layers; each input edge becomes a chain.
    let mut chains: Vec<Vec<usize>> = Vec::with_capacity(graph.edges.len());
    let mut up: Vec<Vec<usize>> = vec![Vec::new(); graph.n];
    let mut down: Vec<Vec<usize>> = vec![Vec::new(); graph.n];
    for &(from, to) in &graph.edges {
        if from >= graph.n || to >= graph.n || layer[from] >= layer[to] {
            chains.push(Vec::new());
            continue;
        }
        let mut chain = vec![from];
        for l in layer[from] + 1..layer[to] {
            vertices.push(Vertex { layer: l, real: false });
            up.push(Vec::new());
            down.push(Vec::new());
            chain.push(vertices.len() - 1);
        }
        chain.push(to);
        for pair in chain.windows(2) {
            down[pair[0]].push(pair[1]);
            up[pair[1]].push(pair[0]);
        }
        chains.push(chain);
    }
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for (v, vertex) in vertices.iter().enumerate() {
        order[vertex.layer].push(v);
    }
    let mut pos = vec![0usize; vertices.len()];
    reindex(&order, &mut pos);
    for _ in 0..SWEEPS {
        for layer in order.iter_mut().skip(1) {
            sort_by_barycenter(layer, &up, &pos);
            reindex_layer(layer, &mut pos);
        }
        for l in (0..layers.saturating_sub(1)).rev() {
            sort_by_barycenter(&mut order[l], &down, &pos);
            reindex_layer(&order[l], &mut pos);
        }
    }
    let breadth = orient.breadth();
    let ys = assign_y(&vertices, &order, &up, &down, breadth);
    let min_top =
        ys.iter().zip(&vertices).map(|(y, v)| y - span(*v, breadth) / 2.0).fold(f64::INFINITY, f64::min);
    let shift = if min_top.is_finite() { MARGIN - min_top } else { 0.0 };
    let center = |v: usize| ys[v] + shift;
    let gap = orient.layer_gap();
    // Each box: its layer's start along the flow, its centre across it.
    let mut x = Vec::with_capacity(graph.n);
    let mut y = Vec::with_capacity(graph.n);
    for (v, &l) in layer.iter().enumerate() {
        let along = MARGIN + l as f64 * gap;
        match orient {
            Orient::Across => (x.push(along), y.push(center(v) - NODE_H / 2.0)),
            Orient::Down => (x.push(center(v) - NODE_W / 2.0), y.push(along)),
        };
    }
    let depth = match orient {
        Orient::Across => NODE_W,
        Orient::Down => NODE_H,
    };
    let routes = chains
        .iter()
        .map(|chain| {
            let mut points = Vec::with_capacity(chain.len());
            for (i, &v) in chain.iter().enumerate() {
                let start = MARGIN + vertices[v].layer as f64 * gap;
                let along = if i == 0 {
                    start + depth
                } else if i + 1 == chain.len() {
                    start
                } else {
                    start + depth / 2.0
                };
                points.push(match orient {
                    Orient::Across => (along, center(v)),
                    Orient::Down => (center(v), along),
                });
            }
            points
        })
        .collect();
    let across = (0..vertices.len()).map(|v| center(v) + breadth / 2.0).fold(0.0, f64::max) + MARGIN;
    let along = if layers == 0 { 2.0 * MARGIN } else { 2.0 * MARGIN + (layers - 1) as f64 * gap + depth };
    let (width, height) = match orient {
        Orient::Across => (along, across),
        Orient::Down => (across, along),
    };
    Layout { layer, x, y, routes, width, height, layers }
}

/// Layer of each node: 0 for a source, else one more than its deepest upstream.
fn longest_path_layers(graph: &Graph) -> Vec<usize> {
    let mut indegree = vec![0usize; graph.n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); graph.n];
    for &(from, to) in &graph.edges {
        if from < graph.n && to < graph.n && from != to {
            out[from].push(to);
            indegree[to] += 1;
        }
    }
    let mut layer = vec![0usize; graph.n];
    let mut ready: Vec<usize> = (0..graph.n).filter(|&v| indegree[v] == 0).collect();
    while let Some(v) = ready.pop() {
        for &w in &out[v] {
            layer[w] = layer[w].max(layer[v] + 1);
            indegree[w] -= 1;
            if indegree[w] == 0 {
                ready.push(w);
            }
        }
    }
    layer
}

fn reindex(order: &[Vec<usize>], pos: &mut [usize]) {
    for layer in order {
        reindex_layer(layer, pos);
    }
}

fn reindex_layer(layer: &[usize], pos: &mut [usize]) {
    for (i, &v) in layer.iter().enumerate() {
        pos[v] = i;
    }
}

/// Orders a layer by the mean position of each vertex's neighbours in the fixed
/// layer; a vertex without neighbours keeps its place.
fn sort_by_barycenter(layer: &mut [usize], neighbours: &[Vec<usize>], pos: &[usize]) {
    let key = |v: usize| -> f64 {
        let ns = &neighbours[v];
        if ns.is_empty() {
            pos[v] as f64
        } else {
            ns.iter().map(|&u| pos[u] as f64).sum::<f64>() / ns.len() as f64
        }
    };
    let mut keyed: Vec<(f64, usize, usize)> = layer.iter().map(|&v| (key(v), pos[v], v)).collect();
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for (slot, (_, _, v)) in layer.iter_mut().zip(keyed) {
        *slot = v;
    }
}

/// A vertex's extent within its layer: a box's `breadth`, or a long edge's bend.
fn span(vertex: Vertex, breadth: f64) -> f64 {
    if vertex.real { breadth } else { DUMMY_SPAN }
}

/// Vertical centres: stacked in order, then a few passes pull each layer towards
/// its neighbours' mean centre, keeping order and gaps.
fn assign_y(
    vertices: &[Vertex],
    order: &[Vec<usize>],
    up: &[Vec<usize>],
    down: &[Vec<usize>],
    breadth: f64,
) -> Vec<f64> {
    let mut y = vec![0.0; vertices.len()];
    for layer in order {
        let mut at = 0.0;
        for &v in layer {
            y[v] = at + span(vertices[v], breadth) / 2.0;
            at += span(vertices[v], breadth) + NODE_GAP;
        }
    }
    for pass in 0..SWEEPS {
        let downwards = pass % 2 == 0;
        let layers: Vec<usize> = if downwards {
            (1..order.len()).collect()
        } else {
            (0..order.len().saturating_sub(1)).rev().collect()
        };
        for l in layers {
            let neighbours = if downwards { up } else { down };
            place_layer(&order[l], vertices, neighbours, &mut y, breadth);
        }
    }
    y
}

fn place_layer(layer: &[usize], vertices: &[Vertex], neighbours: &[Vec<usize>], y: &mut [f64], breadth: f64) {
    if layer.is_empty() {
        return;
    }
    let desired: Vec<f64> = layer
        .iter()
        .map(|&v| {
            let ns = &neighbours[v];
            if ns.is_empty() { y[v] } else { ns.iter().map(|&u| y[u]).sum::<f64>() / ns.len() as f64 }
        })
        .collect();
    let gap = |a: usize, b: usize| (span(vertices[a], breadth) + span(vertices[b], breadth)) / 2.0 + NODE_GAP;
    // Forward: no box above its wish unless pushed down by the one before it.
    let mut placed = desired.clone();
    for i in 1..layer.len() {
        placed[i] = placed[i].max(placed[i - 1] + gap(layer[i - 1], layer[i]));
    }
    // Shift the whole layer up by the mean overshoot, then re-check the gaps upwards.
    let overshoot = placed.iter().zip(&desired).map(|(p, d)| p - d).sum::<f64>() / layer.len() as f64;
    for p in &mut placed {
        *p -= overshoot / 2.0;
    }
    for i in 1..layer.len() {
        placed[i] = placed[i].max(placed[i - 1] + gap(layer[i - 1], layer[i]));
    }
    for (&v, p) in layer.iter().zip(placed) {
        y[v] = p;
    }
}

/// Layouts by key (flow, version, and the focus of a partial view), computed once.
#[derive(Default)]
pub struct LayoutCache {
    entries: Mutex<HashMap<String, Arc<Layout>>>,
}

/// Entries kept before the cache starts over (flow versions change rarely).
const CACHE_MAX: usize = 512;

impl LayoutCache {
    /// The cached layout for `key`, or `compute()`'s, stored.
    pub fn get_or(&self, key: &str, compute: impl FnOnce() -> Layout) -> Arc<Layout> {
        self.get_timed(key, compute).0
    }

    /// As `get_or`, with how long the layout took when it was computed now.
    pub fn get_timed(
        &self,
        key: &str,
        compute: impl FnOnce() -> Layout,
    ) -> (Arc<Layout>, Option<std::time::Duration>) {
        if let Some(hit) = self.lock().get(key) {
            return (hit.clone(), None);
        }
        let started = std::time::Instant::now();
        let made = Arc::new(compute());
        let took = started.elapsed();
        let mut entries = self.lock();
        if entries.len() >= CACHE_MAX {
            entries.clear();
        }
        (entries.entry(key.to_string()).or_insert(made).clone(), Some(took))
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Layout>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests;
