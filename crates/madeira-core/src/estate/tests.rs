//! Tests of the estate: parsing of `after`/`after_policy`/`flow_succeeded` with
//! their errors, cycle detection printed with files and lines, date resolution, and
//! property tests of cycle detection and backfill ordering over random estates.

use chrono::NaiveDate;
use proptest::prelude::*;

use super::*;
use crate::model::{AfterDef, AfterThen};
use crate::spec::parse_flow;

fn flow_yaml(name: &str, extra: &str) -> String {
    format!("flow: {name}\n{extra}nodes:\n  publish: {{run: {{builtin: noop}}}}\n")
}

fn parsed(file: &str, source: &str) -> EstateFlow {
    match parse_flow(file, source) {
        Ok(def) => EstateFlow::from_def(file, &def),
        Err(e) => panic!("expected a valid flow, got:\n{e}"),
    }
}

fn errors(source: &str) -> Vec<String> {
    match parse_flow("f.yaml", source) {
        Ok(_) => panic!("expected errors"),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

fn day(s: &str) -> NaiveDate {
    parse_date(s).expect("date")
}

#[test]
fn after_and_policy_are_parsed_with_lines() {
    let src = flow_yaml(
        "warehouse",
        "after:\n  - {flow: payments-pull, date: same}\n  - {flow: fx-rates, node: publish, date: -1, calendar: cn-workdays}\nafter_policy: {wait: 4h, then: skip}\ntriggers:\n  - flow_succeeded: payments-pull\n",
    );
    let def = parse_flow("w.yaml", &src).expect("valid");
    assert_eq!(
        def.after,
        vec![
            AfterDef { flow: "payments-pull".into(), node: None, offset: 0, calendar: None, line: Some(3) },
            AfterDef {
                flow: "fx-rates".into(),
                node: Some("publish".into()),
                offset: -1,
                calendar: Some("cn-workdays".into()),
                line: Some(4)
            },
        ]
    );
    assert_eq!(def.after_policy.wait, Some(std::time::Duration::from_secs(4 * 3600)));
    assert_eq!(def.after_policy.then, AfterThen::Skip);
    assert!(
        matches!(&def.triggers[..], [crate::TriggerDef::FlowSucceeded { flow, line: Some(7) }] if flow == "payments-pull")
    );
}

#[test]
fn bad_after_entries_name_their_line_and_fix() {
    let src = flow_yaml(
        "w",
        "after:\n  - {node: x}\n  - {flow: a, date: +2}\n  - {flow: a, date: yesterday}\n  - {flow: w}\nafter_policy: {wait: 4h, then: retry}\n",
    );
    let errs = errors(&src);
    assert!(errs.iter().any(|e| e.starts_with("f.yaml:3: an `after` entry needs `flow`")), "{errs:?}");
    assert!(errs.iter().any(|e| e.starts_with("f.yaml:4: `after.date` 2 is in the future")), "{errs:?}");
    assert!(errs.iter().any(|e| e.starts_with("f.yaml:5: bad `after.date` `yesterday`")), "{errs:?}");
    assert!(errs.iter().any(|e| e.starts_with("f.yaml:6: flow `w` cannot wait for itself")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("unknown `after_policy.then` `retry`")), "{errs:?}");
}

#[test]
fn flow_succeeded_takes_no_other_field() {
    let errs = errors(&flow_yaml("w", "triggers:\n  - {flow_succeeded: a, cron: \"5 1 * * *\"}\n"));
    assert!(
        errs.iter().any(|e| e.contains("`flow_succeeded` trigger takes no other field (`cron`)")),
        "{errs:?}"
    );
}

#[test]
fn a_cycle_is_printed_with_files_and_lines() {
    let a = parsed("a.yaml", &flow_yaml("a", "after:\n  - {flow: c}\n"));
    let b = parsed("b.yaml", &flow_yaml("b", "after:\n  - {flow: a}\n"));
    let c = parsed("c.yaml", &flow_yaml("c", "triggers:\n  - flow_succeeded: b\n"));
    let estate = Estate::new([a, b, c]);
    let errs = estate.check_flow("b");
    let [EstateError::Cycle(steps)] = &errs[..] else { panic!("expected one cycle, got {errs:?}") };
    assert_eq!(steps.len(), 3);
    let text = errs[0].to_string();
    assert!(
        text.contains("b (b.yaml:3 waits for a) → a (a.yaml:3 waits for c) → c (c.yaml:3 waits for b) → b"),
        "{text}"
    );
}

#[test]
fn an_earlier_date_breaks_a_cycle() {
    let a = parsed("a.yaml", &flow_yaml("a", "after:\n  - {flow: b, date: -1}\n"));
    let b = parsed("b.yaml", &flow_yaml("b", "after:\n  - {flow: a}\n"));
    assert!(Estate::new([a, b]).check().is_empty());
}

#[test]
fn unknown_flows_and_nodes_are_named_with_a_suggestion() {
    let a = parsed("a.yaml", &flow_yaml("payments-pull", ""));
    let b = parsed(
        "b.yaml",
        &flow_yaml("b", "after:\n  - {flow: payment-pull}\n  - {flow: payments-pull, node: publsh}\n"),
    );
    let errs: Vec<String> = Estate::new([a, b]).check_flow("b").iter().map(ToString::to_string).collect();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].starts_with("b.yaml:3: flow b: `after` names flow `payment-pull`, which does not exist; did you mean `payments-pull`?"), "{errs:?}");
    assert!(
        errs[1].contains(
            "node `publsh` of flow `payments-pull`, which has no such node; did you mean `publish`?"
        ),
        "{errs:?}"
    );
}

