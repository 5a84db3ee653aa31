//! One test per class of mistake, asserting the printed `FILE:LINE: node X: message`
//! line (so line numbers are checked too), plus "all errors at once".

use super::errors;

/// Asserts that the errors are exactly `expected`, in order.
fn assert_errors(source: &str, expected: &[&str]) {
    let got = errors(source);
    assert_eq!(got, expected, "\nsource:\n{source}");
}

/// Asserts that one error equals `expected`.
fn assert_has(source: &str, expected: &str) {
    let got = errors(source);
    assert!(got.iter().any(|e| e == expected), "missing {expected:?} in {got:#?}");
}

/// Asserts that one error starts with `prefix` and contains `needle`.
fn assert_like(source: &str, prefix: &str, needle: &str) {
    let got = errors(source);
    assert!(
        got.iter().any(|e| e.starts_with(prefix) && e.contains(needle)),
        "no error starting {prefix:?} containing {needle:?} in {got:#?}"
    );
}

const NOOP: &str = "{run: {builtin: noop}}";

#[test]
fn missing_and_invalid_flow_name() {
    assert_errors(
        &format!("nodes:\n  a: {NOOP}\n"),
        &["flow.yaml:1: missing `flow`; name the flow at the top of the file, e.g. `flow: daily-settlement`"],
    );
    assert_errors(
        &format!("description: x\nflow: Daily_Settlement\nnodes:\n  a: {NOOP}\n"),
        &[
            "flow.yaml:2: flow name `Daily_Settlement` must be 1 to 63 characters of a-z, 0-9 and `-`; try `daily-settlement`",
        ],
    );
    let long = "a".repeat(64);
    assert_like(&format!("flow: {long}\nnodes:\n  a: {NOOP}\n"), "flow.yaml:1: flow name", "1 to 63");
}

#[test]
fn invalid_node_id_suggests_a_fix() {
    assert_errors(
        &format!("flow: f\nnodes:\n  ok: {NOOP}\n  Pull-Payments: {NOOP}\n"),
        &["flow.yaml:4: node Pull-Payments: node id `Pull-Payments` must start with a lowercase letter \
           and use only a-z, 0-9 and `_` (conditions read it as `nodes.pull_payments`); try `pull_payments`"],
    );
    assert_like(&format!("flow: f\nnodes:\n  1st: {NOOP}\n"), "flow.yaml:3: node 1st: ", "try `n_1st`");
}

#[test]
fn duplicate_node_ids_name_both_lines() {
    assert_errors(
        &format!("flow: f\nnodes:\n  a: {NOOP}\n  b: {NOOP}\n  a: {NOOP}\n"),
        &["flow.yaml:5: node a: duplicate node id `a` (first at line 3); rename one of them"],
    );
    assert_errors(
        &format!("flow: f\nflow: g\nnodes:\n  a: {NOOP}\n"),
        &["flow.yaml:2: duplicate key `flow` (first at line 1); keep only one"],
    );
    assert_errors(
        "flow: f\nnodes:\n  a:\n    run: {builtin: noop}\n    run: {builtin: noop}\n",
        &["flow.yaml:5: node a: duplicate key `run` (first at line 4); keep only one"],
    );
}

#[test]
fn unknown_needs_self_dependency_and_repeats() {
    assert_errors(
        &format!(
            "flow: f\nnodes:\n  pull_payments: {NOOP}\n  verify:\n    needs: [pul_payments]\n    run: {{builtin: noop}}\n"
        ),
        &["flow.yaml:5: node verify: needs unknown node `pul_payments`; did you mean `pull_payments`?"],
    );
    assert_errors(
        "flow: f\nnodes:\n  a:\n    needs:\n      - a\n    run: {builtin: noop}\n",
        &["flow.yaml:5: node a: needs itself; remove `a` from its `needs`"],
    );
    assert_like(
        &format!(
            "flow: f\nnodes:\n  a: {NOOP}\n  b: {{needs: [a, {{node: a, kind: weak}}], run: {{builtin: noop}}}}\n"
        ),
        "flow.yaml:4: node b: ",
        "lists `a` more than once",
    );
    assert_has(
        &format!(
            "flow: f\nnodes:\n  a: {NOOP}\n  b: {{needs: [{{node: a, kind: weakk}}], run: {{builtin: noop}}}}\n"
        ),
        "flow.yaml:4: node b: unknown dependency kind `weakk`; did you mean `weak`?; use `strong` or `weak`",
    );
}

