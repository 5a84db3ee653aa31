-- Operator actions forwarded to the replica that holds the run: the receiving
-- replica writes the request here and wakes the holder; the holder applies it
-- through its engine (the single exit) and writes the answer back.
CREATE TABLE run_commands (
    id              BIGSERIAL PRIMARY KEY,
    run_id          TEXT NOT NULL,
    target          TEXT NOT NULL,              -- the holder's replica_id
    action          TEXT NOT NULL,              -- confirm | reject | rerun | rerun_downstream | mark_success | skip | cancel
    node            TEXT,
    actor           TEXT NOT NULL,
    reason          TEXT,
    created_at      BIGINT NOT NULL,
    taken_at        BIGINT,
    answered_at     BIGINT,
    answer          TEXT                        -- JSON
);
CREATE INDEX run_commands_target ON run_commands(target, id) WHERE taken_at IS NULL;