#[test]
fn requirements_shift_by_offset_and_refuse_unknown_calendars() {
    let b =
        parsed("b.yaml", &flow_yaml("b", "after:\n  - {flow: a}\n  - {flow: x, node: publish, date: -3}\n"));
    let reqs = requirements(&b, day("2026-03-02"), &CalendarDays).expect("resolved");
    assert_eq!(reqs[0], Requirement { flow: "a".into(), node: None, date: day("2026-03-02") });
    assert_eq!(
        reqs[1],
        Requirement { flow: "x".into(), node: Some("publish".into()), date: day("2026-02-27") }
    );
    let c = parsed("c.yaml", &flow_yaml("c", "after:\n  - {flow: a, date: -1, calendar: cn-workdays}\n"));
    assert_eq!(
        requirements(&c, day("2026-03-02"), &CalendarDays),
        Err(DateError::UnknownCalendar { calendar: "cn-workdays".into() })
    );
}

/// Weekends off: a business-day calendar for tests.
struct Weekdays;

impl BusinessDays for Weekdays {
    fn shift(&self, calendar: Option<&str>, date: NaiveDate, offset: i32) -> Result<NaiveDate, DateError> {
        use chrono::Datelike;
        if calendar.is_none() {
            return plain_shift(date, offset);
        }
        let mut d = date;
        for _ in 0..offset.unsigned_abs() {
            d = d.pred_opt().ok_or(DateError::OutOfRange { date, offset })?;
            while d.weekday().number_from_monday() > 5 {
                d = d.pred_opt().ok_or(DateError::OutOfRange { date, offset })?;
            }
        }
        Ok(d)
    }
}

#[test]
fn business_day_offsets_skip_the_weekend() {
    let b = parsed("b.yaml", &flow_yaml("b", "after:\n  - {flow: a, date: -1, calendar: weekdays}\n"));
    let reqs = requirements(&b, day("2026-03-02"), &Weekdays).expect("resolved");
    assert_eq!(reqs[0].date, day("2026-02-27"), "Monday's previous business day is Friday");
}

