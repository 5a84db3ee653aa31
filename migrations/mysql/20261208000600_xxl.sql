-- The MySQL / MariaDB twin of migrations/postgres/20261208000600_xxl.sql:
-- XXL-JOB executors and callbacks shared by the replicas. Keyed text is VARCHAR(255).
CREATE TABLE xxl_executors (
    app             VARCHAR(255) NOT NULL,
    address         VARCHAR(255) NOT NULL,
    since_ms        BIGINT NOT NULL,
    seen_ms         BIGINT NOT NULL,
    PRIMARY KEY (app, address)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
CREATE TABLE xxl_callbacks (
    log_id          BIGINT NOT NULL,
    app             VARCHAR(255) NOT NULL,
    code            BIGINT NOT NULL,
    msg             LONGTEXT,
    at_ms           BIGINT NOT NULL,
    PRIMARY KEY (log_id, app)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
CREATE INDEX xxl_callbacks_at ON xxl_callbacks(at_ms);
