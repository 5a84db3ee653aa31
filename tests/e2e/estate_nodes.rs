//! Node-level `after` on the real binary: flow B's node `settle` waits for flow A's
//! node `publish` for the same business date. B's run starts and its other node
//! runs; `settle` stays INIT with the reason on the API's node view and the estate
//! map while A's node is RUNNING or FAILED; a rerun (or a mark-success) of A's node
//! makes it SUCCESS and `settle` starts from that commit. The wake latency (A's
//! node SUCCESS → `settle` RUNNING, both stamped by the engine) is measured over
//! 20 dates on SQLite and across two PostgreSQL replicas (A on one, B on the
//! other); `after_policy: fail` fails a node held too long, and a held node's
//! deadline miss joins the failed upstream's alert.

use chrono::DateTime;
use serde_json::{Value, json};

use crate::support::Dev;

const B: &str = "flow: nd-b\nnodes:\n  other: {run: {builtin: noop}}\n  settle:\n    after: [{flow: nd-a, node: publish, date: same}]\n    run: {builtin: noop}\n";

fn b_of(name: &str, upstream: &str, extra: &str) -> String {
    B.replace("nd-b", name).replace("nd-a", upstream).replace("nodes:", &format!("{extra}nodes:"))
}

async fn start(dev: &Dev, flow: &str, date: &str) -> String {
    let (status, body) = dev.post(&format!("/flows/{flow}/runs"), json!({"biz_date": date}), &[]).await;
    assert_eq!(status, 201, "{body}");
    body["run_id"].as_str().expect("run_id").to_string()
}

fn ms(v: &Value, field: &str) -> i64 {
    let text = v[field].as_str().unwrap_or_else(|| panic!("{field} missing: {v}"));
    DateTime::parse_from_rfc3339(text).expect("timestamp").timestamp_millis()
}

fn reason(run: &Value, node: &str) -> String {
    run["nodes"][node]["reason"].as_str().unwrap_or_default().to_string()
}

/// Polls the run until node `settle` shows a reason containing `part`.
async fn held_with(dev: &Dev, run: &str, part: &str) -> Value {
    dev.wait_run(run, 10, |r| reason(r, "settle").contains(part)).await
}

#[tokio::test]
async fn a_node_waits_for_another_flows_node_while_its_run_goes_on() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: nd-a\nnodes:\n  publish:\n    retry: {attempts: 1}\n    run: {builtin: fail, message: rates late, times: 1}\n").await;
    dev.put_flow(B).await;
    let day = "2026-12-04";
    let b = start(&dev, "nd-b", day).await;
    let held = held_with(&dev, &b, "no run yet").await;
    assert_eq!(held["status"], "RUNNING", "{held}");
    assert_eq!(held["nodes"]["settle"]["status"], "INIT", "{held}");
    assert_eq!(held["nodes"]["settle"]["waiting"], true, "{held}");
    assert_eq!(reason(&held, "settle"), format!("waiting for nd-a.publish {day}, no run yet"));
    assert_eq!(held["nodes"]["settle"]["after"][0]["met"], false, "{held}");
    dev.wait_run(&b, 10, |r| r["nodes"]["other"]["status"] == "SUCCESS").await;
    // A's node fails: settle stays held, the reason says so, the map names the root.
    let a = start(&dev, "nd-a", day).await;
    assert_eq!(dev.finished(&a).await["status"], "FAILED");
    let held = held_with(&dev, &b, "FAILED").await;
    assert_eq!(reason(&held, "settle"), format!("waiting for nd-a.publish {day}, FAILED"));
    assert_eq!(
        (held["status"].as_str(), held["nodes"]["settle"]["status"].as_str()),
        (Some("RUNNING"), Some("INIT"))
    );
    let (status, map) = dev.get(&format!("/estate?date={day}")).await;
    assert_eq!(status, 200, "{map}");
    let flows = map["flows"].as_array().expect("flows");
    let nb = flows.iter().find(|f| f["flow"] == "nd-b").expect("nd-b on the map");
    assert_eq!(nb["after"], json!(["nd-a"]), "{nb}");
    assert_eq!(
        nb["node_after"],
        json!([{"node": "settle", "upstream": "nd-a", "upstream_node": "publish"}]),
        "{nb}"
    );
    assert_eq!(nb["held_nodes"][0]["node"], "settle", "{nb}");
    assert_eq!(nb["root_cause"], json!({"flow": "nd-a", "node": "publish"}), "{nb}");
    let na = flows.iter().find(|f| f["flow"] == "nd-a").expect("nd-a on the map");
    assert_eq!(na["holds"], json!(["nd-b"]), "{na}");
    // The console's run page says it in the run's head and in the node's panel.
    for page in [format!("/runs/{b}"), format!("/runs/{b}?node=settle")] {
        let resp = dev.http.get(format!("{}{page}", dev.base)).send().await.expect("run page");
        assert_eq!(resp.status(), 200, "{page}");
        let html = resp.text().await.expect("body");
        assert!(html.contains(&format!("waiting for nd-a.publish {day}, FAILED")), "{page}: {html}");
    }
    let tree = dev.cli(&["estate", "--date", day]);
    let text = String::from_utf8_lossy(&tree.stdout);
    assert!(text.contains("node settle waiting for nd-a.publish"), "{text}");
    // The rerun of A's node succeeds: its commit releases settle.
    let (status, body) =
        dev.post(&format!("/runs/{a}/nodes/publish/rerun"), json!({"reason": "rates in"}), &[]).await;
    assert!(status < 300, "rerun: {status} {body}");
    let a_done = dev.wait_run(&a, 30, |r| r["status"] == "SUCCESS").await;
    let b_done = dev.finished(&b).await;
    assert_eq!(b_done["status"], "SUCCESS", "{b_done}");
    let released = ms(&b_done["nodes"]["settle"], "started_at");
    assert!(
        released >= ms(&a_done["nodes"]["publish"], "finished_at"),
        "settle started before publish succeeded"
    );
    assert_eq!(b_done["nodes"]["settle"]["after"][0]["met"], true, "{b_done}");
    // Another date: A's node fails again; a mark-success of it releases settle as well.
    let day = "2026-12-05";
    let b = start(&dev, "nd-b", day).await;
    let a = start(&dev, "nd-a", day).await;
    assert_eq!(dev.finished(&a).await["status"], "FAILED");
    held_with(&dev, &b, "FAILED").await;
    let path = format!("/runs/{a}/nodes/publish/mark-success");
    let (status, body) = dev.post(&path, json!({"reason": "rates loaded by hand"}), &[]).await;
    assert_eq!(status, 200, "{body}");
    let b_done = dev.finished(&b).await;
    assert_eq!(
        (b_done["status"].as_str(), b_done["nodes"]["settle"]["status"].as_str()),
        (Some("SUCCESS"), Some("SUCCESS"))
    );
}