#[test]
fn backfill_with_dependents_orders_each_date_upstream_first() {
    let a = parsed("a.yaml", &flow_yaml("a", ""));
    let b = parsed("b.yaml", &flow_yaml("b", "after:\n  - {flow: a}\n"));
    let c = parsed("c.yaml", &flow_yaml("c", "triggers:\n  - flow_succeeded: b\n"));
    let other = parsed("o.yaml", &flow_yaml("other", ""));
    let estate = Estate::new([c, b, a, other]);
    let dates = [day("2026-03-03"), day("2026-03-02")];
    let plan = backfill_order(&estate, "a", &dates, true, BackfillOrder::Desc, &CalendarDays).expect("plan");
    let got: Vec<String> = plan.steps.iter().map(|s| format!("{} {}", s.flow, s.date)).collect();
    assert_eq!(
        got,
        ["a 2026-03-03", "b 2026-03-03", "c 2026-03-03", "a 2026-03-02", "b 2026-03-02", "c 2026-03-02"]
    );
    assert_eq!(plan.waits[1], vec![0]);
    let alone = backfill_order(&estate, "b", &dates, false, BackfillOrder::Asc, &CalendarDays).expect("plan");
    assert_eq!(alone.steps.len(), 2);
    assert!(alone.waits.iter().all(Vec::is_empty), "a is not part of this backfill");
}

/// A random estate: flow `i` may wait for flows `< i` (any offset) and, for
/// `cyclic`, for any flow at the same date.
fn estate_strategy() -> impl Strategy<Value = Estate> {
    (2usize..7)
        .prop_flat_map(|n| {
            proptest::collection::vec((0..n, 0..n, -2i32..=0, 0u8..3), 0..12).prop_map(move |e| (n, e))
        })
        .prop_map(|(n, edges)| {
            let mut flows: Vec<EstateFlow> = (0..n)
                .map(|i| EstateFlow {
                    name: format!("f{i}"),
                    file: format!("f{i}.yaml"),
                    after: vec![],
                    node_after: vec![],
                    triggered_by: vec![],
                    nodes: vec!["n".into()],
                    subflows: vec![],
                })
                .collect();
            // Kind 0: the flow waits; 1: its node `n` waits (for node `n` upstream); 2: a trigger.
            for (k, (from, to, offset, kind)) in edges.into_iter().enumerate() {
                if from == to {
                    continue;
                }
                let line = Some(k + 1);
                let a = AfterDef { flow: format!("f{to}"), node: None, offset, calendar: None, line };
                match kind {
                    0 => flows[from].after.push(a),
                    1 => flows[from].node_after.push(("n".into(), AfterDef { node: Some("n".into()), ..a })),
                    _ => flows[from].triggered_by.push((format!("f{to}"), line)),
                }
            }
            Estate::new(flows)
        })
}

