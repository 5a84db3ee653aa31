//! Routing and sharding on real sidecars (SPEC §4, §4.1): each shard of a sharded
//! node gets its own idempotency key (`…:s<index>`), `route: random` spreads
//! attempts over the group, and `shards: all` runs one attempt per live sidecar.

use serde_json::{Value, json};

use crate::sidecar::{SidecarProc, wait_sidecars};
use crate::support::Dev;

/// A job that outputs who ran it, its shard and its idempotency key.
fn jobs(who: &str) -> String {
    format!(
        "jobs:\n  who:\n    command: [\"/bin/sh\", \"-c\", \"printf '{{\\\"who\\\": \\\"%s\\\", \\\"key\\\": \\\"%s\\\", \\\"index\\\": \\\"%s\\\", \\\"total\\\": \\\"%s\\\"}}' \\\"$WHO\\\" \\\"$MADEIRA_IDEMPOTENCY_KEY\\\" \\\"$MADEIRA_SHARD_INDEX\\\" \\\"$MADEIRA_SHARD_TOTAL\\\" > \\\"$MADEIRA_OUTPUT_FILE\\\"\"]\n    env: {{WHO: {who}}}\n"
    )
}

async fn two_sidecars(dir: &std::path::Path) -> (Dev, SidecarProc, SidecarProc) {
    let dev = Dev::start_with(&dir.join("data"), &[]);
    let a = SidecarProc::start(dir, "r-a", &dev.grpc, &jobs("a"));
    let b = SidecarProc::start(dir, "r-b", &dev.grpc, &jobs("b"));
    wait_sidecars(&dev, "billing", 2).await;
    (dev, a, b)
}

fn shards(run: &Value, node: &str) -> Vec<Value> {
    run["nodes"][node]["outputs"]["shards"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn each_shard_gets_its_own_idempotency_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, _a, _b) = two_sidecars(dir.path()).await;
    dev.put_flow("flow: sharded\nnodes:\n  n: {run: {sidecar: {group: billing, job: who, shards: 3}}}\n")
        .await;
    let run_id = dev.trigger("sharded", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    let outputs = shards(&run, "n");
    assert_eq!(outputs.len(), 3, "{run}");
    for (i, shard) in outputs.iter().enumerate() {
        assert_eq!(shard["key"], format!("{run_id}:n:v1:s{i}"), "{run}");
        assert_eq!((shard["index"].as_str(), shard["total"].as_str()), (Some(&*i.to_string()), Some("3")));
    }
}

#[tokio::test]
async fn route_random_spreads_attempts_over_the_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, _a, _b) = two_sidecars(dir.path()).await;
    dev.put_flow("flow: dice\nnodes:\n  n: {run: {sidecar: {group: billing, job: who, route: random}}}\n")
        .await;
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..24 {
        let run_id = dev.trigger("dice", json!({})).await;
        let run = dev.finished(&run_id).await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
        let who = run["nodes"]["n"]["outputs"]["who"].as_str().unwrap_or("?").to_string();
        *seen.entry(who).or_default() += 1;
    }
    // All 24 on one sidecar has probability 2^-23.
    assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), ["a", "b"], "{seen:?}");
}

#[tokio::test]
async fn shards_all_runs_once_on_every_live_sidecar() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (dev, _a, _b) = two_sidecars(dir.path()).await;
    dev.put_flow(
        "flow: everywhere\nnodes:\n  n: {run: {sidecar: {group: billing, job: who, shards: all}}}\n",
    )
    .await;
    let run_id = dev.trigger("everywhere", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    let outputs = shards(&run, "n");
    let who: Vec<&str> = outputs.iter().filter_map(|s| s["who"].as_str()).collect();
    assert_eq!(who, ["a", "b"], "one attempt per live sidecar, in name order: {run}");
    for (i, shard) in outputs.iter().enumerate() {
        assert_eq!(shard["key"], format!("{run_id}:n:v1:s{i}"), "{run}");
        assert_eq!((shard["index"].as_str(), shard["total"].as_str()), (Some(&*i.to_string()), Some("2")));
    }
}
