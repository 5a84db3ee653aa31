//! Tests of CEL conditions: values, errors and the evaluation budget (timed).

#![allow(
    clippy::disallowed_methods,
    reason = "these tests time the evaluation budget with the real clock; the code under test takes none"
)]
use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

#[test]
fn evaluates_over_params_and_nodes() {
    let c =
        Condition::compile("nodes.pull.outputs.refund_count > 0 && params.tenant == 't1'").expect("compiles");
    let nodes = json!({"pull": {"status": "SUCCESS", "outputs": {"refund_count": 3}}});
    assert_eq!(c.eval(&json!({"tenant": "t1"}), &nodes), Ok(true));
    assert_eq!(c.eval(&json!({"tenant": "t2"}), &nodes), Ok(false));
}

#[test]
fn non_boolean_is_an_error() {
    let c = Condition::compile("1 + 1").expect("compiles");
    assert!(c.eval(&json!({}), &json!({})).is_err());
}

#[test]
fn finds_node_references_outside_strings() {
    let c =
        Condition::compile("nodes.a.status == 'nodes.b' || nodes.c_1.outputs.x > 1 || has(nodes.d.outputs)")
            .expect("compiles");
    assert_eq!(c.referenced_nodes(), vec!["a".to_string(), "c_1".to_string(), "d".to_string()]);
    let c = Condition::compile("nodes['e'].status == 'SUCCESS'").expect("compiles");
    assert_eq!(c.referenced_nodes(), vec!["e".to_string()]);
}

#[test]
fn only_the_params_fields_read_are_bound() {
    let big: Vec<u32> = (0..50_000).collect();
    let params = json!({"tenant": "t1", "big": big, "missing_is_fine": null});
    let c = Condition::compile("params.tenant == 't1' && !has(params.nope) && params['tenant'] != ''")
        .expect("compiles");
    assert_eq!(c.program.outline.params_fields, vec!["tenant".to_string(), "nope".to_string()]);
    assert!(!c.program.outline.params_whole);
    let started = Instant::now();
    assert_eq!(c.eval(&params, &json!({})), Ok(true));
    assert!(started.elapsed() < Duration::from_millis(500), "took {:?}", started.elapsed());
    // A dynamic use binds the whole object: here too big to read.
    let whole = Condition::compile("size(params) == 3").expect("compiles");
    assert!(whole.program.outline.params_whole);
    assert!(whole.eval(&params, &json!({})).is_err());
    assert_eq!(whole.eval(&json!({"a": 1, "b": 2, "c": 3}), &json!({})), Ok(true));
    let c = Condition::compile("params.xs.exists(params, params > 1)").expect("compiles");
    assert_eq!(c.eval(&json!({"xs": [1, 2]}), &json!({})), Ok(true), "a rebound name is not params");
}

#[test]
fn reading_a_huge_payload_is_over_budget_before_it_is_converted() {
    let items: Vec<serde_json::Value> = (0..30_000).map(|i| json!({"sku": i})).collect();
    let params = json!({"items": items});
    let c = Condition::compile("size(params.items) > 0").expect("compiles");
    let started = Instant::now();
    assert!(c.eval(&params, &json!({})).expect_err("over budget").0.contains("JSON values read"));
    assert!(started.elapsed() < Duration::from_millis(500), "took {:?}", started.elapsed());
    let small = json!({"items": [{"sku": 1}]});
    assert_eq!(c.eval(&small, &json!({})), Ok(true));
}

#[test]
fn comprehension_variables_are_not_reads() {
    let c = Condition::compile("params.xs.exists(i, i > 1) && params.m.all(k, k != 'z') && i == 0")
        .expect("compiles");
    let mut vars = c.variables();
    vars.sort();
    // `i` is read once outside its comprehension, so it stays a free variable.
    assert_eq!(vars, vec!["i".to_string(), "params".to_string()]);
    let c = Condition::compile("params.xs.map(x, x * 2).filter(y, y > 2).size() > 0").expect("compiles");
    assert_eq!(c.variables(), vec!["params".to_string()]);
    assert_eq!(c.eval(&json!({"xs": [1, 2, 3]}), &json!({})), Ok(true));
}

#[test]
fn comprehensions_keep_their_meaning_under_the_budget() {
    let params = json!({"xs": [1, 2, 3, 4], "m": {"a": 1, "b": 2}});
    for (source, want) in [
        ("params.xs.exists(x, x == 3)", true),
        ("params.xs.all(x, x > 0)", true),
        ("params.xs.all(x, x > 1)", false),
        ("params.xs.exists_one(x, x > 3)", true),
        ("params.xs.map(x, x * 10) == [10, 20, 30, 40]", true),
        ("params.xs.filter(x, x % 2 == 0) == [2, 4]", true),
        ("params.xs.map(x, x > 2, x) == [3, 4]", true),
        ("params.m.exists(k, k == 'b')", true),
        ("params.xs.exists(x, params.xs.exists(y, x + y == 8))", true),
        // cel's error absorption: `1 / 0` errors, but a `true` elsewhere decides.
        ("params.xs.exists(x, 1 / (x - 1) > 5 || x == 4)", true),
    ] {
        let c = Condition::compile(source).expect(source);
        assert_eq!(c.eval(&params, &json!({})), Ok(want), "{source}");
    }
}

#[test]
fn parse_errors_name_the_column_without_parser_internals() {
    for (source, want) in [
        ("nodes.a.status ==", "at column 18: the expression ends too early"),
        ("params.a ? 1", "at column 13: the expression ends too early"),
        ("params[", "at column 8: the expression ends too early"),
        ("(params.a", "at column 10: missing ')' at the end"),
    ] {
        let e = Condition::compile(source).expect_err(source).0;
        assert_eq!(e, want, "{source}");
        for internal in ["Context", "OtherError", "ParseError", "expecting", "<input>", "|"] {
            assert!(!e.contains(internal), "{source}: {e}");
        }
    }
}