#[test]
fn cycles_are_printed_as_a_path() {
    let source = "flow: f
nodes:
  alpha: {needs: [gamma], run: {builtin: noop}}
  beta: {needs: [alpha], run: {builtin: noop}}
  gamma: {needs: [beta], run: {builtin: noop}}
  after: {needs: [gamma], run: {builtin: noop}}
  x: {needs: [y], run: {builtin: noop}}
  y: {needs: [x], run: {builtin: noop}}
";
    assert_errors(
        source,
        &[
            "flow.yaml:3: node alpha: dependency cycle: alpha -> beta -> gamma -> alpha \
             (each node needs the one before it); remove one of these needs",
            "flow.yaml:7: node x: dependency cycle: x -> y -> x \
             (each node needs the one before it); remove one of these needs",
        ],
    );
}

#[test]
fn bad_durations() {
    assert_errors(
        "flow: f\nnodes:\n  a:\n    run: {builtin: noop}\n    timeout: 10 minutes please\n",
        &["flow.yaml:5: node a: `timeout`: bad duration `10 minutes please`: expected number at 11; \
           write it like `30s`, `5m` or `1h30m`"],
    );
    assert_like(
        "flow: f\ndefaults: {timeout: 0s}\nnodes:\n  a: {run: {builtin: noop}}\n",
        "flow.yaml:2: ",
        "`timeout` must be more than zero",
    );
    assert_like(
        "flow: f\nnodes:\n  a: {run: {builtin: noop}, retry: {backoff: 5}}\n",
        "flow.yaml:3: node a: `retry.backoff`: bad duration `5`",
        "write it like",
    );
}

#[test]
fn unknown_timezone_and_bad_cron() {
    let source = "flow: f
triggers:
  - cron: \"5 1 * *\"
    timezone: Asia/Shangai
  - cron: \"@fortnightly\"
  - cron: \"61 * * * *\"
  - cron: \"@daily\"
    timezone: europe/paris
nodes:
  a: {run: {builtin: noop}}
";
    let got = errors(source);
    assert_eq!(got.len(), 5, "{got:#?}");
    assert!(got[0].starts_with("flow.yaml:3: bad cron `5 1 * *`: 4 fields; write 5"), "{got:#?}");
    assert_eq!(
        got[1],
        "flow.yaml:4: unknown timezone `Asia/Shangai`; did you mean `Asia/Shanghai`?; \
         use an IANA name such as `Asia/Shanghai` or `UTC`"
    );
    assert!(got[2].starts_with("flow.yaml:5: unknown cron alias `@fortnightly`; use `@yearly`"), "{got:#?}");
    assert!(got[3].starts_with("flow.yaml:6: bad cron `61 * * * *`"), "{got:#?}");
    assert!(got[4].starts_with("flow.yaml:8: unknown timezone `europe/paris`; did you mean `Europe/Paris`?"));
}

#[test]
fn trigger_shape() {
    assert_like(
        "flow: f\ntriggers:\n  - {jitter: 1s}\nnodes:\n  a: {run: {builtin: noop}}\n",
        "flow.yaml:3: ",
        "needs `cron`",
    );
    assert_like(
        "flow: f\ntriggers:\n  - {event: e, timezone: UTC}\nnodes:\n  a: {run: {builtin: noop}}\n",
        "flow.yaml:3: `timezone` only apply to `cron` triggers",
        "",
    );
    assert_like(
        "flow: f\ntriggers:\n  - {cron: '@daily', misfire: run_one}\nnodes:\n  a: {run: {builtin: noop}}\n",
        "flow.yaml:3: unknown `misfire` `run_one`; did you mean `run_once`?",
        "",
    );
}

