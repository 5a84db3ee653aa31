-- Warnings raised once (issue #35: deadline at risk, max_duration exceeded): one
-- row per alert key, written by the replica that raises it under the flow's
-- lock before the alert goes out, so it fires once across restarts and
-- replicas. Same on every backend.
CREATE TABLE fired_once (
    alert_key  TEXT NOT NULL PRIMARY KEY,
    flow       TEXT NOT NULL,
    fired_at   BIGINT NOT NULL
);
