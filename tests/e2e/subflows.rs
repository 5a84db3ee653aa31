//! Sub-flows and `foreach` on the real binary: a parent node's child run passes
//! its outputs up; a child's failure fails the parent's node naming the child's
//! node and is retried with a new child; cancelling the parent cancels the child;
//! a rerun starts a new child; a kill -9 while the child runs loses nothing and
//! makes no second child; `foreach` over 5 items with `max_parallel: 2` runs at
//! most two real sidecar jobs at once and collects the results in item order;
//! past the bound of 10,000 items the node fails with the count and the bound.

use std::time::Duration;

use serde_json::{Value, json};

use crate::sidecar::{SidecarProc, wait_sidecars};
use crate::support::{Dev, status_of, wait_until};

const CHILD: &str = "flow: settle-shop
nodes:
  load: {when: \"params.shop == 's1'\", run: {builtin: noop, outputs: {inner: 1}}}
  total: {needs: [load], run: {builtin: noop, outputs: {total: 42}}}
  report: {needs: [load], run: {builtin: noop, outputs: {shop_done: true}}}
";

const PARENT: &str = "flow: settle-all
nodes:
  list: {run: {builtin: noop, outputs: {shop: s1}}}
  call:
    needs: [list]
    run: {flow: settle-shop, params: {shop: \"nodes.list.outputs.shop\", day: \"biz_date\", fixed: 7}}
  use: {needs: [call], when: 'nodes.call.outputs.total == 42', run: {builtin: noop}}
";

fn ms(time: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(time.as_str().expect("time")).expect("rfc3339").timestamp_millis()
}

async fn start(dev: &Dev, flow: &str, date: &str) -> String {
    let (status, body) = dev.post(&format!("/flows/{flow}/runs"), json!({"biz_date": date}), &[]).await;
    assert_eq!(status, 201, "{body}");
    body["run_id"].as_str().expect("run_id").to_string()
}

/// The `child_run` of each attempt of `node`, in attempt order.
fn child_runs(run: &Value, node: &str) -> Vec<String> {
    run["nodes"][node]["attempt_history"]
        .as_array()
        .map(|h| h.iter().filter_map(|a| a["child_run"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

async fn runs_of(dev: &Dev, flow: &str) -> Vec<Value> {
    let (status, body) = dev.get(&format!("/runs?flow={flow}")).await;
    assert_eq!(status, 200, "{body}");
    body["runs"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_child_run_passes_its_outputs_and_a_rerun_starts_a_new_child() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(CHILD).await;
    dev.put_flow(PARENT).await;
    let parent = start(&dev, "settle-all", "2026-12-04").await;
    let run = dev.finished(&parent).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(
        run["nodes"]["call"]["outputs"],
        json!({"total": 42, "shop_done": true}),
        "sinks' outputs, merged"
    );
    assert_eq!(status_of(&run, "use"), "SUCCESS", "downstream read the child's outputs");
    let [child] = &child_runs(&run, "call")[..] else { panic!("one child: {run}") };
    let (_, child_run) = dev.get(&format!("/runs/{child}")).await;
    assert_eq!(child_run["status"], "SUCCESS");
    assert_eq!(child_run["flow"], "settle-shop");
    assert_eq!(child_run["trigger"], "subflow");
    assert_eq!(child_run["actor"], format!("run:{parent}/call"));
    assert_eq!(child_run["biz_date"], "2026-12-04", "the parent's business date");
    assert_eq!(child_run["params"], json!({"shop": "s1", "day": "2026-12-04", "fixed": 7}));
    assert_eq!(child_run["idempotency_key"], format!("subflow:{parent}:call:1"));
    // The parent's node learns the child's end right after the child's commit (not
    // at the attempt's 2 s store check).
    let wake = ms(&run["nodes"]["call"]["finished_at"]) - ms(&child_run["finished_at"]);
    eprintln!("sub-flow wake on SQLite: child SUCCESS -> parent node SUCCESS {wake} ms");
    assert!((0..1000).contains(&wake), "child end to parent node end took {wake} ms");

    let page = dev.http.get(format!("{}/runs/{parent}?node=call", dev.base)).send().await.expect("page");
    let html = page.text().await.expect("body");
    assert!(
        html.contains(&format!("<a class=\"child-run\" href=\"/runs/{child}\">{child}</a>")),
        "the console's attempt links to the child run: {html}"
    );

    let (status, body) = dev
        .post(&format!("/runs/{parent}/nodes/call/rerun"), json!({"reason": "shop data fixed"}), &[])
        .await;
    assert_eq!(status, 200, "{body}");
    let run =
        dev.wait_run(&parent, 30, |r| r["status"] == "SUCCESS" && child_runs(r, "call").len() == 2).await;
    let children = child_runs(&run, "call");
    assert_ne!(children[0], children[1], "a rerun starts a new child");
    assert_eq!(runs_of(&dev, "settle-shop").await.len(), 2);
}

#[tokio::test]
async fn a_failed_child_fails_the_node_naming_its_node_and_is_retried_with_a_new_child() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: broken-child\nnodes:\n  load: {run: {builtin: fail, message: disk full}}\n  after: {needs: [load], run: {builtin: noop}}\n",
    )
    .await;
    dev.put_flow(
        "flow: calls-broken\nnodes:\n  call:\n    retry: {attempts: 2, backoff: 100ms, jitter: 0s}\n    run: {flow: broken-child}\n",
    )
    .await;
    let parent = start(&dev, "calls-broken", "2026-12-04").await;
    let run = dev.finished(&parent).await;
    assert_eq!(run["status"], "FAILED", "{run}");
    let node = &run["nodes"]["call"];
    assert_eq!(node["attempts"], 2, "retried by the node's retry policy: {node}");
    let children = child_runs(&run, "call");
    assert_eq!(children.len(), 2, "{node}");
    assert_ne!(children[0], children[1], "each attempt its own child");
    for (attempt, child) in node["attempt_history"].as_array().expect("history").iter().zip(&children) {
        assert_eq!(
            attempt["error"],
            format!("child run {child} failed at node load: disk full"),
            "the child's root cause"
        );
        let (_, c) = dev.get(&format!("/runs/{child}")).await;
        assert_eq!(c["status"], "FAILED");
    }
    assert_eq!(node["reason"], format!("child run {} failed at node load: disk full", children[1]));
}

#[tokio::test]
async fn cancelling_the_parent_cancels_the_child() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: slow-child\nnodes:\n  work: {run: {builtin: sleep, for: 60s}}\n").await;
    dev.put_flow("flow: calls-slow\nnodes:\n  call: {run: {flow: slow-child}}\n").await;
    let parent = start(&dev, "calls-slow", "2026-12-04").await;
    let child = wait_until(Duration::from_secs(20), "the child run to be RUNNING", async || {
        let (_, run) = dev.get(&format!("/runs/{parent}")).await;
        let Some(child) = child_runs(&run, "call").pop() else { return Err(run.to_string()) };
        let (_, c) = dev.get(&format!("/runs/{child}")).await;
        if c["nodes"]["work"]["status"] == "RUNNING" { Ok(child) } else { Err(c.to_string()) }
    })
    .await;
    let (status, body) =
        dev.post(&format!("/runs/{parent}/cancel"), json!({"reason": "wrong day"}), &[]).await;
    assert_eq!(status, 200, "{body}");
    let c = dev.wait_run(&child, 20, |r| r["status"] == "CANCELLED").await;
    assert_eq!(c["status"], "CANCELLED");
    let (_, audit) = dev.get(&format!("/audit?run_id={child}")).await;
    let entries = audit["entries"].as_array().or(audit.as_array()).cloned().unwrap_or_default();
    assert!(
        entries.iter().any(|e| e["action"] == "cancel" && e["actor"] == format!("run:{parent}/call")),
        "the child's cancel is audited as the parent's node: {audit}"
    );
    assert_eq!(dev.finished(&parent).await["status"], "CANCELLED");
}

#[tokio::test]
async fn a_kill_9_while_the_child_runs_loses_nothing_and_makes_no_second_child() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = Dev::start_in(dir.path());
    // The child's run time is the point: the kill lands while it runs.
    dev.put_flow(
        "flow: nap-child\nnodes:\n  nap: {run: {builtin: sleep, for: 2s, outputs: {napped: true}}}\n",
    )
    .await;
    dev.put_flow("flow: calls-nap\nnodes:\n  call: {run: {flow: nap-child}}\n").await;
    let parent = start(&dev, "calls-nap", "2026-12-04").await;
    wait_until(Duration::from_secs(20), "the child run to start", async || {
        let (_, run) = dev.get(&format!("/runs/{parent}")).await;
        if child_runs(&run, "call").is_empty() { Err(run.to_string()) } else { Ok(()) }
    })
    .await;
    dev.kill9();
    let dev = Dev::start_in(dir.path());
    let run = dev.finished(&parent).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["call"]["outputs"], json!({"napped": true}));
    let children = runs_of(&dev, "nap-child").await;
    assert_eq!(children.len(), 1, "the recovered attempt found its child by key: {children:?}");
    assert_eq!(child_runs(&run, "call"), [children[0]["run_id"].as_str().unwrap_or_default().to_string()]);
}

#[tokio::test]
async fn foreach_runs_five_items_two_at_a_time_and_collects_them_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_data, dev) = Dev::start();
    let ledger = dir.path().join("ledger");
    let script = dir.path().join("item.sh");
    // Each item runs 300 ms (the overlap is what the test counts).
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"start $MADEIRA_ITEM_INDEX\" >> {ledger}\nsleep 0.3\necho \"end $MADEIRA_ITEM_INDEX\" >> {ledger}\n\
             printf '{{\"merchant\": \"%s\", \"key\": \"%s\"}}' \"$MADEIRA_ITEM\" \"$MADEIRA_IDEMPOTENCY_KEY\" > \"$MADEIRA_OUTPUT_FILE\"\n",
            ledger = ledger.display()
        ),
    )
    .expect("script");
    let jobs = format!("jobs:\n  settle-merchant:\n    command: [\"/bin/sh\", \"{}\"]\n", script.display());
    let _sidecar = SidecarProc::start(dir.path(), "s-each", &dev.grpc, &jobs);
    wait_sidecars(&dev, "billing", 1).await;
    dev.put_flow(
        "flow: per-merchant
nodes:
  list_merchants: {run: {builtin: noop, outputs: {ids: [m1, m2, m3, m4, m5]}}}
  settle:
    needs: [list_merchants]
    foreach: \"nodes.list_merchants.outputs.ids\"
    max_parallel: 2
    run: {sidecar: {group: billing, job: settle-merchant}}
",
    )
    .await;
    let run_id = dev.trigger("per-merchant", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    let items = run["nodes"]["settle"]["outputs"]["items"].as_array().cloned().expect("items");
    let merchants: Vec<&str> = items.iter().map(|i| i["merchant"].as_str().unwrap_or("?")).collect();
    assert_eq!(merchants, ["m1", "m2", "m3", "m4", "m5"], "results in item order");
    let key = |i: usize| format!("{run_id}:settle:v1:s{i}");
    let keys: Vec<String> = items.iter().map(|i| i["key"].as_str().unwrap_or("?").to_string()).collect();
    assert_eq!(keys, (0..5).map(key).collect::<Vec<_>>(), "each item its own shard key");
    let lines = std::fs::read_to_string(&ledger).expect("ledger");
    let (mut now, mut most, mut starts) = (0i32, 0i32, 0);
    for line in lines.lines() {
        if line.starts_with("start") {
            now += 1;
            starts += 1;
        } else {
            now -= 1;
        }
        most = most.max(now);
    }
    assert_eq!(starts, 5, "each item once:\n{lines}");
    assert_eq!(most, 2, "at most max_parallel at once, and that many:\n{lines}");
}

