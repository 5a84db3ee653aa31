-- The MySQL / MariaDB twin of migrations/postgres/20261204000020_shard_results.sql:
-- the outputs of each succeeded shard of a sharded sidecar attempt, by the node's
-- idempotency key and shard index, with a hash of the job's input. Keyed text is
-- VARCHAR(255) (the key stays under InnoDB's 3072-byte limit); outputs are JSON text.
CREATE TABLE shard_results (
    run_id          VARCHAR(255) NOT NULL,
    node            VARCHAR(255) NOT NULL,
    idem_key        VARCHAR(255) NOT NULL,
    shard           BIGINT NOT NULL,
    input_hash      VARCHAR(255) NOT NULL,
    outputs         LONGTEXT NOT NULL,
    at              BIGINT NOT NULL,
    PRIMARY KEY (run_id, node, idem_key, shard)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
