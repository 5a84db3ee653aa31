//! Stall and slow-node warnings as the alert component sees them: the engine's
//! watch reports nodes past `stall_after` / `warn_after` and when they move on;
//! runs of one flow and node make one warning that resolves once none is left;
//! the store check lets go of runs whose node moved on unreported.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madeira_core::NodeState;
use madeira_engine::NodeWatch;
use madeira_store::StoreError;
use serde_json::json;

use crate::support::{Harness, Mode, Receiver, settings};

const SEC: Duration = Duration::from_secs(1);

fn clock() -> madeira_alert::ManualClock {
    madeira_alert::ManualClock::new(madeira_engine::now_ms())
}

fn watch<'a>(run_id: &'a str, labels: &'a BTreeMap<String, String>, active: bool) -> NodeWatch<'a> {
    NodeWatch {
        run_id,
        flow: "settle",
        node: "export",
        labels,
        after: Duration::from_secs(600),
        reason: Some("no live sidecar of group billing declares job export"),
        attempt: 0,
        active,
    }
}

/// Node states the fake run store answers with (`None`: run ended).
#[derive(Default)]
struct FakeRuns(Mutex<HashMap<String, Option<NodeState>>>);

#[async_trait::async_trait]
impl madeira_alert::NodeProbe for FakeRuns {
    async fn node_state(&self, run_id: &str, _node: &str) -> Result<Option<NodeState>, StoreError> {
        Ok(self.0.lock().expect("runs").get(run_id).cloned().flatten())
    }
}

fn kinds(hook: &Receiver) -> Vec<String> {
    hook.delivered().iter().map(|h| h.body["kind"].as_str().unwrap_or_default().to_string()).collect()
}

#[tokio::test]
async fn stalled_runs_of_one_node_make_one_warning_that_resolves_when_none_is_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let config =
        json!({"group_wait": "1s", "channels": [{"name": "hook", "type": "webhook", "url": hook.url("/h")}]});
    let h = Harness::start(dir.path(), settings(config, &[]), clock()).await;
    let observer = h.handle.observer();
    let labels = BTreeMap::from([("team".to_string(), "billing".to_string())]);
    observer.node_stalled(&watch("run-1", &labels, true));
    observer.node_stalled(&watch("run-2", &labels, true));
    h.advance(2 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing"]);
    let alert = &hook.delivered()[0].body["alerts"][0];
    assert_eq!(alert["alertname"], "MadeiraNodeStalled");
    assert_eq!((alert["severity"].clone(), alert["count"].clone()), (json!("warning"), json!(2)));
    assert_eq!(alert["runs"], json!(["run-1", "run-2"]));
    assert_eq!(alert["labels"], json!({"team": "billing"}));
    assert_eq!(
        alert["summary"],
        "flow settle: node export has waited in INIT for its executor for more than 10m: \
         no live sidecar of group billing declares job export"
    );
    observer.node_stalled(&watch("run-1", &labels, false));
    h.advance(2 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing"], "run-2 still waits");
    observer.node_stalled(&watch("run-2", &labels, false));
    h.advance(2 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing", "resolved"]);
    let text = hook.delivered()[1].body["text"].as_str().unwrap_or_default().to_string();
    assert!(text.contains("the condition cleared"), "{text}");
    // A slow node is its own alert (another key), resolved the same way.
    observer.node_slow(&watch("run-3", &labels, true));
    h.advance(2 * SEC, SEC).await;
    assert_eq!(hook.delivered()[2].body["alerts"][0]["alertname"], "MadeiraNodeSlow");
    observer.node_slow(&watch("run-3", &labels, false));
    h.advance(2 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing", "resolved", "firing", "resolved"]);
    h.stop().await;
}

#[tokio::test]
async fn the_store_check_lets_go_of_runs_whose_node_moved_on_unreported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = Receiver::start(Mode::Ok).await;
    let config =
        json!({"group_wait": "1s", "channels": [{"name": "hook", "type": "webhook", "url": hook.url("/h")}]});
    let runs = Arc::new(FakeRuns::default());
    runs.0.lock().expect("runs").insert("run-1".into(), Some(NodeState::Init));
    runs.0.lock().expect("runs").insert("run-2".into(), Some(NodeState::Init));
    let h = Harness::start_with(dir.path(), settings(config, &[]), clock(), Some(runs.clone())).await;
    let labels = BTreeMap::new();
    h.handle.observer().node_stalled(&watch("run-1", &labels, true));
    h.handle.observer().node_stalled(&watch("run-2", &labels, true));
    h.advance(2 * SEC, SEC).await;
    assert_eq!(kinds(&hook), ["firing"]);
    // The reporting replica dies; the runs move on elsewhere and nobody says so.
    runs.0.lock().expect("runs").insert("run-1".into(), Some(NodeState::Running));
    h.advance(30 * SEC, 5 * SEC).await;
    assert_eq!(kinds(&hook), ["firing"], "run-2 is still INIT");
    runs.0.lock().expect("runs").insert("run-2".into(), None);
    h.advance(30 * SEC, 5 * SEC).await;
    // The check runs on the task's own wake-up: wait for it rather than race it.
    crate::support::wait_for("resolved by the store check", || kinds(&hook).len() == 2).await;
    assert_eq!(kinds(&hook), ["firing", "resolved"], "the run ended: nothing is stalled any more");
    h.stop().await;
}