#[tokio::test]
async fn foreach_past_the_bound_fails_the_node_with_the_count_and_the_bound() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: too-many\nnodes:\n  each:\n    foreach: \"params.ids\"\n    retry: {attempts: 3, backoff: 100ms}\n    run: {builtin: noop}\n",
    )
    .await;
    let ids: Vec<u32> = (0..10_001).collect();
    let run_id = dev.trigger("too-many", json!({"ids": ids})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "FAILED");
    let node = &run["nodes"]["each"];
    assert_eq!(node["attempts"], 1, "not retried: the same list would fail again: {node}");
    let reason = node["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("foreach over 10001 items, more than the bound of 10000"), "{reason}");

    let small = dev.trigger("too-many", json!({"ids": [1, 2, 3]})).await;
    let run = dev.finished(&small).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["each"]["outputs"]["items"], json!([{}, {}, {}]));
}

/// Two `madeira serve` replicas on one PostgreSQL database: the replica holding a
/// parent run and its child is killed with -9 while the child runs; the other
/// takes both over, the parent's recovered attempt finds the same child by its
/// key, and the parent succeeds with exactly one child, started once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_and_child_survive_kill_9_of_their_replica_on_postgres() {
    let Some(mut pg) = crate::support::pg_replicas("", &[]).await else { return };
    let (r1, r2) = (&pg.r1, &mut pg.r2);
    // The child's run time is the point: the kill lands while it runs.
    r1.put_flow(
        "flow: pg-child\nnodes:\n  nap: {run: {builtin: sleep, for: 1500ms, outputs: {napped: true}}}\n",
    )
    .await;
    r1.put_flow("flow: pg-parent\nnodes:\n  call: {run: {flow: pg-child}}\n  after: {needs: [call], run: {builtin: noop}}\n").await;
    let parent = start(r2, "pg-parent", "2026-12-04").await;
    let child = wait_until(Duration::from_secs(20), "the child run to start on r2", async || {
        let (_, run) = r2.get(&format!("/runs/{parent}")).await;
        child_runs(&run, "call").pop().ok_or_else(|| run.to_string())
    })
    .await;
    r2.kill9();
    let run = r1.wait_run(&parent, 60, |r| r["status"] == "SUCCESS" || r["status"] == "FAILED").await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["call"]["outputs"], json!({"napped": true}));
    assert_eq!(child_runs(&run, "call"), std::slice::from_ref(&child), "the same child, found by its key");
    assert_eq!(runs_of(r1, "pg-child").await.len(), 1, "no second child");
    let (status, body) = r1.get(&format!("/runs/{child}/transitions")).await;
    assert_eq!(status, 200, "{body}");
    let starts = body["transitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["node"].is_null() && t["to"] == "RUNNING")
        .count();
    assert_eq!(starts, 1, "the child run started once: {body}");
}

