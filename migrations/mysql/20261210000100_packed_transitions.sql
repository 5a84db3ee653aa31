-- The transition log packed (issue 39, storage): one row per run and write
-- instead of one per transition, its transitions in `entries`, a JSON array of
-- short arrays `[node, from, to, cause, attempt, dt, actor, reason]` whose
-- states and causes are small codes (crates/madeira-store/src/packed.rs gives
-- them, and the CASEs below repeat them), `dt` the milliseconds since the
-- previous entry (the row's `at` for the first). Existing rows become one row
-- per run, in their order, keeping the largest id the run had, so rows written
-- after this sort after them.
-- The id stays the clustered key (AUTO_INCREMENT must lead an index), the run's
-- rows found through transitions_run. GROUP_CONCAT (not JSON_ARRAYAGG, which
-- MySQL 8 cannot order) with no length limit for this session.

SET SESSION group_concat_max_len = 4294967295;

CREATE TABLE transitions_packed (
    id              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id          VARCHAR(255) NOT NULL,
    at              BIGINT NOT NULL,                    -- of the first entry
    entries         LONGTEXT NOT NULL,                  -- JSON, see above
    KEY transitions_packed_run (run_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

INSERT INTO transitions_packed (id, run_id, at, entries)
SELECT MAX(id), run_id, MIN(first_at),
       CONCAT('[', GROUP_CONCAT(JSON_ARRAY(node, f, t, c, attempt, dt, actor, reason) ORDER BY id SEPARATOR ','), ']')
FROM (
    SELECT run_id, id, node, actor, attempt, reason, at,
           at - COALESCE(LAG(at) OVER (PARTITION BY run_id ORDER BY id), at) AS dt,
           FIRST_VALUE(at) OVER (PARTITION BY run_id ORDER BY id) AS first_at,
           CASE WHEN node IS NULL THEN CASE from_state WHEN 'NONE' THEN 0 WHEN 'QUEUED' THEN 1 WHEN 'ADMITTED' THEN 2 WHEN 'RUNNING' THEN 3 WHEN 'SUCCESS' THEN 4 WHEN 'FAILED' THEN 5 WHEN 'CANCELLED' THEN 6 END
                ELSE CASE from_state WHEN 'INIT' THEN 0 WHEN 'RUNNING' THEN 1 WHEN 'SUCCESS' THEN 2 WHEN 'FAILED' THEN 3 WHEN 'RETRYING' THEN 4 WHEN 'SKIPPED' THEN 5 WHEN 'MANUAL_CONFIRM' THEN 6 END END AS f,
           CASE WHEN node IS NULL THEN CASE to_state WHEN 'NONE' THEN 0 WHEN 'QUEUED' THEN 1 WHEN 'ADMITTED' THEN 2 WHEN 'RUNNING' THEN 3 WHEN 'SUCCESS' THEN 4 WHEN 'FAILED' THEN 5 WHEN 'CANCELLED' THEN 6 END
                ELSE CASE to_state WHEN 'INIT' THEN 0 WHEN 'RUNNING' THEN 1 WHEN 'SUCCESS' THEN 2 WHEN 'FAILED' THEN 3 WHEN 'RETRYING' THEN 4 WHEN 'SKIPPED' THEN 5 WHEN 'MANUAL_CONFIRM' THEN 6 END END AS t,
           CASE WHEN node IS NULL THEN CASE cause WHEN 'created' THEN 0 WHEN 'admitted' THEN 1 WHEN 'started' THEN 2 WHEN 'succeeded' THEN 3 WHEN 'failed' THEN 4 WHEN 'cancel' THEN 5 WHEN 'reactivated' THEN 6 END
                ELSE CASE cause WHEN 'dispatch' THEN 0 WHEN 'succeeded' THEN 1 WHEN 'attempt_failed' THEN 2 WHEN 'retry_scheduled' THEN 3 WHEN 'retry_due' THEN 4 WHEN 'upstream_failed' THEN 5 WHEN 'upstream_skipped' THEN 6 WHEN 'condition_false' THEN 7 WHEN 'condition_error' THEN 8 WHEN 'await_confirm' THEN 9 WHEN 'confirm' THEN 10 WHEN 'reject' THEN 11 WHEN 'fallback' THEN 12 WHEN 'fallback_skip' THEN 13 WHEN 'rerun' THEN 14 WHEN 'mark_success' THEN 15 WHEN 'reactivated' THEN 16 WHEN 'skip' THEN 17 WHEN 'run_cancelled' THEN 18 WHEN 'recovered' THEN 19 WHEN 'after_expired' THEN 20 WHEN 'after_skipped' THEN 21 END END AS c
    FROM transitions
) AS old
GROUP BY run_id;

DROP TABLE transitions;
RENAME TABLE transitions_packed TO transitions;
ALTER TABLE transitions RENAME INDEX transitions_packed_run TO transitions_run;