#[test]
fn size_and_nesting_are_limited_before_parsing() {
    let long = format!("params.x == '{}'", "a".repeat(MAX_SOURCE_BYTES));
    let e = Condition::compile(&long).expect_err("too long").0;
    assert!(e.contains("bytes long; the limit is 4096"), "{e}");
    let deep = format!("{}true{}", "(".repeat(40), ")".repeat(40));
    let e = Condition::compile(&deep).expect_err("too deep").0;
    assert!(e.contains("nests 40 levels deep; the limit is 32"), "{e}");
    let chain = format!("params.x == {}", vec!["1"; 50].join(" + "));
    let e = Condition::compile(&chain).expect_err("deep tree").0;
    assert!(e.contains("levels deep; the limit is 32"), "{e}");
    // Brackets inside strings do not count.
    assert!(Condition::compile(&format!("params.x == '{}'", "(".repeat(100))).is_ok());
}

#[test]
fn nested_comprehensions_over_a_big_list_stop_at_the_budget_quickly() {
    let xs: Vec<u32> = (0..300).collect();
    let params = json!({"xs": xs});
    let c = Condition::compile("params.xs.exists(i, params.xs.exists(j, params.xs.exists(k, false)))")
        .expect("compiles");
    let started = Instant::now();
    let e = c.eval(&params, &json!({})).expect_err("over budget").0;
    let took = started.elapsed();
    assert!(e.contains("over the evaluation budget"), "{e}");
    // 27 million steps unbounded; the budget allows about 5 thousand. Generous
    // for a debug build on a loaded machine.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    // A map built in the same way is stopped too, before it grows.
    let m = Condition::compile("size(params.xs.map(i, params.xs.map(j, params.xs.map(k, k)))) > 0")
        .expect("compiles");
    assert!(m.eval(&params, &json!({})).expect_err("over budget").0.contains("budget"));
    // Absorbing operators cannot hide it: the budget error wins.
    let hidden =
        Condition::compile("params.xs.exists(i, params.xs.exists(j, params.xs.exists(k, false))) || true")
            .expect("compiles");
    assert!(hidden.eval(&params, &json!({})).is_err());
}

#[test]
fn building_large_values_is_charged() {
    let big = "x".repeat(200_000);
    let params = json!({"s": big, "xs": (0..20).collect::<Vec<u32>>()});
    // 20 steps, each building a 400 KB string: 8 MB of values.
    let c = Condition::compile("params.xs.map(x, params.s + params.s).size() > 0").expect("compiles");
    assert!(c.eval(&params, &json!({})).expect_err("over budget").0.contains("budget"));
    // One concatenation is well within it.
    let one = Condition::compile("size(params.s + params.s) > 0").expect("compiles");
    assert_eq!(one.eval(&params, &json!({})), Ok(true));
}

#[test]
fn a_list_within_the_budget_is_fine() {
    let xs: Vec<u32> = (0..2_000).collect();
    let c = Condition::compile("params.xs.exists(x, x == 1999) && params.xs.map(x, x + 1).size() == 2000")
        .expect("compiles");
    assert_eq!(c.eval(&json!({"xs": xs}), &json!({})), Ok(true));
}

#[test]
fn a_constant_seven_level_map_is_refused_or_stopped() {
    let digits = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]";
    let mut body = "x0".to_string();
    for level in (0..7).rev() {
        body = format!("{digits}.map(x{level}, {body})");
    }
    let source = format!("size({body}) > 0");
    let started = Instant::now();
    match Condition::compile(&source) {
        Err(e) => assert!(e.0.contains("levels deep"), "{e}"),
        Ok(c) => assert!(c.eval(&json!({}), &json!({})).expect_err("over budget").0.contains("budget")),
    }
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
}

#[test]
fn whole_numbers_mix_with_int_literals_over_params_and_outputs() {
    let params = json!({"n": 4, "neg": -3, "big": u64::MAX, "ratio": 0.5});
    let nodes = json!({"pull": {"status": "SUCCESS", "outputs": {"rows": 10}}});
    for (source, expected) in [
        ("params.n + 1 == 5", true),
        ("params.n - 5 == -1", true),
        ("params.n * 3 == 12", true),
        ("params.n % 3 == 1", true),
        ("params.n / 2 == 2", true),
        ("params.n > 3 && params.n >= 4 && params.n < 5 && params.n <= 4 && params.n != 3", true),
        ("params.neg + params.n == 1", true),
        ("nodes.pull.outputs.rows % 2 == 0 && nodes.pull.outputs.rows - params.n == 6", true),
        ("nodes.pull.outputs.rows * 2 > 21", false),
        ("params.ratio * 2.0 == 1.0", true),
        ("params.big == 18446744073709551615u", true),
    ] {
        let c = Condition::compile(source).expect("compiles");
        assert_eq!(c.eval(&params, &nodes), Ok(expected), "{source}");
    }
}

#[test]
fn whole_numbers_mix_with_int_literals_in_message_payloads() {
    let none = json!({});
    let payload = json!({"count": 6, "amount": 250});
    for (source, expected) in [
        ("payload.count + 1 == 7", true),
        ("payload.count % 2 == 0", true),
        ("payload.amount - 50 > 199", true),
        ("payload.amount * 2 <= 499", false),
    ] {
        let when = MessageExpr::compile(source).expect("compiles");
        assert_eq!(when.eval_bool(&payload, &none, &none), Ok(expected), "{source}");
    }
    let key = MessageExpr::compile("payload.count * 10 + 1").expect("compiles");
    assert_eq!(key.eval(&payload, &none, &none), Ok(json!(61)));
}
