//! `run: {xxl: …}`: defaults, XXL-JOB's names accepted beside ours, and refusals
//! (GLUE, unknown route or block, missing app/handler) as `FILE:LINE` errors.

use std::time::Duration;

use super::{errors, parse};
use crate::model::{ExecutorDef, NodeAction, XxlBlock, XxlDef, XxlRoute};

fn xxl_of(source: &str) -> XxlDef {
    match &parse(source).nodes[0].action {
        NodeAction::Run(ExecutorDef::Xxl(def)) => def.clone(),
        other => panic!("not an xxl node: {other:?}"),
    }
}

#[test]
fn xxl_defaults_and_names() {
    let def = xxl_of("flow: f\nnodes:\n  a: {run: {xxl: {app: orders, handler: settle}}}\n");
    assert_eq!(
        (def.route, def.block, def.timeout, def.grace),
        (XxlRoute::First, XxlBlock::Serial, None, XxlDef::DEFAULT_GRACE)
    );
    assert_eq!(def.params, "");
    let def = xxl_of(
        "flow: f\nnodes:\n  a: {run: {xxl: {app: orders, handler: settle, route: SHARDING_BROADCAST, block: cover_early, \
         timeout: 90s, grace: 5s, params: \"d=${params.day}\", glue_type: BEAN}}}\n",
    );
    assert_eq!((def.route, def.block), (XxlRoute::ShardingBroadcast, XxlBlock::CoverEarly));
    assert_eq!((def.timeout, def.grace), (Some(Duration::from_secs(90)), Duration::from_secs(5)));
    assert_eq!(def.params, "d=${params.day}");
}

#[test]
fn xxl_refusals_name_the_line_and_the_fix() {
    let e =
        errors("flow: f\nnodes:\n  a:\n    run: {xxl: {app: orders, handler: s, glue_type: GLUE_SHELL}}\n");
    assert!(
        e.iter().any(|e| e.starts_with("flow.yaml:4") && e.contains("GLUE") && e.contains("BEAN")),
        "{e:?}"
    );
    let e = errors("flow: f\nnodes:\n  a:\n    run: {xxl: {app: orders, handler: s, route: roundd}}\n");
    assert!(e.iter().any(|e| e.contains("unknown xxl route `roundd`") && e.contains("round")), "{e:?}");
    let e = errors("flow: f\nnodes:\n  a:\n    run: {xxl: {app: orders, handler: s, block: queue}}\n");
    assert!(e.iter().any(|e| e.contains("unknown xxl block `queue`")), "{e:?}");
    let e = errors("flow: f\nnodes:\n  a:\n    run: {xxl: {app: orders}}\n");
    assert!(e.iter().any(|e| e.contains("`xxl` needs `handler`")), "{e:?}");
    let e = errors("flow: f\nnodes:\n  a:\n    run: {xxl: {app: orders, handler: s}, builtin: noop}\n");
    assert!(e.iter().any(|e| e.contains("exactly one of")), "{e:?}");
}
