-- The transition log packed (issue 39, storage): one row per run and write
-- instead of one per transition, its transitions in `entries`, a JSON array of
-- short arrays `[node, from, to, cause, attempt, dt, actor, reason]` whose
-- states and causes are small codes (crates/madeira-store/src/packed.rs gives
-- them, and the CASEs below repeat them), `dt` the milliseconds since the
-- previous entry (the row's `at` for the first). Existing rows become one row
-- per run, in their order, keeping the largest id the run had, so rows written
-- after this sort after them.

CREATE TABLE transitions_packed (
    run_id          TEXT NOT NULL,
    id              BIGINT NOT NULL,
    at              BIGINT NOT NULL,            -- of the first entry
    entries         TEXT NOT NULL,              -- JSON, see above
    PRIMARY KEY (run_id, id)
);

INSERT INTO transitions_packed (run_id, id, at, entries)
SELECT run_id, MAX(id), MIN(first_at),
       json_agg(json_build_array(node, f, t, c, attempt, dt, actor, reason) ORDER BY id)::text
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
ALTER TABLE transitions_packed RENAME TO transitions;
ALTER TABLE transitions RENAME CONSTRAINT transitions_packed_pkey TO transitions_pkey;
CREATE SEQUENCE transitions_id_seq OWNED BY transitions.id;
SELECT setval('transitions_id_seq', COALESCE((SELECT MAX(id) FROM transitions), 0) + 1, false);
ALTER TABLE transitions ALTER COLUMN id SET DEFAULT nextval('transitions_id_seq');
