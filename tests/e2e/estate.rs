//! The estate on the real binary: three flows A → B → C for one business date.
//! A fails: B and C are held, each saying whom it waits for; a rerun of A's node
//! makes A SUCCESS and B, then C, start from that commit (no polling). The wake
//! latency (A's SUCCESS → B RUNNING, both stamped by the engine) is measured
//! over many dates and printed as p50/p99. `madeira estate --date D` prints the
//! tree with the failed flow's holds, `held by A.pull FAILED` and deadlines late
//! (a past date) or at risk (a future one). Cycles and unknown upstreams are
//! refused at apply with the file and line.

use chrono::DateTime;
use serde_json::{Value, json};

use crate::support::{Dev, wait_until};

const A: &str = "flow: est-a\nnodes:\n  pull:\n    retry: {attempts: 1}\n    run: {builtin: fail, message: upstream down, times: 1}\n";
const B: &str =
    "flow: est-b\nafter:\n  - {flow: est-a, date: same}\nnodes:\n  load: {run: {builtin: noop}}\n";
const C: &str = "flow: est-c\nafter:\n  - {flow: est-b}\nnodes:\n  settle: {run: {builtin: noop}}\n";

async fn start(dev: &Dev, flow: &str, date: &str) -> String {
    let (status, body) = dev.post(&format!("/flows/{flow}/runs"), json!({"biz_date": date}), &[]).await;
    assert_eq!(status, 201, "{body}");
    body["run_id"].as_str().expect("run_id").to_string()
}

fn ms(run: &Value, field: &str) -> i64 {
    let text = run[field].as_str().unwrap_or_else(|| panic!("{field} missing: {run}"));
    DateTime::parse_from_rfc3339(text).expect("timestamp").timestamp_millis()
}

#[tokio::test]
async fn a_failed_upstream_holds_its_dependents_and_its_rerun_wakes_them_in_order() {
    let (_dir, dev) = Dev::start();
    for yaml in [A, B, C] {
        dev.put_flow(yaml).await;
    }
    let day = "2026-12-04";
    let a = start(&dev, "est-a", day).await;
    let b = start(&dev, "est-b", day).await;
    let c = start(&dev, "est-c", day).await;
    let failed = dev.finished(&a).await;
    assert_eq!(failed["status"], "FAILED", "{failed}");
    for (run, upstream) in [(&b, "est-a"), (&c, "est-b")] {
        let held = dev.wait_run(run, 10, |r| r["waiting_reason"].is_string()).await;
        assert_eq!(held["status"], "QUEUED", "{held}");
        assert_eq!(held["waiting_reason"], format!("waiting for {upstream} {day}"), "{held}");
    }
    let (status, body) =
        dev.post(&format!("/runs/{a}/nodes/pull/rerun"), json!({"reason": "payments API back"}), &[]).await;
    assert!(status < 300, "rerun: {status} {body}");
    let a_done = dev.wait_run(&a, 30, |r| r["status"] == "SUCCESS").await;
    let b_done = dev.finished(&b).await;
    let c_done = dev.finished(&c).await;
    assert_eq!(b_done["status"], "SUCCESS", "{b_done}");
    assert_eq!(c_done["status"], "SUCCESS", "{c_done}");
    assert!(ms(&b_done, "started_at") >= ms(&a_done, "finished_at"), "B started before A succeeded");
    assert!(ms(&c_done, "started_at") >= ms(&b_done, "finished_at"), "C started before B succeeded");
    assert_eq!(b_done["waiting_reason"], Value::Null, "{b_done}");
}

#[tokio::test]
async fn wake_latency_from_upstream_success_to_downstream_running() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: lat-a\nnodes:\n  pull: {run: {builtin: sleep, for: 50ms}}\n").await;
    dev.put_flow("flow: lat-b\nafter:\n  - {flow: lat-a}\nnodes:\n  load: {run: {builtin: noop}}\n").await;
    let mut latencies = Vec::new();
    for i in 1..=30 {
        let day = format!("2026-11-{i:02}");
        // The downstream first, so it is held when the upstream succeeds.
        let b = start(&dev, "lat-b", &day).await;
        dev.wait_run(&b, 10, |r| r["waiting_reason"].is_string()).await;
        let a = start(&dev, "lat-a", &day).await;
        let a_done = dev.finished(&a).await;
        let b_done = dev.finished(&b).await;
        assert_eq!(
            (a_done["status"].as_str(), b_done["status"].as_str()),
            (Some("SUCCESS"), Some("SUCCESS"))
        );
        let latency = ms(&b_done, "started_at") - ms(&a_done, "finished_at");
        assert!(latency >= 0, "B started {latency} ms before A succeeded");
        latencies.push(latency);
    }
    let p99 = crate::support::latency_report("estate wake latency, dates (SQLite)", &mut latencies);
    assert!(p99 < 1000, "wake p99 {p99} ms");
}

