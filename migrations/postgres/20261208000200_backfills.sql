-- Backfills (issue #36 item 2): a backfill is an object with an id, the request
-- that made it (flow, dates, order, parallel, with_dependents, rerun, reason,
-- actor) and a state (running, paused, cancelled, done; the table of its changes
-- is madeira_core::estate::progress). Its steps are its (flow, business date)
-- pairs in start order (`seq`, madeira_core::estate::backfill_order) with the
-- steps each waits for (`waits`: comma-separated seqs). A step is claimed
-- (`claimed_at`) by the replica that decides to start it, then linked to its
-- run (`run_id`, made with the idempotency key backfill:ID:FLOW:DATE); one
-- never started says why in `outcome` (skipped, blocked, cancelled, refused)
-- and `note`. Its run's state is read from `runs`.
CREATE TABLE backfills (
    id              TEXT NOT NULL PRIMARY KEY,
    flow            TEXT NOT NULL,
    date_from       TEXT,
    date_to         TEXT,
    calendar        TEXT,
    dates           TEXT NOT NULL,
    date_order      TEXT NOT NULL,
    parallel        BIGINT NOT NULL,
    with_dependents BIGINT NOT NULL,
    rerun           TEXT NOT NULL,
    reason          TEXT NOT NULL,
    actor           TEXT NOT NULL,
    state           TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    finished_at     BIGINT
);
CREATE INDEX backfills_state ON backfills(state);
CREATE TABLE backfill_steps (
    backfill_id     TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    flow            TEXT NOT NULL,
    biz_date        TEXT NOT NULL,
    waits           TEXT NOT NULL,
    run_id          TEXT,
    claimed_at      BIGINT,
    outcome         TEXT,
    note            TEXT,
    PRIMARY KEY (backfill_id, seq)
);
CREATE INDEX backfill_steps_run ON backfill_steps(run_id);
