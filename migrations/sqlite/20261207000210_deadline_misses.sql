-- Deadlines (issue #35 item 5): one row per (flow, business date) whose deadline
-- passed without a SUCCESS run, written by the replica that raised the
-- MadeiraDeadlineMissed alert. The key makes the alert fire once, across
-- restarts and replicas. Same on every backend.
CREATE TABLE deadline_misses (
    flow      TEXT NOT NULL,
    biz_date  TEXT NOT NULL,
    fired_at  INTEGER NOT NULL,
    PRIMARY KEY (flow, biz_date)
);
