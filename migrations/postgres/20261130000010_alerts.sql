-- Alerts (SPEC §7), the PostgreSQL twin of migrations/sqlite/20261130000010_alerts.sql:
-- one row per alert, and one row per delivery of it to a channel. Deliveries still
-- `pending` are sent again after a restart. Times are milliseconds since the Unix
-- epoch (UTC); `details` is JSON kept as TEXT, as on SQLite.

CREATE TABLE alerts (
    id              TEXT PRIMARY KEY,           -- UUIDv7
    key             TEXT NOT NULL,              -- grouping key (flow, root node, error class)
    severity        TEXT NOT NULL,              -- critical | warning
    status          TEXT NOT NULL,              -- pending (gathering) | firing | resolved
    flow            TEXT,
    node            TEXT,
    details         TEXT NOT NULL,              -- JSON: summary, error, runs, attempts, skipped, labels
    created_at      BIGINT NOT NULL,
    notify_at       BIGINT NOT NULL,           -- end of group_wait
    updated_at      BIGINT NOT NULL,
    resolved_at     BIGINT
);
CREATE INDEX alerts_status ON alerts(status, id);
CREATE INDEX alerts_resolved ON alerts(resolved_at) WHERE resolved_at IS NOT NULL;

CREATE TABLE alert_deliveries (
    id              TEXT PRIMARY KEY,           -- UUIDv7: sorts by creation time
    alert_id        TEXT,                       -- NULL for a digest or a test message
    channel         TEXT NOT NULL,
    kind            TEXT NOT NULL,              -- firing | resolved | digest | test
    status          TEXT NOT NULL,              -- pending | sent | merged | failed
    attempts        BIGINT NOT NULL,
    last_error      TEXT,                       -- never holds a secret
    digest_id       TEXT,                       -- the digest that carried a merged delivery
    created_at      BIGINT NOT NULL,
    sent_at         BIGINT
);
CREATE INDEX alert_deliveries_alert ON alert_deliveries(alert_id);
CREATE INDEX alert_deliveries_status ON alert_deliveries(status);
CREATE INDEX alert_deliveries_digest ON alert_deliveries(digest_id) WHERE digest_id IS NOT NULL;
