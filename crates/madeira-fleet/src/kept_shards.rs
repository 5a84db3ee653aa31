//! Succeeded shards of a sharded attempt, kept so that a retry — also one after
//! a control-plane restart between a failed attempt and its retry — runs only the
//! shards that have not succeeded. With an engine attached they are kept in its
//! store (`shard_results`), each written as its shard succeeds and before the
//! attempt's end is committed (so before its result is acknowledged to the
//! sidecar); in memory without an engine, or when that write fails (then a
//! restart runs the shard again, under its same `…:s<index>` key). A shard is
//! reused only for the same node idempotency key and the same job input.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use madeira_engine::Job;
use madeira_store::ShardResult;
use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};
use tracing::warn;

use crate::Fleet;

type Outputs = BTreeMap<u32, Map<String, Json>>;

#[derive(Default)]
pub(crate) struct KeptShards {
    /// By node idempotency key: the input's hash and the succeeded shards.
    memory: Mutex<HashMap<String, (String, Outputs)>>,
}

impl KeptShards {
    fn memory(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Outputs)>> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shards of `job`'s attempt that already succeeded, with their outputs.
    pub(crate) async fn load(&self, fleet: &Fleet, job: &Job) -> Outputs {
        let hash = input_hash(job);
        let mut done: Outputs = match self.memory().get(&job.idempotency_key) {
            Some((h, outputs)) if *h == hash => outputs.clone(),
            _ => BTreeMap::new(),
        };
        let Some(engine) = fleet.inner.engine.get() else {
            return done;
        };
        match engine.runs.shard_results(&job.run_id, &job.node, &job.idempotency_key).await {
            Ok(rows) => {
                for row in rows.into_iter().filter(|r| r.input_hash == hash) {
                    if let Ok(Json::Object(map)) = serde_json::from_str(&row.outputs) {
                        done.entry(row.shard).or_insert(map);
                    }
                }
            }
            Err(e) => {
                warn!(run_id = %job.run_id, node = %job.node, error = %e, "cannot read kept shard results; running every shard not kept in memory");
            }
        }
        done
    }

    /// Keeps `shard`'s outputs (it succeeded).
    pub(crate) async fn keep(&self, fleet: &Fleet, job: &Job, shard: u32, outputs: &Map<String, Json>) {
        let hash = input_hash(job);
        if let Some(engine) = fleet.inner.engine.get() {
            let row = ShardResult {
                run_id: job.run_id.clone(),
                node: job.node.clone(),
                key: job.idempotency_key.clone(),
                shard,
                input_hash: hash.clone(),
                outputs: Json::Object(outputs.clone()).to_string(),
                at_ms: madeira_engine::now_ms(),
            };
            match engine.runs.put_shard_result(&row).await {
                Ok(()) => return,
                Err(e) => {
                    warn!(run_id = %job.run_id, node = %job.node, shard, error = %e, "cannot keep a shard's result in the store; kept in memory only");
                }
            }
        }
        let mut memory = self.memory();
        let entry =
            memory.entry(job.idempotency_key.clone()).or_insert_with(|| (hash.clone(), BTreeMap::new()));
        if entry.0 != hash {
            *entry = (hash, BTreeMap::new());
        }
        entry.1.insert(shard, outputs.clone());
    }

    /// Every shard of `job` succeeded: nothing more to keep in memory (the
    /// store's rows go with their run).
    pub(crate) fn forget(&self, job: &Job) {
        self.memory().remove(&job.idempotency_key);
    }
}

fn input_hash(job: &Job) -> String {
    hex::encode(Sha256::digest(job.input.to_string().as_bytes()))
}
