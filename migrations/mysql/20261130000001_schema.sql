-- The whole schema for MySQL 8 / MariaDB >= 10.6, the twin of every file under
-- migrations/postgres (core, alerts, trace, leases, run commands, permits, alert
-- inbox, sidecar presence, store probe) as one file. Same tables, columns and
-- meanings; times are milliseconds since the Unix epoch (UTC) in BIGINT, JSON is
-- kept as text exactly as on the other backends. InnoDB, utf8mb4.
--
-- Differences forced by MySQL, none visible to Madeira:
-- - keyed text is VARCHAR(255) (TEXT cannot be a key without a length); flow and
--   node names are at most 63 characters, ids are UUIDs;
-- - the default collation (utf8mb4_unicode_ci) is kept for names and ids, which
--   Madeira writes in lowercase; the two keys that users write freely and that
--   must compare byte for byte (an idempotency key, an output key) are stored as
--   bytes (MEDIUMBLOB) with a SHA-256 column that carries their uniqueness;
-- - `key`, `trigger` and `reads` are reserved words: the store's SQL quotes them
--   ("…", read as identifiers under the ANSI_QUOTES mode each connection sets);
-- - partial indexes are plain ones (a unique index allows several NULLs anyway);
-- - `store_locks` stands in for PostgreSQL's advisory locks: one row per slot of
--   each lock space, locked with SELECT … FOR UPDATE until the transaction ends.

