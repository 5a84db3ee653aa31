-- The MySQL / MariaDB twin of migrations/postgres/20261208000200_backfills.sql.
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
    id              VARCHAR(255) NOT NULL PRIMARY KEY,
    flow            VARCHAR(255) NOT NULL,
    date_from       VARCHAR(255),
    date_to         VARCHAR(255),
    calendar        VARCHAR(255),
    dates           TEXT NOT NULL,
    date_order      VARCHAR(255) NOT NULL,
    parallel        BIGINT NOT NULL,
    with_dependents BIGINT NOT NULL,
    rerun           VARCHAR(255) NOT NULL,
    reason          TEXT NOT NULL,
    actor           VARCHAR(255) NOT NULL,
    state           VARCHAR(255) NOT NULL,
    created_at      BIGINT NOT NULL,
    finished_at     BIGINT
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
CREATE INDEX backfills_state ON backfills(state);
CREATE TABLE backfill_steps (
    backfill_id     VARCHAR(255) NOT NULL,
    seq             BIGINT NOT NULL,
    flow            VARCHAR(255) NOT NULL,
    biz_date        VARCHAR(255) NOT NULL,
    waits           TEXT NOT NULL,
    run_id          VARCHAR(255),
    claimed_at      BIGINT,
    outcome         VARCHAR(255),
    note            TEXT,
    PRIMARY KEY (backfill_id, seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
CREATE INDEX backfill_steps_run ON backfill_steps(run_id);
