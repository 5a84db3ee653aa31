-- Cross-flow waits (issue #36): what a run's `after:` entries resolved to for its
-- business date. A QUEUED run with a wait whose upstream (the flow's run for
-- `upstream_date`, or its node `upstream_node`) is not SUCCESS is held: it is not
-- admitted and counts toward no `max_active_runs`. Whether a wait is met is read
-- from the runs (and nodes) table when admission looks, so the commit that makes
-- the upstream SUCCESS is the one that releases it. `seq`: the entry's order.
CREATE TABLE run_waits (
    run_id          TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    upstream_flow   TEXT NOT NULL,
    upstream_node   TEXT,
    upstream_date   TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX run_waits_upstream ON run_waits(upstream_flow, upstream_date);
