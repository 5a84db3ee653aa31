-- Smaller store (issue 16): the per-run tables are kept in the order of their
-- keys, WITHOUT ROWID, so a row is stored once instead of once in the table and
-- again in its key's index. SQLite only: MySQL's InnoDB already keeps a table in
-- its primary key's order, and PostgreSQL's schema is unchanged.
--
-- `transitions` is keyed by (run_id, id), which was its `transitions_run` index.
-- Its ids stay unique and increasing across every run: the store takes them from
-- `transition_seq` (the last id given, as `sqlite_sequence` held it for the
-- AUTOINCREMENT key), in the same transaction as the rows. Each table is rebuilt:
-- its rows kept in a temporary table, the table dropped (with its indexes) and
-- created anew, and the rows put back (no ALTER TABLE RENAME, which re-reads the
-- whole schema each time: this way a new store pays ~1 ms for the migration).

CREATE TABLE transition_seq (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    seq             INTEGER NOT NULL            -- the last transition id given
);
INSERT INTO transition_seq (id, seq) SELECT 1, MAX(
    COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'transitions'), 0),
    COALESCE((SELECT MAX(id) FROM transitions), 0));

CREATE TEMP TABLE old_transitions AS SELECT * FROM transitions;
DROP TABLE transitions;
CREATE TABLE transitions (
    run_id          TEXT NOT NULL,
    id              INTEGER NOT NULL,           -- from transition_seq: increasing
    node            TEXT,                       -- NULL for a run-level transition
    from_state      TEXT NOT NULL,
    to_state        TEXT NOT NULL,
    cause           TEXT NOT NULL,
    actor           TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    reason          TEXT,
    at              INTEGER NOT NULL,
    PRIMARY KEY (run_id, id)
) WITHOUT ROWID;
INSERT INTO transitions (run_id, id, node, from_state, to_state, cause, actor, attempt, reason, at)
    SELECT run_id, id, node, from_state, to_state, cause, actor, attempt, reason, at FROM old_transitions;
DROP TABLE old_transitions;

CREATE TEMP TABLE old_nodes AS SELECT * FROM nodes;
DROP TABLE nodes;
CREATE TABLE nodes (
    run_id          TEXT NOT NULL,
    idx             INTEGER NOT NULL,
    node            TEXT NOT NULL,
    state           TEXT NOT NULL,
    reason          TEXT,
    attempt         INTEGER NOT NULL,
    series_start    INTEGER NOT NULL,
    data_version    INTEGER NOT NULL,
    outputs         TEXT NOT NULL,              -- latest outputs (JSON object)
    reads           TEXT NOT NULL,              -- [[upstream idx, data_version], ...]
    stale           INTEGER NOT NULL,
    fallback        INTEGER NOT NULL,
    next_attempt_at INTEGER,
    started_at      INTEGER,
    finished_at     INTEGER,
    PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
INSERT INTO nodes (run_id, idx, node, state, reason, attempt, series_start, data_version, outputs,
        reads, stale, fallback, next_attempt_at, started_at, finished_at)
    SELECT run_id, idx, node, state, reason, attempt, series_start, data_version, outputs,
        reads, stale, fallback, next_attempt_at, started_at, finished_at FROM old_nodes;
DROP TABLE old_nodes;

CREATE TEMP TABLE old_node_outputs AS SELECT * FROM node_outputs;
DROP TABLE node_outputs;
CREATE TABLE node_outputs (
    run_id          TEXT NOT NULL,
    node            TEXT NOT NULL,
    data_version    INTEGER NOT NULL,
    key             TEXT NOT NULL,
    value           TEXT NOT NULL,
    PRIMARY KEY (run_id, node, data_version, key)
) WITHOUT ROWID;
INSERT INTO node_outputs (run_id, node, data_version, key, value)
    SELECT run_id, node, data_version, key, value FROM old_node_outputs;
DROP TABLE old_node_outputs;

CREATE TEMP TABLE old_attempts AS SELECT * FROM attempts;
DROP TABLE attempts;
CREATE TABLE attempts (
    run_id          TEXT NOT NULL,
    node            TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    started_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    outcome         TEXT,                       -- SUCCESS | FAILED | RETRYABLE | ABORTED
    error           TEXT,
    host            TEXT,                       -- replica id or sidecar name(s); NULL: not placed
    PRIMARY KEY (run_id, node, attempt)
) WITHOUT ROWID;
INSERT INTO attempts (run_id, node, attempt, started_at, finished_at, outcome, error, host)
    SELECT run_id, node, attempt, started_at, finished_at, outcome, error, host FROM old_attempts;
DROP TABLE old_attempts;

CREATE TEMP TABLE old_logs AS SELECT * FROM logs;
DROP TABLE logs;
CREATE TABLE logs (
    run_id          TEXT NOT NULL,
    node            TEXT NOT NULL,
    attempt         INTEGER NOT NULL,
    content         TEXT NOT NULL,              -- the last 64 KiB of the attempt's output
    PRIMARY KEY (run_id, node, attempt)
) WITHOUT ROWID;
INSERT INTO logs (run_id, node, attempt, content)
    SELECT run_id, node, attempt, content FROM old_logs;
DROP TABLE old_logs;
