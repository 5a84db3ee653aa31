-- Flow lifecycle (issue 19), the PostgreSQL twin of
-- migrations/sqlite/20261204000001_flow_lifecycle.sql: a deleted flow keeps its
-- row, versions, runs and audit with `deleted_at` set; events for a paused flow
-- wait in `paused_events`, oldest first, until `resume` starts them.

ALTER TABLE flows ADD COLUMN deleted_at BIGINT;

CREATE TABLE paused_events (
    id              BIGSERIAL PRIMARY KEY,               -- queue order
    flow            TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    payload         TEXT NOT NULL,                       -- JSON object: the run's params
    actor           TEXT NOT NULL,
    queued_at       BIGINT NOT NULL
);
CREATE UNIQUE INDEX paused_events_key ON paused_events(flow, event_type, event_id);
CREATE INDEX paused_events_flow ON paused_events(flow, id);