#[test]
fn cel_conditions() {
    let source = "flow: f
nodes:
  a: {run: {builtin: noop}}
  b: {run: {builtin: noop}}
  parse_err: {needs: [a], when: 'nodes.a.status ==', run: {builtin: noop}}
  bad_var: {needs: [a], when: 'foo.x > 1', run: {builtin: noop}}
  no_node: {needs: [a], when: 'nodes.aa.status == \"SUCCESS\"', run: {builtin: noop}}
  not_up: {needs: [a], when: 'nodes.b.outputs.n > 0', run: {builtin: noop}}
  own: {when: 'nodes.own.status == \"x\"', run: {builtin: noop}}
  fine: {needs: [not_up], when: 'nodes.a.outputs.n > 0 && params.x == 1', run: {builtin: noop}}
";
    let got = errors(source);
    assert_eq!(got.len(), 5, "{got:#?}");
    assert_eq!(
        got[0],
        "flow.yaml:5: node parse_err: `when` is not valid CEL: at column 18: the expression ends too early"
    );
    assert_eq!(
        got[1],
        "flow.yaml:6: node bad_var: `when` reads `foo`; a condition can only read `params`, `nodes.<id>` and `biz_date`"
    );
    assert_eq!(
        got[2],
        "flow.yaml:7: node no_node: `when` reads `nodes.aa`, but there is no node `aa`; did you mean `a`?"
    );
    assert_eq!(
        got[3],
        "flow.yaml:8: node not_up: `when` reads `nodes.b`, but `b` is not upstream of `not_up`, so its \
         outputs are not there yet when the condition is evaluated; add `b` to `needs` \
         (`{node: b, kind: weak}` to run whatever it ends as)"
    );
    assert!(got[4].starts_with("flow.yaml:9: node own: `when` reads `nodes.own`, its own node"));
}

#[test]
fn routing_rules_read_params_only() {
    assert_like(
        "flow: f\nrouting: {default: 1, rules: [{when: 'nodes.a.status == \"x\"', version: 2}]}\nnodes:\n  a: {run: {builtin: noop}}\n",
        "flow.yaml:2: routing `when` reads `nodes`",
        "only `params`",
    );
    assert_like(
        "flow: f\nrouting: {rules: []}\nnodes:\n  a: {run: {builtin: noop}}\n",
        "flow.yaml:2: ",
        "needs `default`",
    );
}

#[test]
fn manual_and_run_exclusive() {
    assert_errors(
        "flow: f\nnodes:\n  a:\n    run: {builtin: noop}\n    manual: {prompt: ok?}\n",
        &["flow.yaml:5: node a: has both `run` and `manual`; a manual node waits for a person, \
           so move the automatic action to `manual.fallback` or drop `manual`"],
    );
    assert_errors(
        "flow: f\nnodes:\n  a: {}\n  b:\n",
        &[
            "flow.yaml:3: node a: has neither `run` nor `manual`; add e.g. `run: {builtin: noop}` or `manual: {prompt: \"...\"}`",
            "flow.yaml:4: node b: has neither `run` nor `manual`; add e.g. `run: {builtin: noop}` or `manual: {prompt: \"...\"}`",
        ],
    );
    assert_like(
        "flow: f\nnodes:\n  a: {run: {builtin: noop, sidecar: {group: g, job: j}}}\n",
        "flow.yaml:3: node a: `run` needs exactly one of `builtin`, `http`, `sidecar`, `sql`, `xxl` or `flow`",
        "(has `builtin` and `sidecar`)",
    );
}

