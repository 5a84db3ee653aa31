-- The MySQL / MariaDB twin of migrations/postgres/20261207000300_run_waits.sql:
-- what a run's `after:` entries resolved to for its business date (a QUEUED run
-- with an unmet wait is held). Keyed text is VARCHAR(255).
CREATE TABLE run_waits (
    run_id          VARCHAR(255) NOT NULL,
    seq             BIGINT NOT NULL,
    upstream_flow   VARCHAR(255) NOT NULL,
    upstream_node   VARCHAR(255),
    upstream_date   VARCHAR(10) NOT NULL,
    PRIMARY KEY (run_id, seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
CREATE INDEX run_waits_upstream ON run_waits(upstream_flow, upstream_date);
