//! Validation of sub-flow nodes (`run: {flow, params}`) and `foreach`/`max_parallel`.

use super::errors;
use crate::foreach::{ForeachItems, MAX_ITEMS};
use crate::model::{ExecutorDef, NodeAction};
use crate::spec::parse_flow;
use crate::subflow::SubflowParam;

#[test]
fn a_subflow_node_parses_its_flow_and_params() {
    let def = parse_flow(
        "p.yaml",
        "flow: parent\nnodes:\n  list: {run: {builtin: noop}}\n  child:\n    needs: [list]\n    run: {flow: settle-one, params: {day: \"biz_date\", n: 3, shop: \"'s1'\"}}\n",
    )
    .expect("valid");
    let NodeAction::Run(ExecutorDef::Subflow(sub)) = &def.nodes[1].action else { panic!("not a sub-flow") };
    assert_eq!((sub.flow.as_str(), sub.line), ("settle-one", Some(6)));
    let names: Vec<&str> = sub.params.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["day", "n", "shop"]);
    assert_eq!(sub.params[1].1, SubflowParam::Literal(serde_json::json!(3)));
}

#[test]
fn subflow_mistakes_are_named_with_their_line() {
    let got = errors("flow: f\nnodes:\n  a: {run: {flow: other, params: {x: \"shop\"}}}\n");
    assert_eq!(
        got,
        [
            "flow.yaml:3: node a: sub-flow param `x` reads `shop`; it can read `params`, `nodes.<id>` and `biz_date` \
             (quote a literal text as CEL: `\"'text'\"`)"
        ]
    );
    let got = errors("flow: f\nnodes:\n  a: {run: {builtin: noop, flow: other}}\n");
    assert!(
        got[0].contains("needs exactly one of") && got[0].contains("(has `builtin` and `flow`)"),
        "{got:?}"
    );
    let got = errors("flow: f\nnodes:\n  a: {run: {http: {url: \"http://x\"}, params: {a: 1}}}\n");
    assert!(got.iter().any(|e| e.contains("`params` only applies to a sub-flow")), "{got:?}");
    let got = errors(
        "flow: f\nnodes:\n  a:\n    manual: {prompt: ok?, fallback_after: 1m, fallback: {flow: other}}\n",
    );
    assert!(got.iter().any(|e| e.contains("a sub-flow cannot be a manual node's fallback")), "{got:?}");
}

#[test]
fn foreach_parses_cel_or_a_list_with_max_parallel() {
    let def = parse_flow(
        "f.yaml",
        "flow: f\nnodes:\n  list: {run: {builtin: noop}}\n  each:\n    needs: [list]\n    foreach: \"nodes.list.outputs.ids\"\n    max_parallel: 2\n    run: {sidecar: {group: g, job: j}}\n  lit:\n    foreach: [a, b]\n    run: {builtin: noop}\n",
    )
    .expect("valid");
    let each = def.nodes[1].foreach.as_ref().expect("foreach");
    assert_eq!(each.max_parallel, 2);
    assert!(matches!(&each.items, ForeachItems::Expr(e) if e.source() == "nodes.list.outputs.ids"));
    let lit = def.nodes[2].foreach.as_ref().expect("foreach");
    assert_eq!(lit.items, ForeachItems::Literal(vec![serde_json::json!("a"), serde_json::json!("b")]));
    assert_eq!(lit.max_parallel, crate::foreach::DEFAULT_MAX_PARALLEL);
}

#[test]
fn foreach_mistakes_are_refused() {
    let cases = [
        (
            "  a: {run: {builtin: noop}, max_parallel: 2}\n",
            "flow.yaml:3: node a: `max_parallel` only applies with `foreach`",
        ),
        (
            "  a: {foreach: \"params.ids\", max_parallel: 0, run: {builtin: noop}}\n",
            "flow.yaml:3: node a: `max_parallel` must be at least 1, got 0",
        ),
        (
            "  a: {foreach: \"params.ids\", run: {sidecar: {group: g, job: j, shards: 3}}}\n",
            "flow.yaml:3: node a: `foreach` cannot be combined with `shards`",
        ),
        (
            "  a: {foreach: \"params.ids\", run: {sql: {datasource: d, statement: \"SELECT 1\"}}}\n",
            "flow.yaml:3: node a: `foreach` applies to `builtin`, `http` and `sidecar` nodes only",
        ),
        ("  a: {foreach: \"ids\", run: {builtin: noop}}\n", "flow.yaml:3: node a: `foreach` reads `ids`"),
        (
            "  a: {foreach: \"params.(\", run: {builtin: noop}}\n",
            "flow.yaml:3: node a: `foreach` is not valid CEL",
        ),
    ];
    for (node, want) in cases {
        let got = errors(&format!("flow: f\nnodes:\n{node}"));
        assert!(got.iter().any(|e| e.starts_with(want)), "want {want:?} in {got:#?}");
    }
    let big: Vec<String> = (0..=MAX_ITEMS).map(|i| i.to_string()).collect();
    let got = errors(&format!(
        "flow: f\nnodes:\n  a:\n    foreach: [{}]\n    run: {{builtin: noop}}\n",
        big.join(", ")
    ));
    assert_eq!(
        got,
        ["flow.yaml:4: node a: `foreach` lists 10001 items, more than the bound of 10000; split the list"]
    );
}
