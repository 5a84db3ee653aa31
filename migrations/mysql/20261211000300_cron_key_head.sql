-- The latest cron key of a flow (`last_cron_key`, every scheduler tick and
-- every start) was a filesort of every cron run of the flow: `idempotency_key`
-- is a blob, indexed by its first 255 bytes only, and a prefix index cannot
-- order (31 ms p50, 72 ms p99 at 3M runs, growing with the history). Those
-- bytes as a generated column, indexed with the flow, order it: the latest is
-- the last entry of one index range (a cron key is at most 93 bytes: flow
-- names are at most 63).
ALTER TABLE runs
    ADD COLUMN idempotency_head VARBINARY(255) AS (LEFT(idempotency_key, 255)) VIRTUAL,
    ADD INDEX runs_key_head (flow, idempotency_head);
