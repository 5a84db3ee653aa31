-- The outputs of each succeeded shard of a sharded sidecar attempt, by the node's
-- idempotency key (the same across retries and restarts) and shard index, with a
-- hash of the job's input: a retry, or a control plane restarted between a failed
-- attempt and its retry, runs only the shards that have not succeeded (for the
-- same input). Deleted with their run by retention.
CREATE TABLE shard_results (
    run_id          TEXT NOT NULL,
    node            TEXT NOT NULL,
    idem_key        TEXT NOT NULL,
    shard           INTEGER NOT NULL,
    input_hash      TEXT NOT NULL,
    outputs         TEXT NOT NULL,
    at              INTEGER NOT NULL,
    PRIMARY KEY (run_id, node, idem_key, shard)
);
