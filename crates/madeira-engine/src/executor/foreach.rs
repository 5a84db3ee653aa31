//! `foreach` attempts: the node's attempt fanned out over its items, each item a
//! shard of the attempt run by the node's own executor (builtin, http, sidecar)
//! under its shard key `…:s<index>`, with the item in its input (`item`,
//! `item_index`; a sidecar job gets `MADEIRA_ITEM`/`MADEIRA_ITEM_INDEX`). At most
//! `max_parallel` items run at once, in item order (`madeira_core::foreach::Fanout`
//! decides); each succeeded item is kept in the store's shard results (the
//! sharded sidecar attempt's machinery), so a retry runs only the items that have
//! not succeeded. The node's outputs are `{"items": [...]}` in item order.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use madeira_core::foreach::{Fanout, ForeachDef, item_key};
use madeira_store::{ShardResult, Store};
use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{AttemptResult, Executors, Job};

/// Runs `job` once per item of `def`.
pub(crate) async fn run(
    executors: Arc<Executors>,
    store: Arc<dyn Store>,
    def: ForeachDef,
    job: Job,
    cancel: CancellationToken,
) -> AttemptResult {
    let empty = Json::Object(Map::new());
    let params = job.input.get("params").unwrap_or(&empty);
    let nodes = job.input.get("nodes").unwrap_or(&empty);
    let biz_date = job.input.get("biz_date").and_then(Json::as_str);
    let items = match def.items(params, nodes, biz_date) {
        Ok(items) => items,
        Err(e) => return AttemptResult::failure(e.to_string(), false),
    };
    let total = items.len();
    let jobs: Vec<Job> = items.iter().enumerate().map(|(i, item)| item_job(&job, i, item)).collect();
    let kept = kept(store.as_ref(), &job, &jobs).await;
    let mut log: String = kept
        .keys()
        .map(|i| format!("--- item {i}/{total}: succeeded earlier, not run again ---\n"))
        .collect();
    let mut fan = Fanout::new(total, def.max_parallel, kept);
    let mut running = FuturesUnordered::new();
    let mut logs: BTreeMap<usize, String> = BTreeMap::new();
    loop {
        while let Some(i) = fan.start_next() {
            let (executors, job, cancel) = (executors.clone(), jobs[i].clone(), cancel.clone());
            running.push(async move { (i, executors.run(job, cancel).await) });
        }
        let Some((i, result)) = running.next().await else { break };
        match result {
            AttemptResult::Success { outputs, log } => {
                keep(store.as_ref(), &jobs[i], i, &outputs).await;
                logs.insert(i, log);
                fan.succeeded(i, outputs);
            }
            AttemptResult::Failure { error, retryable, log } => {
                logs.insert(i, log);
                fan.failed(i, error, retryable);
            }
        }
    }
    for (i, text) in logs {
        log.push_str(&format!("--- item {i}/{total} ---\n{text}"));
    }
    match fan.result() {
        Ok(outputs) => AttemptResult::Success { outputs, log },
        Err((error, retryable)) => AttemptResult::Failure { error, retryable, log },
    }
}

/// Item `index`'s job: the node's job under the item's key, with `item` and
/// `item_index` in its input.
fn item_job(job: &Job, index: usize, item: &Json) -> Job {
    let mut input = match &job.input {
        Json::Object(map) => map.clone(),
        _ => Map::new(),
    };
    input.insert("item".into(), item.clone());
    input.insert("item_index".into(), Json::from(index));
    Job { idempotency_key: item_key(&job.idempotency_key, index), input: Json::Object(input), ..job.clone() }
}

fn input_hash(job: &Job) -> String {
    hex::encode(Sha256::digest(job.input.to_string().as_bytes()))
}

/// Items of this node version that succeeded in an earlier attempt, with the same input.
async fn kept(store: &dyn Store, job: &Job, jobs: &[Job]) -> BTreeMap<usize, Map<String, Json>> {
    let rows = match store.shard_results(&job.run_id, &job.node, &job.idempotency_key).await {
        Ok(rows) => rows,
        Err(e) => {
            warn!(run_id = %job.run_id, node = %job.node, error = %e, "foreach: cannot read kept items; running them all");
            return BTreeMap::new();
        }
    };
    let mut out = BTreeMap::new();
    for row in rows {
        let Some(item) = usize::try_from(row.shard).ok().and_then(|i| jobs.get(i).map(|j| (i, j))) else {
            continue;
        };
        if row.input_hash == input_hash(item.1)
            && let Ok(Json::Object(map)) = serde_json::from_str(&row.outputs)
        {
            out.insert(item.0, map);
        }
    }
    out
}

async fn keep(store: &dyn Store, item: &Job, index: usize, outputs: &Map<String, Json>) {
    let Ok(shard) = u32::try_from(index) else { return };
    let node_key = item.idempotency_key.rsplit_once(":s").map_or(item.idempotency_key.as_str(), |(k, _)| k);
    let row = ShardResult {
        run_id: item.run_id.clone(),
        node: item.node.clone(),
        key: node_key.to_string(),
        shard,
        input_hash: input_hash(item),
        outputs: Json::Object(outputs.clone()).to_string(),
        at_ms: crate::now_ms(),
    };
    if let Err(e) = store.put_shard_result(&row).await {
        warn!(run_id = %item.run_id, node = %item.node, shard, error = %e, "foreach: cannot keep an item's result; a retry runs it again");
    }
}