CREATE TABLE flows (
    name            VARCHAR(255) NOT NULL PRIMARY KEY,
    latest_version  BIGINT NOT NULL,
    paused          BOOLEAN NOT NULL DEFAULT FALSE,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE flow_versions (
    flow            VARCHAR(255) NOT NULL,
    version         BIGINT NOT NULL,
    source          LONGTEXT NOT NULL,
    content_hash    VARCHAR(255) NOT NULL,
    created_at      BIGINT NOT NULL,
    PRIMARY KEY (flow, version),
    FOREIGN KEY (flow) REFERENCES flows(name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE runs (
    id              VARCHAR(255) NOT NULL PRIMARY KEY,  -- UUIDv7: sorts by creation time
    flow            VARCHAR(255) NOT NULL,
    version         BIGINT NOT NULL,
    state           VARCHAR(16) NOT NULL,
    params          LONGTEXT NOT NULL,
    idempotency_key MEDIUMBLOB,                         -- compared byte for byte
    idempotency_hash BINARY(32) AS (UNHEX(SHA2(idempotency_key, 256))) STORED,
    "trigger"       VARCHAR(255) NOT NULL,
    created_at      BIGINT NOT NULL,
    started_at      BIGINT,
    finished_at     BIGINT,
    trace_context   LONGTEXT,
    owner           VARCHAR(255),
    lease_until     BIGINT,
    UNIQUE KEY runs_idempotency (flow, idempotency_hash),
    KEY runs_idempotency_lookup (flow, idempotency_key(255)),
    KEY runs_flow_state (flow, state, id),
    KEY runs_state (state),
    KEY runs_finished (finished_at),
    KEY runs_owner (owner)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE nodes (
    run_id          VARCHAR(255) NOT NULL,
    idx             BIGINT NOT NULL,
    node            VARCHAR(255) NOT NULL,
    state           VARCHAR(16) NOT NULL,
    reason          LONGTEXT,
    attempt         BIGINT NOT NULL,
    series_start    BIGINT NOT NULL,
    data_version    BIGINT NOT NULL,
    outputs         LONGTEXT NOT NULL,                  -- latest outputs (JSON object)
    "reads"         LONGTEXT NOT NULL,                  -- [[upstream idx, data_version], ...]
    stale           BOOLEAN NOT NULL,
    fallback        BOOLEAN NOT NULL,
    next_attempt_at BIGINT,
    started_at      BIGINT,
    finished_at     BIGINT,
    PRIMARY KEY (run_id, idx)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE transitions (
    id              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id          VARCHAR(255) NOT NULL,
    node            VARCHAR(255),                       -- NULL for a run-level transition
    from_state      VARCHAR(32) NOT NULL,
    to_state        VARCHAR(32) NOT NULL,
    cause           VARCHAR(255) NOT NULL,
    actor           VARCHAR(255) NOT NULL,
    attempt         BIGINT NOT NULL,
    reason          LONGTEXT,
    at              BIGINT NOT NULL,
    KEY transitions_run (run_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE node_outputs (
    run_id          VARCHAR(255) NOT NULL,
    node            VARCHAR(255) NOT NULL,
    data_version    BIGINT NOT NULL,
    "key"           MEDIUMBLOB NOT NULL,                -- compared byte for byte
    key_hash        BINARY(32) AS (UNHEX(SHA2("key", 256))) STORED,
    value           LONGTEXT NOT NULL,
    UNIQUE KEY node_outputs_key (run_id, node, data_version, key_hash)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE attempts (
    run_id          VARCHAR(255) NOT NULL,
    node            VARCHAR(255) NOT NULL,
    attempt         BIGINT NOT NULL,
    started_at      BIGINT NOT NULL,
    finished_at     BIGINT,
    outcome         VARCHAR(32),                        -- SUCCESS | FAILED | RETRYABLE | ABORTED
    error           LONGTEXT,
    PRIMARY KEY (run_id, node, attempt)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE logs (
    run_id          VARCHAR(255) NOT NULL,
    node            VARCHAR(255) NOT NULL,
    attempt         BIGINT NOT NULL,
    content         LONGTEXT NOT NULL,                  -- the last 64 KiB of the attempt's output
    PRIMARY KEY (run_id, node, attempt)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE audit (
    id              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at              BIGINT NOT NULL,
    actor           VARCHAR(255) NOT NULL,
    action          VARCHAR(255) NOT NULL,
    run_id          VARCHAR(255),
    node            VARCHAR(255),
    reason          LONGTEXT,
    details         LONGTEXT,
    KEY audit_run (run_id),
    KEY audit_at (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE alerts (
    id              VARCHAR(255) NOT NULL PRIMARY KEY,  -- UUIDv7
    "key"           LONGTEXT NOT NULL,                  -- grouping key (flow, root node, error class)
    severity        VARCHAR(32) NOT NULL,               -- critical | warning
    status          VARCHAR(32) NOT NULL,               -- pending (gathering) | firing | resolved
    flow            VARCHAR(255),
    node            VARCHAR(255),
    details         LONGTEXT NOT NULL,                  -- JSON: summary, error, runs, attempts, skipped, labels
    created_at      BIGINT NOT NULL,
    notify_at       BIGINT NOT NULL,                    -- end of group_wait
    updated_at      BIGINT NOT NULL,
    resolved_at     BIGINT,
    KEY alerts_status (status, id),
    KEY alerts_resolved (resolved_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE alert_deliveries (
    id              VARCHAR(255) NOT NULL PRIMARY KEY,  -- UUIDv7: sorts by creation time
    alert_id        VARCHAR(255),                       -- NULL for a digest or a test message
    channel         VARCHAR(255) NOT NULL,
    kind            VARCHAR(32) NOT NULL,               -- firing | resolved | digest | test
    status          VARCHAR(32) NOT NULL,               -- pending | sent | merged | failed
    attempts        BIGINT NOT NULL,
    last_error      LONGTEXT,                           -- never holds a secret
    digest_id       VARCHAR(255),                       -- the digest that carried a merged delivery
    created_at      BIGINT NOT NULL,
    sent_at         BIGINT,
    KEY alert_deliveries_alert (alert_id),
    KEY alert_deliveries_status (status),
    KEY alert_deliveries_digest (digest_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

-- Operator actions forwarded to the replica that holds the run.
CREATE TABLE run_commands (
    id              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id          VARCHAR(255) NOT NULL,
    target          VARCHAR(255) NOT NULL,              -- the holder's replica_id
    action          VARCHAR(64) NOT NULL,
    node            VARCHAR(255),
    actor           VARCHAR(255) NOT NULL,
    reason          LONGTEXT,
    created_at      BIGINT NOT NULL,
    taken_at        BIGINT,
    answered_at     BIGINT,
    answer          LONGTEXT,                           -- JSON
    KEY run_commands_target (target, taken_at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

-- Throttle permits shared by every replica.
CREATE TABLE permits (
    flow            VARCHAR(255) NOT NULL,
    node            VARCHAR(255) NOT NULL,
    run_id          VARCHAR(255) NOT NULL,
    owner           VARCHAR(255) NOT NULL,
    acquired_at     BIGINT NOT NULL,
    PRIMARY KEY (flow, node, run_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE alert_inbox (
    seq             BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    body            LONGTEXT NOT NULL,
    created_at      BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

-- One row per cluster-wide role; a holder keeps it by renewing `lease_until`.
CREATE TABLE leaders (
    role            VARCHAR(255) NOT NULL PRIMARY KEY,
    holder          VARCHAR(255) NOT NULL,
    lease_until     BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE sidecar_presence (
    replica         VARCHAR(255) NOT NULL,
    grp             VARCHAR(255) NOT NULL,
    jobs            LONGTEXT NOT NULL,
    seen_at         BIGINT NOT NULL,
    PRIMARY KEY (replica, grp)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE store_probe (
    id              INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    at              BIGINT NOT NULL
) ENGINE = InnoDB;

-- The lock slots: (space, slot) for slot 0..4095 of spaces 0 (flows) and 1
-- (throttle permits). A key locks slot CRC32(key) % 4096 of its space.
CREATE TABLE store_locks (
    space           TINYINT NOT NULL,
    slot            INTEGER NOT NULL,
    PRIMARY KEY (space, slot)
) ENGINE = InnoDB;

INSERT INTO store_locks (space, slot)
SELECT s.space, a.n + 16 * b.n + 256 * c.n
FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
      UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9
      UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13
      UNION ALL SELECT 14 UNION ALL SELECT 15) AS a,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
      UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9
      UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13
      UNION ALL SELECT 14 UNION ALL SELECT 15) AS b,
     (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
      UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9
      UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13
      UNION ALL SELECT 14 UNION ALL SELECT 15) AS c,
     (SELECT 0 AS space UNION ALL SELECT 1) AS s;