#[tokio::test]
async fn node_wake_latency_from_upstream_node_success_to_running() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: nl-a\nnodes:\n  publish: {run: {builtin: sleep, for: 200ms}}\n").await;
    dev.put_flow(&b_of("nl-b", "nl-a", "")).await;
    let mut latencies = Vec::new();
    for i in 1..=20 {
        let day = format!("2026-11-{i:02}");
        let b = start(&dev, "nl-b", &day).await;
        held_with(&dev, &b, "no run yet").await;
        let a = start(&dev, "nl-a", &day).await;
        if i == 1 {
            // While A's node runs, settle says since when (in the flow's timezone, UTC).
            let held = held_with(&dev, &b, "RUNNING since").await;
            assert!(
                reason(&held, "settle")
                    .starts_with(&format!("waiting for nl-a.publish {day}, RUNNING since "))
            );
        }
        let a_done = dev.finished(&a).await;
        let b_done = dev.finished(&b).await;
        assert_eq!(
            (a_done["status"].as_str(), b_done["status"].as_str()),
            (Some("SUCCESS"), Some("SUCCESS"))
        );
        let latency =
            ms(&b_done["nodes"]["settle"], "started_at") - ms(&a_done["nodes"]["publish"], "finished_at");
        assert!(latency >= 0, "settle started {latency} ms before publish succeeded");
        latencies.push(latency);
    }
    let p99 = crate::support::latency_report("node-level after wake latency, dates (SQLite)", &mut latencies);
    assert!(p99 < 1000, "wake p99 {p99} ms");
}

#[tokio::test]
async fn after_policy_fail_fails_a_node_held_too_long() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: np-a\nnodes:\n  publish: {run: {builtin: noop}}\n").await;
    dev.put_flow(&b_of("np-b", "np-a", "after_policy: {wait: 1s, then: fail}\n")).await;
    let b = start(&dev, "np-b", "2026-12-01").await;
    let done = dev.finished(&b).await;
    assert_eq!(done["status"], "FAILED", "{done}");
    assert_eq!(done["nodes"]["other"]["status"], "SUCCESS", "{done}");
    assert_eq!(done["nodes"]["settle"]["status"], "FAILED", "{done}");
    assert!(reason(&done, "settle").starts_with("after_policy: fail"), "{done}");
    let (_, transitions) = dev.get(&format!("/runs/{b}/transitions")).await;
    let edge = transitions["transitions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["node"] == "settle" && t["to"] == "FAILED")
        .unwrap_or_else(|| panic!("no FAILED edge of settle: {transitions}"));
    assert_eq!(
        (edge["from"].as_str(), edge["cause"].as_str()),
        (Some("INIT"), Some("after_expired")),
        "{edge}"
    );
    let (_, audit) = dev.get("/audit?limit=20").await;
    let entry =
        audit["entries"].as_array().into_iter().flatten().find(|e| e["action"] == "after_policy_fail");
    let entry = entry.unwrap_or_else(|| panic!("no after_policy_fail entry: {audit}"));
    assert_eq!(entry["node"], "settle", "{entry}");
}