proptest! {
    /// A reported cycle is made of real same-date edges and closes on itself; no
    /// reported cycle means the estate's same-date order puts every upstream first.
    #[test]
    fn cycles_are_real_and_their_absence_means_an_order(estate in estate_strategy()) {
        match estate.cycle() {
            Some(steps) => {
                prop_assert!(!steps.is_empty());
                for (i, s) in steps.iter().enumerate() {
                    let next = &steps[(i + 1) % steps.len()];
                    prop_assert_eq!(&s.upstream, &next.flow);
                    let f = estate.get(&s.flow).expect("flow");
                    let same = f.all_after().any(|(_, a)| a.flow == s.upstream && a.offset == 0 && a.line == s.line)
                        || f.triggered_by.iter().any(|(u, l)| *u == s.upstream && *l == s.line);
                    prop_assert!(same, "step {s} is not a same-date edge");
                }
            }
            None => {
                let topo = estate.topo();
                let pos = |n: &str| topo.iter().position(|t| t == n).expect("in topo");
                for f in estate.flows() {
                    for (_, a) in f.all_after().filter(|(_, a)| a.offset == 0) {
                        prop_assert!(pos(&a.flow) < pos(&f.name));
                    }
                    for (u, _) in &f.triggered_by {
                        prop_assert!(pos(u) < pos(&f.name));
                    }
                }
            }
        }
    }

    /// Without a cycle a backfill runs every (flow, date) exactly once and never
    /// before an upstream pair of the backfill it waits for.
    #[test]
    fn backfill_runs_each_pair_once_upstream_first(
        estate in estate_strategy(),
        first in 0u32..40,
        count in 1usize..6,
        desc in any::<bool>(),
    ) {
        prop_assume!(estate.cycle().is_none());
        let start = day("2026-01-01") + chrono::Days::new(u64::from(first));
        let dates: Vec<NaiveDate> = (0..count).map(|i| start + chrono::Days::new(i as u64)).collect();
        let order = if desc { BackfillOrder::Desc } else { BackfillOrder::Asc };
        let plan = backfill_order(&estate, "f0", &dates, true, order, &CalendarDays).expect("plan");
        let flows = estate.with_dependents("f0");
        prop_assert_eq!(plan.steps.len(), flows.len() * count);
        let unique: std::collections::BTreeSet<_> = plan.steps.iter().collect();
        prop_assert_eq!(unique.len(), plan.steps.len());
        for (i, step) in plan.steps.iter().enumerate() {
            let f = estate.get(&step.flow).expect("flow");
            let nodes = node_requirements(f, step.date, &CalendarDays).expect("dates");
            for r in requirements(f, step.date, &CalendarDays).expect("dates").into_iter().chain(nodes.into_iter().map(|(_, r)| r)) {
                if let Some(j) = plan.steps.iter().position(|s| s.flow == r.flow && s.date == r.date) {
                    prop_assert!(j < i, "{} {} before its upstream {}", step.flow, step.date, r);
                    prop_assert!(plan.waits[i].contains(&j));
                }
            }
        }
    }
}

fn with_subflow(name: &str, child: &str) -> String {
    format!(
        "flow: {name}\nnodes:\n  start: {{run: {{builtin: noop}}}}\n  call:\n    needs: [start]\n    run: {{flow: {child}}}\n"
    )
}

#[test]
fn subflows_must_exist_and_must_not_run_back() {
    let a = parsed("a.yaml", &with_subflow("a", "b"));
    assert_eq!(a.subflows, [("b".to_string(), Some(6))]);
    let mut estate = Estate::new([a.clone()]);
    let errs: Vec<String> = estate.check_flow("a").iter().map(ToString::to_string).collect();
    assert_eq!(
        errs,
        ["a.yaml:6: flow a: `run.flow` names flow `b`, which does not exist; apply it first or fix the name"]
    );
    estate.insert(parsed("b.yaml", &with_subflow("b", "c")));
    estate.insert(parsed("c.yaml", &flow_yaml("c", "")));
    assert!(estate.check_flow("a").is_empty());
    assert_eq!(estate.topo(), ["c", "b", "a"], "children before the flows that run them");
    estate.insert(parsed("c.yaml", &with_subflow("c", "a")));
    let errs: Vec<String> = estate.check_flow("a").iter().map(ToString::to_string).collect();
    assert_eq!(
        errs,
        [
            "sub-flow cycle: a (a.yaml:6 runs b) → b (b.yaml:6 runs c) → c (c.yaml:6 runs a) → a; a flow cannot run \
          itself through its sub-flows: remove one of these `run: {flow: …}` nodes"
        ]
    );
    let own = parsed("s.yaml", &with_subflow("s", "s"));
    assert!(
        matches!(&Estate::new([own]).check()[..], [EstateError::SubflowCycle(steps)] if steps.len() == 1)
    );
    // Sub-flows are not waits: they take no part in the same-date cycle check.
    assert_eq!(estate.cycle(), None);
}

fn with_node_after(name: &str, entry: &str) -> String {
    format!(
        "flow: {name}\nnodes:\n  publish: {{run: {{builtin: noop}}}}\n  settle:\n    needs: [publish]\n    run: {{builtin: noop}}\n    after: [{entry}]\n"
    )
}