#[test]
fn limits_must_be_positive() {
    let source = "flow: f
concurrency: {max_active_runs: -1}
defaults:
  retry: {attempts: 0, factor: 0.5}
nodes:
  a:
    run: {sidecar: {group: g, job: j, shards: 0}}
    throttle: {max_permits: 0, queue_size: -5}
  b: {run: {builtin: fail, times: 0}}
";
    assert_errors(
        source,
        &[
            "flow.yaml:2: `max_active_runs` must be 0 or more, got -1",
            "flow.yaml:4: `retry.attempts` must be at least 1, got 0",
            "flow.yaml:4: `retry.factor` must be a number of at least 1, got 0.5",
            "flow.yaml:7: node a: `shards` must be at least 1, got 0",
            "flow.yaml:8: node a: `throttle.max_permits` must be at least 1, got 0",
            "flow.yaml:8: node a: `throttle.queue_size` must be 0 or more, got -5",
            "flow.yaml:9: node b: `times` must be at least 1, got 0",
        ],
    );
}

#[test]
fn executor_details() {
    assert_has(
        "flow: f\nnodes:\n  a: {run: {builtin: sleep}}\n",
        "flow.yaml:3: node a: `builtin: sleep` needs `for`, e.g. `{builtin: sleep, for: 2s}`",
    );
    assert_has(
        "flow: f\nnodes:\n  a: {run: {builtin: slep, for: 1s}}\n",
        "flow.yaml:3: node a: unknown builtin `slep`; did you mean `sleep`?; use `noop`, `sleep` or `fail`",
    );
    assert_has(
        "flow: f\nnodes:\n  a:\n    run:\n      http: {url: \"ftp://x/y\"}\n",
        "flow.yaml:5: node a: bad `url` `ftp://x/y`: it must start with `http://` or `https://`",
    );
    assert_like(
        "flow: f\nnodes:\n  a: {run: {http: {url: 'http:///x'}}}\n",
        "flow.yaml:3: node a: bad `url`",
        "no host",
    );
    assert_like(
        "flow: f\nnodes:\n  a: {run: {http: {url: 'http://h', method: PSOT}}}\n",
        "flow.yaml:3: node a: ",
        "did you mean `POST`?",
    );
    assert_like(
        "flow: f\nnodes:\n  a: {run: {sidecar: {group: g, job: j, shards: many}}}\n",
        "flow.yaml:3: node a: ",
        "`shards` is a number or `all`",
    );
    let all = crate::spec::parse_flow(
        "flow.yaml",
        "flow: f\nnodes:\n  a: {run: {sidecar: {group: g, job: j, shards: all}}}\n",
    )
    .expect("shards: all parses");
    let crate::model::NodeAction::Run(crate::ExecutorDef::Sidecar(def)) = &all.nodes[0].action else {
        panic!("a sidecar node");
    };
    assert!(def.is_broadcast());
    assert_like(
        "flow: f\nnodes:\n  a: {run: {sidecar: {group: g, job: j, route: leastbusy}}}\n",
        "flow.yaml:3: node a: ",
        "did you mean `least_busy`?",
    );
    assert_like(
        "flow: f\nnodes:\n  a: {run: {sidecar: {group: g, job: j, hash_key: 'params.'}}}\n",
        "flow.yaml:3: node a: ",
        "bad `hash_key`",
    );
    assert_like(
        "flow: f\nnodes:\n  a: {run: {sidecar: {group: g}}}\n",
        "flow.yaml:3: node a: ",
        "needs `job`",
    );
    assert_like(
        "flow: f\nnodes:\n  a: {run: {http: {url: 'http://h'}, outputs: {a: 1}}}\n",
        "flow.yaml:3: node a: `outputs` only apply to `builtin` executors",
        "",
    );
}

#[test]
fn manual_timers() {
    let source = "flow: f
nodes:
  a:
    manual:
      prompt: ok?
      alert_after: 12h
      fallback_after: 6h
      fallback: {builtin: noop}
";
    assert_errors(
        source,
        &["flow.yaml:7: node a: `fallback_after` (6h) must be later than `alert_after` (12h): \
           people are alerted first, then the fallback runs"],
    );
    assert_like(
        "flow: f\nnodes:\n  a: {manual: {fallback: {builtin: noop}}}\n",
        "flow.yaml:3: node a: ",
        "needs `fallback_after`",
    );
}

