//! The control plane built in-process, as `madeira dev` builds it, on a listener
//! the test bound itself (127.0.0.1:0) and a fresh SQLite store: a flow applied and
//! run over real HTTP ends SUCCESS. No separate process, no port guessing.

use std::time::Duration;

use madeira_app::app::sqlite_url_in;
use madeira_app::{ControlPlane, PlaneOptions};
use serde_json::{Value, json};
use tokio::net::TcpListener;

const FLOW: &str = "flow: in-process\nnodes:\n  extract: {run: {builtin: noop}}\n  load:\n    needs: [extract]\n    run: {builtin: noop}\n";

fn options(store_url: String) -> PlaneOptions {
    PlaneOptions {
        store_url,
        observers: Vec::new(),
        engine: Default::default(),
        auth: Default::default(),
        http: None,
        http_tls: None,
        alerts: Default::default(),
        telemetry: madeira_telemetry::TelemetryOptions { metrics: false, ..Default::default() },
        fleet: None,
        shutdown_grace: Duration::from_secs(5),
        datasources: Vec::new(),
        sources: Vec::new(),
        scheduler_clock: None,
        xxl: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_applied_and_run_over_http_succeeds_in_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let store = sqlite_url_in(dir.path()).expect("store url");
    let plane = ControlPlane::start_on(options(store), listener).await.expect("control plane");
    assert_eq!(plane.http_addr, Some(addr), "the plane serves on the listener it was given");
    let api = format!("http://{addr}/api/v1");
    let http = reqwest::Client::new();

    let applied = http.put(format!("{api}/flows/in-process")).body(FLOW).send().await.expect("PUT flow");
    assert_eq!(applied.status(), 201, "{}", applied.text().await.unwrap_or_default());

    // Committed transitions, subscribed before the run exists: the run's end is a
    // signal to wait for, not a state to poll.
    let mut events = plane.engine.subscribe();
    let started = http
        .post(format!("{api}/flows/in-process/runs"))
        .json(&json!({"params": {"day": "2026-12-08"}}))
        .send()
        .await
        .expect("POST run");
    assert_eq!(started.status(), 201);
    let run_id = started.json::<Value>().await.expect("json")["run_id"].as_str().expect("run_id").to_string();
    let finished = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let event = events.recv().await.expect("the engine's transitions");
            if event.run_id == run_id && event.node.is_none() && event.to != "RUNNING" {
                break event.to.clone();
            }
        }
    })
    .await
    .expect("the run ends within 20 s");
    assert_eq!(finished, "SUCCESS");

    let run: Value =
        http.get(format!("{api}/runs/{run_id}")).send().await.expect("GET run").json().await.expect("json");
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["params"]["day"], "2026-12-08");
    for node in ["extract", "load"] {
        assert_eq!(run["nodes"][node]["status"], "SUCCESS", "{node}: {run}");
    }
    plane.shutdown().await;
    assert!(TcpListener::bind(addr).await.is_ok(), "shutdown released the API's port");
}
