-- The MySQL / MariaDB twin of migrations/postgres/20261209000100_node_waits.sql:
-- what one node's `after:` entries resolved to for its run's business date (the
-- node stays INIT while one is not SUCCESS). Keyed text is VARCHAR(255).
CREATE TABLE node_waits (
    run_id          VARCHAR(255) NOT NULL,
    node            VARCHAR(255) NOT NULL,
    seq             BIGINT NOT NULL,
    upstream_flow   VARCHAR(255) NOT NULL,
    upstream_node   VARCHAR(255),
    upstream_date   VARCHAR(10) NOT NULL,
    PRIMARY KEY (run_id, node, seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
CREATE INDEX node_waits_upstream ON node_waits(upstream_flow, upstream_date);