#[test]
fn a_nodes_after_is_parsed_by_the_flows_parser_and_is_an_edge_of_its_flow() {
    let b =
        parsed("b.yaml", &with_node_after("b", "{flow: a, node: publish, date: -1, calendar: cn-workdays}"));
    assert!(b.after.is_empty());
    let want = AfterDef {
        flow: "a".into(),
        node: Some("publish".into()),
        offset: -1,
        calendar: Some("cn-workdays".into()),
        line: Some(7),
    };
    assert_eq!(b.node_after, [("settle".to_string(), want)]);
    let reqs = node_requirements(&b, day("2026-03-03"), &CalendarDays);
    assert_eq!(reqs, Err(DateError::UnknownCalendar { calendar: "cn-workdays".into() }));
    let same = parsed("b.yaml", &with_node_after("b", "{flow: a, node: publish}"));
    let reqs = node_requirements(&same, day("2026-03-03"), &CalendarDays).expect("resolved");
    let up = Requirement { flow: "a".into(), node: Some("publish".into()), date: day("2026-03-03") };
    assert_eq!(reqs, [("settle".to_string(), up)]);
    assert!(requirements(&same, day("2026-03-03"), &CalendarDays).expect("none").is_empty());
    // Unknown upstream flow, and a cycle closed through the node's edge, both with file:line.
    let errs: Vec<String> =
        Estate::new([same.clone()]).check_flow("b").iter().map(ToString::to_string).collect();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("b.yaml:7: flow b: `after` names flow `a`, which does not exist"),
        "{errs:?}"
    );
    let a = parsed("a.yaml", &flow_yaml("a", "after:\n  - {flow: b}\n"));
    let estate = Estate::new([a.clone(), same.clone()]);
    let text: Vec<String> = estate.check_flow("b").iter().map(ToString::to_string).collect();
    assert!(text[0].contains("b (b.yaml:7 waits for a) → a (a.yaml:3 waits for b) → b"), "{text:?}");
    // Downstream, dependents and backfill order follow the node's edge.
    let a = parsed("a.yaml", &flow_yaml("a", ""));
    let estate = Estate::new([a, same]);
    assert_eq!(estate.dependents_of("a").into_iter().collect::<Vec<_>>(), ["b"]);
    assert_eq!(estate.topo(), ["a", "b"]);
    let dates = [day("2026-03-03"), day("2026-03-04")];
    let plan = backfill_order(&estate, "a", &dates, true, BackfillOrder::Desc, &CalendarDays).expect("plan");
    let steps: Vec<String> = plan.steps.iter().map(|s| format!("{} {}", s.flow, s.date)).collect();
    assert_eq!(steps, ["a 2026-03-04", "b 2026-03-04", "a 2026-03-03", "b 2026-03-03"]);
    assert_eq!(plan.waits[1], [0]);
}

#[test]
fn a_nodes_after_is_checked_like_the_flows_and_names_the_node() {
    let errs = errors(&with_node_after("b", "{flow: b}, {node: x}, {flow: a, date: 2}"));
    assert!(
        errs.iter().any(|e| e.contains("node settle") && e.contains("cannot wait for itself")),
        "{errs:?}"
    );
    assert!(errs.iter().any(|e| e.contains("an `after` entry needs `flow`")), "{errs:?}");
    assert!(errs.iter().any(|e| e.contains("`after.date` 2 is in the future")), "{errs:?}");
    // `after_policy` is accepted when only a node has `after`.
    let src =
        with_node_after("b", "{flow: a}").replace("nodes:", "after_policy: {wait: 1h, then: skip}\nnodes:");
    let def = parse_flow("b.yaml", &src).expect("valid");
    assert!(def.has_after());
    assert_eq!(def.after_policy.then, AfterThen::Skip);
}
