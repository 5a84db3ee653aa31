//! The web console served by the real binary: `madeira dev` answers `/` with HTML
//! next to `/api/v1`, a run page names its nodes, the live stream carries the
//! run's transitions, and `madeira demo` prints the console URL.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::{BIN, Dev};

const FLOW: &str = "flow: web\nnodes:\n  first: {run: {builtin: noop}}\n  second: {needs: [first], run: {builtin: sleep, for: 300ms}}\n";

#[tokio::test]
async fn dev_serves_the_console_next_to_the_api() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(FLOW).await;
    let home = dev.http.get(format!("{}/", dev.base)).send().await.expect("get /");
    assert_eq!(home.status(), 200);
    assert!(home.headers()["content-type"].to_str().expect("ascii").starts_with("text/html"));
    assert!(home.text().await.expect("body").contains("Madeira"));
    // The live stream of all runs, opened before the run starts.
    let mut events = dev.http.get(format!("{}/events", dev.base)).send().await.expect("events");
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let run = dev.trigger("web", json!({})).await;
    let mut seen = String::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while !(seen.contains("\"second\"") && seen.contains("\"SUCCESS\"") && seen.contains("\"node\":null"))
        {
            let chunk = events.chunk().await.expect("chunk").expect("stream open");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the run's transitions reach the stream: {seen}"));
    assert!(seen.contains(&run));
    let page = dev.http.get(format!("{}/runs/{run}", dev.base)).send().await.expect("run page");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("body");
    assert!(
        html.contains("id=\"n-first\"")
            && html.contains("id=\"n-second\"")
            && html.contains("id=\"e-first-second\"")
    );
    let api = dev.http.get(dev.url("/nope")).send().await.expect("api 404");
    assert_eq!(api.status(), 404);
    assert!(api.text().await.expect("body").contains("\"code\":\"not_found\""), "the API keeps its JSON 404");
}

#[test]
fn demo_prints_the_console_url() {
    let out = Command::new(BIN).arg("demo").output().expect("run demo");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Web console: http://127.0.0.1:"), "{text}");
    // The console is gone when the demo exits: it says so and points to --keep,
    // never to a `madeira show` against a store that no longer exists.
    assert!(text.contains("`madeira demo --keep` keeps it open"), "{text}");
    assert!(text.contains("run `madeira demo --keep` to browse these runs"), "{text}");
    assert!(!text.contains("against `madeira dev`"), "{text}");
    // A retry shows how long the attempt ran, and cut output says how much is left.
    assert!(text.contains("RUNNING → RETRYING (ran "), "{text}");
    assert!(text.contains("more line(s): madeira logs "), "{text}");
}
