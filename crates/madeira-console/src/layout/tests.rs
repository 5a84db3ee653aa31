//! Layout properties: boxes never overlap, every edge goes from a lower layer to a
//! higher one, routes start and end at their boxes, the cache computes once.

use std::time::Instant;

use proptest::prelude::*;

use super::*;

/// A random DAG: edges only from a lower index to a higher one.
fn dag() -> impl Strategy<Value = Graph> {
    (1usize..60).prop_flat_map(|n| {
        proptest::collection::vec((0..n, 0..n), 0..n * 3).prop_map(move |pairs| {
            let mut edges: Vec<(usize, usize)> =
                pairs.into_iter().filter(|(a, b)| a != b).map(|(a, b)| (a.min(b), a.max(b))).collect();
            edges.sort_unstable();
            edges.dedup();
            Graph { n, edges }
        })
    })
}

fn assert_no_overlap(graph: &Graph, l: &Layout) {
    for a in 0..graph.n {
        for b in a + 1..graph.n {
            let apart_x = l.x[a] + NODE_W <= l.x[b] || l.x[b] + NODE_W <= l.x[a];
            let apart_y = l.y[a] + NODE_H <= l.y[b] || l.y[b] + NODE_H <= l.y[a];
            assert!(
                apart_x || apart_y,
                "nodes {a} and {b} overlap: {:?} {:?}",
                (l.x[a], l.y[a]),
                (l.x[b], l.y[b])
            );
        }
    }
}

proptest! {
    #[test]
    fn boxes_never_overlap_and_edges_go_down_the_layers(graph in dag()) {
        let l = layout(&graph);
        assert_no_overlap(&graph, &l);
        for (i, &(from, to)) in graph.edges.iter().enumerate() {
            prop_assert!(l.layer[from] < l.layer[to], "edge {from}->{to} goes from layer {} to {}", l.layer[from], l.layer[to]);
            let route = &l.routes[i];
            prop_assert_eq!(route.len(), l.layer[to] - l.layer[from] + 1, "one point per layer crossed");
            prop_assert!(route.windows(2).all(|w| w[0].0 < w[1].0), "routes run left to right");
            prop_assert_eq!(route[0].0, l.x[from] + NODE_W);
            prop_assert_eq!(route[route.len() - 1].0, l.x[to]);
        }
        for v in 0..graph.n {
            prop_assert!(l.x[v] >= 0.0 && l.y[v] >= 0.0);
            prop_assert!(l.x[v] + NODE_W <= l.width && l.y[v] + NODE_H <= l.height, "node {} inside the canvas", v);
        }
    }
}

proptest! {
    #[test]
    fn top_to_bottom_boxes_never_overlap_and_edges_run_downwards(graph in dag()) {
        let l = layout_oriented(&graph, Orient::Down);
        assert_no_overlap(&graph, &l);
        for (i, &(from, to)) in graph.edges.iter().enumerate() {
            let route = &l.routes[i];
            prop_assert_eq!(route.len(), l.layer[to] - l.layer[from] + 1, "one point per layer crossed");
            prop_assert!(route.windows(2).all(|w| w[0].1 < w[1].1), "routes run top to bottom");
            prop_assert_eq!(route[0].1, l.y[from] + NODE_H);
            prop_assert_eq!(route[route.len() - 1].1, l.y[to]);
        }
        for v in 0..graph.n {
            prop_assert!(l.x[v] >= 0.0 && l.y[v] >= 0.0);
            prop_assert!(l.x[v] + NODE_W <= l.width && l.y[v] + NODE_H <= l.height, "node {} inside the canvas", v);
        }
    }
}

#[test]
fn a_chain_drawn_down_is_one_box_wide() {
    // What a phone shows: a 10-node chain is as wide as one box, not ten.
    let g = Graph { n: 10, edges: (0..9).map(|i| (i, i + 1)).collect() };
    let l = layout_oriented(&g, Orient::Down);
    assert!(l.width <= NODE_W + 40.0, "width {}", l.width);
    assert!(l.height > 9.0 * NODE_H, "height {}", l.height);
}

#[test]
fn longest_path_puts_a_node_after_its_deepest_upstream() {
    // a -> b -> c, a -> c: c sits in layer 2, not 1.
    let g = Graph { n: 3, edges: vec![(0, 1), (1, 2), (0, 2)] };
    let l = layout(&g);
    assert_eq!(l.layer, vec![0, 1, 2]);
    assert_eq!(l.routes[2].len(), 3, "the long edge passes a dummy point in layer 1");
}

#[test]
fn barycenter_untangles_a_crossed_pair() {
    // Sources 0,1 and sinks 2,3 wired crosswise in input order: 0->3, 1->2.
    let g = Graph { n: 4, edges: vec![(0, 3), (1, 2)] };
    let l = layout(&g);
    let (a, b) = (&l.routes[0], &l.routes[1]);
    let crossed = (a[0].1 - b[0].1) * (a[1].1 - b[1].1) < 0.0;
    assert!(!crossed, "edges cross after crossing reduction: {a:?} {b:?}");
}

#[test]
fn a_cycle_edge_is_ignored_not_looped() {
    // Flows are validated acyclic; a cycle anyway must not hang or panic.
    let g = Graph { n: 3, edges: vec![(0, 1), (1, 0), (0, 2), (9, 1)] };
    let l = layout(&g);
    assert_eq!(l.layer, vec![0, 0, 0], "nodes a cycle blocks stay in the first layer");
    assert!(l.routes.iter().all(Vec::is_empty), "no edge is drawn backwards");
    assert_no_overlap(&g, &l);
}

/// A 1,000-node flow of 20 layers with two upstreams per node.
pub(crate) fn thousand() -> Graph {
    let n = 1000;
    let mut edges = Vec::new();
    for v in 50..n {
        let layer_start = (v / 50) * 50;
        edges.push((layer_start - 50 + v % 50, v));
        edges.push((layer_start - 50 + (v * 7) % 50, v));
    }
    edges.sort_unstable();
    edges.dedup();
    Graph { n, edges }
}

#[test]
fn a_thousand_nodes_lay_out_in_time_and_are_cached() {
    let g = thousand();
    let cache = LayoutCache::default();
    let started = Instant::now();
    let first = cache.get_or("big:1", || layout(&g));
    let took = started.elapsed();
    assert_no_overlap(&g, &first);
    let started = Instant::now();
    let again = cache.get_or("big:1", || panic!("computed twice"));
    assert!(Arc::ptr_eq(&first, &again));
    assert!(started.elapsed() < took, "a cache hit is cheaper than a layout");
    // Debug builds are slow; the release figure is in the report.
    assert!(took.as_secs() < 10, "1,000 nodes took {took:?}");
}
