-- The MySQL / MariaDB twin of migrations/postgres/20261204000001_flow_lifecycle.sql
-- and migrations/postgres/20261204000010_console.sql, as one file: a deleted flow
-- keeps its row with `deleted_at` set; events for a paused flow wait in
-- `paused_events`; runs know their actor, attempts their host; console sessions
-- live in the store. Same columns and meanings as on the other backends.
--
-- Differences forced by MySQL (see 20261130000001_schema.sql): keyed text is
-- VARCHAR(255); an event's type and id, written freely by senders, are kept as
-- bytes (VARBINARY) so they compare byte for byte as on SQLite and PostgreSQL.

ALTER TABLE flows ADD COLUMN deleted_at BIGINT;

CREATE TABLE paused_events (
    id              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,  -- queue order
    flow            VARCHAR(255) NOT NULL,
    event_type      VARBINARY(1020) NOT NULL,
    event_id        VARBINARY(1020) NOT NULL,
    payload         LONGTEXT NOT NULL,                           -- JSON object: the run's params
    actor           VARCHAR(255) NOT NULL,
    queued_at       BIGINT NOT NULL,
    UNIQUE KEY paused_events_key (flow, event_type, event_id),
    KEY paused_events_flow (flow, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

-- The actor of the run; runs made before this migration take the actor of their
-- first run transition (MySQL cannot read the updated table in a subquery of its
-- own UPDATE, hence the join with a derived table).
ALTER TABLE runs ADD COLUMN actor VARCHAR(255) NOT NULL DEFAULT '';
UPDATE runs r
    JOIN (SELECT t.run_id, t.actor FROM transitions t
          JOIN (SELECT run_id, MIN(id) AS id FROM transitions WHERE node IS NULL GROUP BY run_id) f
            ON f.id = t.id) a
      ON a.run_id = r.id
    SET r.actor = a.actor;
CREATE INDEX runs_actor ON runs(actor, id);

-- The replica id or the sidecar name(s) an attempt ran on; NULL when unknown.
ALTER TABLE attempts ADD COLUMN host LONGTEXT;

-- Signed-in console sessions: `id_hash` is the SHA-256 (hex) of the cookie's value.
CREATE TABLE console_sessions (
    id_hash         VARCHAR(255) NOT NULL PRIMARY KEY,
    name            VARCHAR(255) NOT NULL,
    role            VARCHAR(255) NOT NULL,
    scope           LONGTEXT,
    csrf            VARCHAR(255) NOT NULL,
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    KEY console_sessions_expiry (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