#[tokio::test]
async fn apply_refuses_cycles_and_unknown_upstreams_naming_file_and_line() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: cy-a\nnodes:\n  n: {run: {builtin: noop}}\n").await;
    dev.put_flow("flow: cy-b\nafter:\n  - {flow: cy-a}\nnodes:\n  n: {run: {builtin: noop}}\n").await;
    let cyclic = "flow: cy-a\nafter:\n  - {flow: cy-b}\nnodes:\n  n: {run: {builtin: noop}}\n";
    let resp = reqwest::Client::new().put(dev.url("/flows/cy-a")).body(cyclic).send().await.expect("put");
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.expect("json");
    let text = body.to_string();
    assert!(text.contains("cycle across flows"), "{text}");
    assert!(text.contains("cy-a (cy-a.yaml:3 waits for cy-b)"), "{text}");
    assert!(text.contains("cy-b (cy-b.yaml:3 waits for cy-a)"), "{text}");
    let unknown = "flow: cy-c\nafter:\n  - {flow: cy-z}\nnodes:\n  n: {run: {builtin: noop}}\n";
    let resp = reqwest::Client::new().put(dev.url("/flows/cy-c")).body(unknown).send().await.expect("put");
    assert_eq!(resp.status().as_u16(), 400);
    let text = resp.text().await.expect("text");
    assert!(text.contains("cy-c.yaml:3: `after` names flow `cy-z`, which does not exist"), "{text}");
    // Deleting a flow others wait for is allowed, and the audit entry names them.
    let url = dev.url("/flows/cy-a?reason=retired");
    let resp = reqwest::Client::new().delete(url).send().await.expect("delete");
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap_or_default());
    let (_, audit) = dev.get("/audit?limit=10").await;
    let entry = audit["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["action"] == "delete_flow")
        .unwrap_or_else(|| panic!("no delete_flow entry: {audit}"));
    assert_eq!(entry["details"]["dependents"], json!(["cy-b"]), "{entry}");
}

#[tokio::test]
async fn flow_succeeded_starts_the_downstream_once_for_the_same_business_date() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: fs-up\nnodes:\n  n: {run: {builtin: noop}}\n").await;
    dev.put_flow(
        "flow: fs-down\ntriggers:\n  - flow_succeeded: fs-up\nnodes:\n  n: {run: {builtin: noop}}\n",
    )
    .await;
    let day = "2026-12-03";
    for _ in 0..2 {
        let up = start(&dev, "fs-up", day).await;
        assert_eq!(dev.finished(&up).await["status"], "SUCCESS");
    }
    let runs = wait_until(std::time::Duration::from_secs(10), "fs-down to run", async || {
        let (status, body) = dev.get(&format!("/runs?flow=fs-down&biz_date={day}")).await;
        assert_eq!(status, 200, "{body}");
        let runs = body["runs"].as_array().cloned().unwrap_or_default();
        if runs.iter().any(|r| r["status"] == "SUCCESS") { Ok(runs) } else { Err(format!("{body}")) }
    })
    .await;
    assert_eq!(runs.len(), 1, "two upstream successes for one date make one downstream run: {runs:?}");
    assert_eq!(runs[0]["trigger"], "after", "{runs:?}");
    assert_eq!(runs[0]["biz_date"], day, "{runs:?}");
}