#[test]
fn fallback_then_and_watch_durations() {
    let source = "flow: f
nodes:
  a:
    manual:
      fallback_after: 6h
      fallback: {builtin: noop, then: skipp}
  b: {run: {builtin: noop, then: skip}, stall_after: 0s}
";
    assert_errors(
        source,
        &[
            "flow.yaml:6: node a: `manual.fallback.then` is `skipp`; did you mean `skip`?; it says how \
             the node ends once its fallback succeeded: `skip` or `success`",
            "flow.yaml:7: node b: `then` only applies to `manual.fallback`; remove it from `run`",
            "flow.yaml:7: node b: `stall_after` must be more than zero",
        ],
    );
    assert_like(
        "flow: f\nnodes:\n  b: {run: {builtin: noop}, warn_after: soon}\n",
        "flow.yaml:3: node b: ",
        "warn_after",
    );
    assert_like(
        "flow: f\ndefaults: {stall_after: -1m}\nnodes:\n  b: {run: {builtin: noop}}\n",
        "flow.yaml:2: ",
        "stall_after",
    );
}

#[test]
fn empty_nodes() {
    let msg = "the flow has no nodes; add at least one under `nodes:`, e.g. `hello: {run: {builtin: noop}}`";
    assert_errors("flow: f\nnodes: {}\n", &[&format!("flow.yaml:2: {msg}")]);
    assert_errors("flow: f\n", &[&format!("flow.yaml:1: {msg}")]);
}

#[test]
fn unknown_fields_suggest_the_right_one() {
    assert_errors(
        "flow: f\nnodes:\n  a: {run: {builtin: noop}}\n  b:\n    nedds: [a]\n    run: {builtin: noop}\n",
        &["flow.yaml:5: node b: unknown field `nedds`; did you mean `needs`?"],
    );
    assert_errors(
        "flow: f\ntrigers: []\nnodes:\n  a: {run: {builtin: noop}}\n",
        &["flow.yaml:2: unknown field `trigers`; did you mean `triggers`?"],
    );
    assert_like(
        "flow: f\nnodes:\n  a: {run: {builtin: noop}, zzz: 1}\n",
        "flow.yaml:3: node a: unknown field `zzz`; expected `needs`, `when`, `run`",
        "",
    );
}

/// Every unknown block key of a file is reported, each at its own line, and the
/// file's other errors after them.
#[test]
fn every_unknown_key_of_a_file_is_reported() {
    assert_errors(
        "flow: f\ntrigers: []\nnodes:\n  a:\n    nedds: []\n    run: {builtin: noop}\n  b:\n    runn:\n      builtin: noop\n    run: {builtin: noop}\n",
        &[
            "flow.yaml:2: unknown field `trigers`; did you mean `triggers`?",
            "flow.yaml:5: node a: unknown field `nedds`; did you mean `needs`?",
            "flow.yaml:8: node b: unknown field `runn`; did you mean `run`?",
        ],
    );
}

#[test]
fn malformed_yaml_has_a_line() {
    assert_like("flow: f\nnodes:\n  a: {run: [}\n", "flow.yaml:3: ", "");
    assert_errors(
        "flow: f\nnodes:\n  a:\n    retry: {attempts: many}\n    run: {builtin: noop}\n",
        &["flow.yaml:4: node a: `attempts`: expected a whole number"],
    );
    assert_errors(
        "flow: f\nnodes:\n  a:\n    run: {builtin: noop}\n    needs: a\n",
        &["flow.yaml:5: node a: `needs`: expected a list, e.g. `[a, b]`"],
    );
    assert_errors(
        "flow: f\nobserve: yes\nnodes:\n  a: {run: {builtin: noop}}\n",
        &["flow.yaml:2: `observe`: invalid boolean (strict mode expects true/false)"],
    );
    assert_errors("flow: f\nnodes: 3\n", &["flow.yaml:2: `nodes`: expected a mapping, e.g. `{key: value}`"]);
    assert_like(
        "flow: f\nnodes:\n  a: {needs: [[b]], run: {builtin: noop}}\n",
        "flow.yaml:3: node a: ",
        "node name",
    );
    assert_has(
        "flow: f\nnodes:\n  a: {needs: [3], run: {builtin: noop}}\n",
        "flow.yaml:3: node a: needs unknown node `3`",
    );
    assert_has(
        "",
        "flow.yaml:1: missing `flow`; name the flow at the top of the file, e.g. `flow: daily-settlement`",
    );
    assert_like("- a\n- b\n", "flow.yaml:1: ", "");
    assert_like("flow: f\n---\nflow: g\n", "flow.yaml:", "one flow per file");
}