/// `PUT /flows/{name}` answers 400 with the file, line and fix.
async fn refused(dev: &Dev, yaml: &str) -> String {
    let name = yaml.lines().find_map(|l| l.strip_prefix("flow: ")).expect("flow name").trim().to_string();
    let resp =
        dev.http.put(dev.url(&format!("/flows/{name}"))).body(yaml.to_string()).send().await.expect("put");
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.expect("json");
    assert_eq!(status, 400, "{body}");
    body.to_string()
}

#[tokio::test]
async fn apply_refuses_a_missing_child_and_a_subflow_cycle() {
    let (_dir, dev) = Dev::start();
    let body = refused(&dev, "flow: sf-a\nnodes:\n  call: {run: {flow: sf-bb}}\n").await;
    assert!(body.contains("sf-a.yaml:3: `run.flow` names flow `sf-bb`, which does not exist"), "{body}");
    dev.put_flow("flow: sf-b\nnodes:\n  n: {run: {builtin: noop}}\n").await;
    let body = refused(&dev, "flow: sf-a\nnodes:\n  call: {run: {flow: sf-bb}}\n").await;
    assert!(body.contains("did you mean `sf-b`?"), "{body}");
    dev.put_flow("flow: sf-a\nnodes:\n  call: {run: {flow: sf-b}}\n").await;
    let body = refused(&dev, "flow: sf-b\nnodes:\n  back: {run: {flow: sf-a}}\n").await;
    assert!(
        body.contains("sub-flow cycle: sf-b (sf-b.yaml:3 runs sf-a) → sf-a (sf-a.yaml:3 runs sf-b) → sf-b"),
        "{body}"
    );
}