/// Two `madeira serve` replicas on one PostgreSQL database: the downstream runs are
/// created (and held) on one replica, the upstream runs and succeeds on the other;
/// its commit releases them across replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_runs_are_released_across_replicas_on_postgres() {
    let Some(pg) = crate::support::pg_replicas("", &[]).await else { return };
    let (r1, r2) = (&pg.r1, &pg.r2);
    r1.put_flow("flow: pg-a\nnodes:\n  pull: {run: {builtin: sleep, for: 50ms}}\n").await;
    r1.put_flow("flow: pg-b\nafter:\n  - {flow: pg-a}\nnodes:\n  load: {run: {builtin: noop}}\n").await;
    r1.put_flow("flow: pg-c\nafter:\n  - {flow: pg-b}\nnodes:\n  settle: {run: {builtin: noop}}\n").await;
    let mut latencies = Vec::new();
    for i in 1..=10 {
        let day = format!("2026-10-{i:02}");
        let c = start(r2, "pg-c", &day).await;
        let b = start(r2, "pg-b", &day).await;
        r2.wait_run(&b, 10, |r| r["waiting_reason"].is_string()).await;
        let a = start(r1, "pg-a", &day).await;
        let a_done = r1.finished(&a).await;
        let b_done = r1.finished(&b).await;
        let c_done = r1.finished(&c).await;
        for run in [&a_done, &b_done, &c_done] {
            assert_eq!(run["status"], "SUCCESS", "{run}");
        }
        assert!(ms(&c_done, "started_at") >= ms(&b_done, "finished_at"), "C before B on {day}");
        latencies.push(ms(&b_done, "started_at") - ms(&a_done, "finished_at"));
    }
    latencies.sort_unstable();
    eprintln!(
        "estate wake latency, two replicas on PostgreSQL, {} dates: p50 {} ms, max {} ms",
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
    assert!(latencies.iter().all(|l| *l >= 0), "{latencies:?}");
}

/// kill -9 of the replica that created (and so would have started) the held run:
/// the wait lives in the store, so the other replica starts it once its upstream
/// succeeds; it starts exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_survives_kill_9_of_its_creator_and_starts_once() {
    let Some(mut pg) = crate::support::pg_replicas("", &[]).await else { return };
    let (r1, r2) = (&pg.r1, &mut pg.r2);
    r1.put_flow("flow: k9-a\nnodes:\n  pull: {run: {builtin: noop}}\n").await;
    r1.put_flow("flow: k9-b\nafter:\n  - {flow: k9-a}\nnodes:\n  load: {run: {builtin: noop}}\n").await;
    let day = "2026-09-30";
    let b = start(r2, "k9-b", day).await;
    r2.wait_run(&b, 10, |r| r["waiting_reason"].is_string()).await;
    r2.kill9();
    let a = start(r1, "k9-a", day).await;
    assert_eq!(r1.finished(&a).await["status"], "SUCCESS");
    assert_eq!(r1.finished(&b).await["status"], "SUCCESS");
    let (status, body) = r1.get(&format!("/runs/{b}/transitions")).await;
    assert_eq!(status, 200, "{body}");
    let run_starts = body["transitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["node"].is_null() && t["to"] == "RUNNING")
        .count();
    assert_eq!(run_starts, 1, "the held run started exactly once: {body}");
}

/// `madeira estate --date D` on the binary: the failed upstream lists what it
/// holds, each held flow says who holds it, and B's deadline is late on a past
/// date and at risk on a future one.
#[tokio::test]
async fn the_cli_tree_shows_holds_and_late_or_at_risk_deadlines() {
    let (_dir, dev) = Dev::start();
    let b = "flow: est-b\ntimezone: UTC\ndeadline: {by: \"02:00:00\", days: 0}\nafter:\n  - {flow: est-a}\nnodes:\n  load: {run: {builtin: noop}}\n";
    for yaml in [A.replace("times: 1", "times: 9"), b.to_string(), C.to_string()] {
        dev.put_flow(&yaml).await;
    }
    for (day, mark) in [
        ("2026-12-01", "⚠ late: deadline 2026-12-01T02:00:00Z missed"),
        ("2027-03-01", "⚠ at risk: deadline 2027-03-01T02:00:00Z"),
    ] {
        let a = start(&dev, "est-a", day).await;
        assert_eq!(dev.finished(&a).await["status"], "FAILED");
        let (b, c) = (start(&dev, "est-b", day).await, start(&dev, "est-c", day).await);
        for run in [&b, &c] {
            dev.wait_run(run, 10, |r| r["waiting_reason"].is_string()).await;
        }
        let out = dev.cli(&["estate", "--date", day]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
        let expected = format!(
            "estate for business date {day}\nest-a  [failed]  holds est-b, est-c\n  \
             est-b  [held]  waiting for est-a {day}  held by est-a.pull FAILED  {mark}\n    \
             est-c  [held]  waiting for est-b {day}  held by est-a.pull FAILED"
        );
        assert_eq!(text.trim_end(), expected);
    }
}