/// Two `madeira serve` replicas on one PostgreSQL database (and one Redis for
/// wake-ups): B's runs are created (and held) on one replica, A's run and succeed
/// on the other; the commit of A's node SUCCESS wakes B's holder through its inbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_node_is_released_across_replicas_on_postgres() {
    let port = crate::forwarding::free_port();
    let Some(_redis) = crate::forwarding::Redis::start(port) else { return };
    let Some(pg) = crate::support::pg_replicas(&format!("redis: redis://127.0.0.1:{port}\n"), &[]).await
    else {
        return;
    };
    let (r1, r2) = (&pg.r1, &pg.r2);
    r1.put_flow("flow: pn-a\nnodes:\n  publish: {run: {builtin: sleep, for: 50ms}}\n").await;
    r1.put_flow(&b_of("pn-b", "pn-a", "")).await;
    let mut latencies = Vec::new();
    for i in 1..=10 {
        let day = format!("2026-10-{i:02}");
        let b = start(r2, "pn-b", &day).await;
        held_with(r1, &b, "no run yet").await;
        let a = start(r1, "pn-a", &day).await;
        let a_done = r1.finished(&a).await;
        let b_done = r2.finished(&b).await;
        assert_eq!(
            (a_done["status"].as_str(), b_done["status"].as_str()),
            (Some("SUCCESS"), Some("SUCCESS"))
        );
        let latency =
            ms(&b_done["nodes"]["settle"], "started_at") - ms(&a_done["nodes"]["publish"], "finished_at");
        assert!(latency >= 0, "settle started {latency} ms before publish succeeded on {day}");
        latencies.push(latency);
    }
    latencies.sort_unstable();
    eprintln!(
        "node-level after wake latency, two replicas on PostgreSQL, {} dates: p50 {} ms, max {} ms",
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
    assert!(latencies[latencies.len() - 1] < 2000, "{latencies:?}");
}

/// A run whose node is held behind a FAILED upstream misses its deadline: the
/// miss names the upstream's failed node as the root cause and joins the
/// upstream's failure alert instead of paging on its own (as a held run's does).
#[tokio::test]
async fn a_held_nodes_deadline_miss_names_the_failed_upstream_node_and_joins_its_alert() {
    let hook = crate::webhook::Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "1s");
    let due = chrono::Utc::now() + chrono::Duration::seconds(6);
    let (day, by) = (due.format("%Y-%m-%d").to_string(), due.format("%H:%M:%S").to_string());
    let deadline = format!("timezone: UTC\ndeadline: {{by: \"{by}\", days: 0}}\n");
    dev.put_flow("flow: nh-a\nnodes:\n  publish:\n    retry: {attempts: 1}\n    run: {builtin: fail, message: rates feed down, times: 1}\n").await;
    dev.put_flow(&b_of("nh-b", "nh-a", &deadline)).await;
    let b = start(&dev, "nh-b", &day).await;
    let a = start(&dev, "nh-a", &day).await;
    assert_eq!(dev.finished(&a).await["status"], "FAILED");
    held_with(&dev, &b, "FAILED").await;
    let what = "nh-b's deadline miss";
    let miss = crate::support::wait_until(std::time::Duration::from_secs(30), what, async || {
        let (_, audit) = dev.get("/audit?limit=50").await;
        let entries = audit["entries"].as_array().cloned().unwrap_or_default();
        match entries.into_iter().find(|e| e["action"] == "deadline_missed") {
            Some(miss) => Ok(miss),
            None => Err(audit.to_string()),
        }
    })
    .await;
    let reason = miss["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("node settle is held (waiting for nh-a.publish"), "{miss}");
    assert!(reason.contains(&format!("root cause: nh-a.publish FAILED in run {a}")), "{miss}");
    assert_eq!(miss["details"]["held_by"], json!(a), "{miss}");
    let what = "the miss on A's alert";
    let listed = crate::support::wait_until(std::time::Duration::from_secs(10), what, async || {
        let (_, listed) = dev.get("/alerts").await;
        let alerts = listed["alerts"].as_array().cloned().unwrap_or_default();
        let marked = alerts.iter().flat_map(|a| a["holds"].as_array().cloned().unwrap_or_default());
        if marked.filter(|h| h["flow"] == "nh-b" && h["deadline_missed"].is_string()).count() == 1 {
            Ok(listed)
        } else {
            Err(listed.to_string())
        }
    })
    .await;
    let alerts = listed["alerts"].as_array().cloned().unwrap_or_default();
    assert_eq!(alerts.len(), 1, "one alert, A's: {listed}");
    assert_eq!((alerts[0]["flow"].as_str(), alerts[0]["node"].as_str()), (Some("nh-a"), Some("publish")));
}
