-- Flow lifecycle (issue 19): a deleted flow keeps its row, its versions, runs and
-- audit with `deleted_at` set (re-applying the name revives it with the next
-- version number); events for a paused flow wait in `paused_events`, oldest
-- first, until `resume` starts them (`on_paused: queue`, the default).

ALTER TABLE flows ADD COLUMN deleted_at INTEGER;

CREATE TABLE paused_events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,   -- queue order
    flow            TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    payload         TEXT NOT NULL,                       -- JSON object: the run's params
    actor           TEXT NOT NULL,
    queued_at       INTEGER NOT NULL
);
CREATE UNIQUE INDEX paused_events_key ON paused_events(flow, event_type, event_id);
CREATE INDEX paused_events_flow ON paused_events(flow, id);
