//! Events for paused flows are not swallowed (issue 19 item 5): kept in the store
//! (`on_paused: queue`, the default) through a restart and started on resume in
//! order with their keys, so a replay makes no second run; dropped and audited
//! with `on_paused: drop`; refused with 429 once `max_queued` wait.

use serde_json::{Value, json};

use crate::support::Dev;

const LISTENERS: [&str; 3] = [
    "flow: kept\ntriggers:\n  - event: batch.closed\nnodes:\n  a: {run: {builtin: noop}}\n",
    "flow: dropped\ntriggers:\n  - event: batch.closed\n    on_paused: drop\nnodes:\n  a: {run: {builtin: noop}}\n",
    "flow: live\ntriggers:\n  - event: batch.closed\nnodes:\n  a: {run: {builtin: noop}}\n",
];

fn event(id: &str, batch: u32) -> Value {
    json!({"type": "batch.closed", "id": id, "payload": {"batch": batch}})
}

async fn run_ids(dev: &Dev, flow: &str) -> Vec<String> {
    let (_, list) = dev.get(&format!("/runs?flow={flow}")).await;
    list["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["run_id"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn an_event_for_a_paused_flow_runs_after_resume_even_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = Dev::start_in(dir.path());
    for flow in LISTENERS {
        dev.put_flow(flow).await;
    }
    for flow in ["kept", "dropped"] {
        let (status, _) = dev.post(&format!("/flows/{flow}/pause"), json!({}), &[]).await;
        assert_eq!(status, 200);
    }
    let (status, first) = dev.post("/events", event("e1", 1), &[]).await;
    assert_eq!(status, 202, "kept for a paused flow: {first}");
    assert_eq!(first["queued"][0]["flow"], "kept");
    assert_eq!(
        (first["queued"][0]["position"].as_u64(), &first["queued"][0]["created"]),
        (Some(1), &json!(true))
    );
    assert_eq!(first["dropped"], json!(["dropped"]));
    assert_eq!(first["runs"].as_array().map(Vec::len), Some(1), "the unpaused listener ran: {first}");
    let (status, again) = dev.post("/events", event("e1", 1), &[]).await;
    assert_eq!(
        (status, &again["queued"][0]["created"], &again["runs"]),
        (202, &json!(false), &first["runs"])
    );
    let (_, second) = dev.post("/events", event("e2", 2), &[]).await;
    assert_eq!(second["queued"][0]["position"], 2);
    assert!(run_ids(&dev, "kept").await.is_empty(), "a paused flow ran");
    let (_, flow) = dev.get("/flows/kept").await;
    assert_eq!(flow["queued_events"], 2, "{flow}");

    dev.kill9();
    let dev = Dev::start_in(dir.path());
    let (status, resumed) = dev.post("/flows/kept/resume", json!({}), &[]).await;
    assert_eq!((status, &resumed["queued_events"]), (200, &json!(0)), "{resumed}");
    let started: Vec<String> = resumed["started"]
        .as_array()
        .expect("started")
        .iter()
        .filter_map(|r| r.as_str().map(str::to_string))
        .collect();
    assert_eq!(started.len(), 2, "both kept events started after the restart: {resumed}");
    for (run_id, (id, batch)) in started.iter().zip([("e1", 1), ("e2", 2)]) {
        let run = dev.finished(run_id).await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
        assert_eq!(run["params"]["batch"], batch, "started in queue order: {run}");
        assert_eq!(run["idempotency_key"], format!("event:batch.closed:{id}"));
    }
    // A replay after the resume finds the runs its key made: no second run.
    let (status, replay) = dev.post("/events", event("e1", 1), &[]).await;
    assert_eq!(status, 200, "{replay}");
    let replayed: Vec<&str> =
        replay["runs"].as_array().expect("runs").iter().filter_map(Value::as_str).collect();
    assert!(replayed.contains(&started[0].as_str()), "{replay}");
    assert_eq!(run_ids(&dev, "kept").await.len(), 2);

    let (_, resumed) = dev.post("/flows/dropped/resume", json!({}), &[]).await;
    assert_eq!(resumed["started"], json!([]));
    assert!(run_ids(&dev, "dropped").await.is_empty(), "on_paused: drop started an event");
    let (_, audit) = dev.get("/audit?limit=100").await;
    let drops = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "event_dropped")
        .count();
    assert_eq!(drops, 4, "each dropped delivery (e1 three times, e2 once) is audited: {audit}");

    let (status, unknown) = dev.post("/events", json!({"type": "batch.close", "id": "x"}), &[]).await;
    assert_eq!((status, &unknown["error"]["code"]), (404, &json!("no_listener")), "{unknown}");
    assert_eq!(unknown["error"]["details"]["known_types"], json!(["batch.closed"]));
}

#[tokio::test]
async fn a_full_queue_refuses_with_429_and_resume_starts_what_it_kept() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: small\ntriggers:\n  - event: tick\n    max_queued: 2\nnodes:\n  a: {run: {builtin: noop}}\n",
    )
    .await;
    let out = dev.cli(&["pause", "small"]);
    assert!(out.status.success(), "{out:?}");
    for id in ["1", "2"] {
        let (status, body) = dev.post("/events", json!({"type": "tick", "id": id}), &[]).await;
        assert_eq!(status, 202, "{body}");
    }
    let (status, full) = dev.post("/events", json!({"type": "tick", "id": "3"}), &[]).await;
    assert_eq!((status, &full["error"]["code"]), (429, &json!("paused_queue_full")), "{full}");
    assert_eq!(
        (&full["error"]["details"]["queued"], &full["error"]["details"]["max_queued"]),
        (&json!(2), &json!(2))
    );
    let message = full["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("resume it, raise the trigger's max_queued"), "{message}");
    let out = dev.cli(&["resume", "small", "--output", "json"]);
    assert!(out.status.success(), "{out:?}");
    let resumed: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(resumed["started"].as_array().map(Vec::len), Some(2), "{resumed}");
    let out = dev.cli(&["pause", "small"]);
    assert!(out.status.success());
    dev.post("/events", json!({"type": "tick", "id": "4"}), &[]).await;
    let out = dev.cli(&["resume", "small"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("flow small resumed; started 1 event(s) kept while paused"), "{said}");
}
