//! Kept shard results: the outputs of each shard of a sharded sidecar attempt
//! that succeeded, by the node's idempotency key (the same across retries and
//! restarts), so a retry or a control plane restarted between a failed attempt
//! and its retry runs only the shards that have not succeeded. Deleted with
//! their run (`Store::prune`).

/// One succeeded shard of a sharded attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardResult {
    pub run_id: String,
    pub node: String,
    /// The node's idempotency key (without the shard's `:s<index>`).
    pub key: String,
    pub shard: u32,
    /// A hash of the job's input: a shard is only reused for the same input.
    pub input_hash: String,
    /// The shard's outputs, a JSON object.
    pub outputs: String,
    pub at_ms: i64,
}