#[test]
fn yaml_1_1_booleans_are_plain_names() {
    // `y`, `n`, `on`, `off` are node names, not booleans (YAML 1.2 core schema).
    let flow = super::parse(
        "flow: f\nnodes:\n  y: {run: {builtin: noop}}\n  n: {needs: [y], run: {builtin: noop}}\n",
    );
    assert_eq!(flow.nodes[1].needs[0].upstream, 0);
}

#[test]
fn cron_that_never_fires() {
    assert_errors(
        "flow: f\ntriggers:\n  - cron: '0 0 30 2 *'\nnodes:\n  a: {run: {builtin: noop}}\n",
        &["flow.yaml:3: cron `0 0 30 2 *` never fires (no such date, e.g. 30 February); check day and month"],
    );
}

#[test]
fn run_is_checked_even_next_to_manual() {
    assert_errors(
        "flow: f\nnodes:\n  a:\n    run: {http: {url: 'https://'}}\n    manual: {prompt: ok?}\n",
        &[
            "flow.yaml:4: node a: bad `url` `https://`: it has no host",
            "flow.yaml:5: node a: has both `run` and `manual`; a manual node waits for a person, \
             so move the automatic action to `manual.fallback` or drop `manual`",
        ],
    );
}

#[test]
fn all_errors_are_reported_at_once() {
    let source = "flow: Bad Name
nodes:
  a: {needs: [zz], run: {builtin: noop}, timeout: forever}
  b: {run: {builtin: sleep}}
  c: {needs: [c], manual: {prompt: x}, run: {builtin: noop}}
";
    let got = errors(source);
    assert_eq!(got.len(), 6, "{got:#?}");
    let lines: Vec<&str> = got.iter().map(|e| e.split(": ").next().unwrap_or_default()).collect();
    assert_eq!(
        lines,
        ["flow.yaml:1", "flow.yaml:3", "flow.yaml:3", "flow.yaml:4", "flow.yaml:5", "flow.yaml:5"]
    );
}

#[test]
fn event_trigger_paused_policy_is_checked() {
    let flow = |trigger: &str| format!("flow: f\ntriggers:\n  - {trigger}\nnodes:\n  a: {NOOP}\n");
    assert_like(
        &flow("event: x\n    on_paused: dorp"),
        "flow.yaml:4:",
        "unknown `on_paused` `dorp`; did you mean `drop`?",
    );
    assert_like(
        &flow("event: x\n    max_queued: 0"),
        "flow.yaml:4:",
        "`max_queued` must be at least 1, got 0",
    );
    assert_like(&flow("event: x\n    max_queued: 100001"), "flow.yaml:4:", "`max_queued` is at most 100000");
    assert_like(
        &flow("cron: \"0 1 * * *\"\n    on_paused: drop"),
        "flow.yaml:3:",
        "`on_paused` only applies to `event` triggers",
    );
    let def = crate::spec::parse_flow("f.yaml", &flow("event: x\n    on_paused: drop\n    max_queued: 5"))
        .expect("valid");
    let [crate::model::TriggerDef::Event { on_paused, max_queued, .. }] = def.triggers.as_slice() else {
        panic!()
    };
    assert_eq!((*on_paused, *max_queued), (crate::model::OnPaused::Drop, 5));
    let def = crate::spec::parse_flow("f.yaml", &flow("event: x")).expect("valid");
    let [crate::model::TriggerDef::Event { on_paused, max_queued, .. }] = def.triggers.as_slice() else {
        panic!()
    };
    assert_eq!((*on_paused, *max_queued), (crate::model::OnPaused::Queue, 1000));
}
