-- Node-level `after:` (issue #36): what one node's `after:` entries resolved to for
-- its run's business date. The run starts as usual; the node stays INIT while a
-- wait's upstream (the flow's run for `upstream_date`, or its node
-- `upstream_node`) is not SUCCESS, read from the runs (and nodes) table, so the
-- commit that makes the upstream SUCCESS is the one that makes the node startable.
-- `seq`: the entry's order among the node's.
CREATE TABLE node_waits (
    run_id          TEXT NOT NULL,
    node            TEXT NOT NULL,
    seq             BIGINT NOT NULL,
    upstream_flow   TEXT NOT NULL,
    upstream_node   TEXT,
    upstream_date   TEXT NOT NULL,
    PRIMARY KEY (run_id, node, seq)
);
CREATE INDEX node_waits_upstream ON node_waits(upstream_flow, upstream_date);
