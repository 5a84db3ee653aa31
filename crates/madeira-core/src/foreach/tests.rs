use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Map, Value as Json, json};

use super::*;

fn out(i: usize) -> Map<String, Json> {
    Map::from_iter([("i".to_string(), json!(i))])
}

proptest! {
    /// Whatever order items end in, no more than `max_parallel` run at once,
    /// every item not kept starts exactly once, and the results are in item order.
    #[test]
    fn fanout_bounds_parallelism_and_keeps_item_order(
        total in 0usize..40,
        max_parallel in 1u32..6,
        kept in proptest::collection::btree_set(0usize..40, 0..10),
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..80),
    ) {
        let done: BTreeMap<usize, Map<String, Json>> = kept.iter().map(|&i| (i, out(i))).collect();
        let mut fan = Fanout::new(total, max_parallel, done);
        let mut started = Vec::new();
        let mut running: Vec<usize> = Vec::new();
        let mut picks = picks.into_iter();
        loop {
            while let Some(i) = fan.start_next() {
                started.push(i);
                running.push(i);
            }
            prop_assert!(running.len() <= max_parallel as usize);
            prop_assert_eq!(fan.running(), running.len());
            if running.is_empty() {
                break;
            }
            let at = picks.next().map_or(0, |p| p.index(running.len()));
            let i = running.remove(at);
            fan.succeeded(i, out(i));
        }
        prop_assert!(fan.is_done());
        let expected: Vec<usize> = (0..total).filter(|i| !kept.contains(i)).collect();
        prop_assert_eq!(&started, &expected, "started in index order, each once, kept ones skipped");
        let result = fan.result().expect("all succeeded");
        let items: Vec<Json> = (0..total).map(|i| json!({"i": i})).collect();
        prop_assert_eq!(result.get("items"), Some(&Json::Array(items)));
    }
}

#[test]
fn failures_name_each_item_and_are_retryable_only_if_all_are() {
    let mut fan = Fanout::new(3, 3, BTreeMap::new());
    let started: Vec<usize> = std::iter::from_fn(|| fan.start_next()).collect();
    assert_eq!(started, [0, 1, 2]);
    fan.failed(2, "boom".into(), true);
    fan.succeeded(0, out(0));
    fan.failed(1, "exit 3".into(), false);
    assert!(fan.is_done());
    assert_eq!(fan.result(), Err(("2 of 3 items failed: item 1: exit 3; item 2: boom".into(), false)));
}

#[test]
fn items_come_from_cel_and_are_bounded() {
    let def = ForeachDef {
        items: ForeachItems::Expr(crate::keyexpr::ValueExpr::compile("nodes.list.outputs.ids").expect("cel")),
        max_parallel: 2,
    };
    let nodes = json!({"list": {"outputs": {"ids": ["m1", "m2"]}}});
    assert_eq!(def.items(&json!({}), &nodes, None), Ok(vec![json!("m1"), json!("m2")]));
    let not_list = json!({"list": {"outputs": {"ids": 7}}});
    assert_eq!(
        def.items(&json!({}), &not_list, None).expect_err("not a list").to_string(),
        "foreach `nodes.list.outputs.ids` gave a number (7), not a list; make it a list (e.g. an upstream's `outputs.ids`)"
    );
    let many = json!({"list": {"outputs": {"ids": vec![0; MAX_ITEMS + 1]}}});
    let err = def.items(&json!({}), &many, None).expect_err("too many");
    assert_eq!(err, ForeachError::TooMany { count: MAX_ITEMS + 1, bound: MAX_ITEMS });
    assert!(err.to_string().starts_with("foreach over 10001 items, more than the bound of 10000"), "{err}");
    assert_eq!(item_key("r:n:v1", 4), "r:n:v1:s4");
}
