-- Throttle permits (`throttle.max_permits`) shared by every replica: one row per
-- run holding a permit of (flow, node). Rows of runs that are no longer RUNNING do
-- not count; a row is deleted in the same commit as the transition that frees it.
CREATE TABLE permits (
    flow            TEXT NOT NULL,
    node            TEXT NOT NULL,
    run_id          TEXT NOT NULL,
    owner           TEXT NOT NULL,
    acquired_at     BIGINT NOT NULL,
    PRIMARY KEY (flow, node, run_id)
);
