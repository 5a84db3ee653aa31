-- Core schema, the PostgreSQL twin of migrations/sqlite/20261130000001_core.sql:
-- flows and their versions, runs, node states, the transition log (single exit),
-- outputs per data version, attempts, logs and the audit trail. Same columns and
-- meanings; times are milliseconds since the Unix epoch (UTC) in BIGINT, JSON is
-- kept as TEXT exactly as on SQLite so both backends read and write the same bytes.

CREATE TABLE flows (
    name            TEXT PRIMARY KEY,
    latest_version  BIGINT NOT NULL,
    paused          BOOLEAN NOT NULL DEFAULT FALSE,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);

CREATE TABLE flow_versions (
    flow            TEXT NOT NULL REFERENCES flows(name),
    version         BIGINT NOT NULL,
    source          TEXT NOT NULL,
    content_hash    TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (flow, version)
);

CREATE TABLE runs (
    id              TEXT PRIMARY KEY,           -- UUIDv7: sorts by creation time
    flow            TEXT NOT NULL,
    version         BIGINT NOT NULL,
    state           TEXT NOT NULL,
    params          TEXT NOT NULL,
    idempotency_key TEXT,
    trigger         TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    started_at      BIGINT,
    finished_at     BIGINT
);
CREATE UNIQUE INDEX runs_idempotency ON runs(flow, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_flow_state ON runs(flow, state, id);
CREATE INDEX runs_state ON runs(state);
CREATE INDEX runs_finished ON runs(finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE nodes (
    run_id          TEXT NOT NULL,
    idx             BIGINT NOT NULL,
    node            TEXT NOT NULL,
    state           TEXT NOT NULL,
    reason          TEXT,
    attempt         BIGINT NOT NULL,
    series_start    BIGINT NOT NULL,
    data_version    BIGINT NOT NULL,
    outputs         TEXT NOT NULL,              -- latest outputs (JSON object)
    reads           TEXT NOT NULL,              -- [[upstream idx, data_version], ...]
    stale           BOOLEAN NOT NULL,
    fallback        BOOLEAN NOT NULL,
    next_attempt_at BIGINT,
    started_at      BIGINT,
    finished_at     BIGINT,
    PRIMARY KEY (run_id, idx)
);

CREATE TABLE transitions (
    id              BIGSERIAL PRIMARY KEY,
    run_id          TEXT NOT NULL,
    node            TEXT,                       -- NULL for a run-level transition
    from_state      TEXT NOT NULL,
    to_state        TEXT NOT NULL,
    cause           TEXT NOT NULL,
    actor           TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    reason          TEXT,
    at              BIGINT NOT NULL
);
CREATE INDEX transitions_run ON transitions(run_id, id);

CREATE TABLE node_outputs (
    run_id          TEXT NOT NULL,
    node            TEXT NOT NULL,
    data_version    BIGINT NOT NULL,
    key             TEXT NOT NULL,
    value           TEXT NOT NULL,
    PRIMARY KEY (run_id, node, data_version, key)
);

CREATE TABLE attempts (
    run_id          TEXT NOT NULL,
    node            TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    started_at      BIGINT NOT NULL,
    finished_at     BIGINT,
    outcome         TEXT,                       -- SUCCESS | FAILED | RETRYABLE | ABORTED
    error           TEXT,
    PRIMARY KEY (run_id, node, attempt)
);

CREATE TABLE logs (
    run_id          TEXT NOT NULL,
    node            TEXT NOT NULL,
    attempt         BIGINT NOT NULL,
    content         TEXT NOT NULL,              -- the last 64 KiB of the attempt's output
    PRIMARY KEY (run_id, node, attempt)
);

CREATE TABLE audit (
    id              BIGSERIAL PRIMARY KEY,
    at              BIGINT NOT NULL,
    actor           TEXT NOT NULL,
    action          TEXT NOT NULL,
    run_id          TEXT,
    node            TEXT,
    reason          TEXT,
    details         TEXT
);
CREATE INDEX audit_run ON audit(run_id);
CREATE INDEX audit_at ON audit(at);
