-- Alerts across replicas (see the PostgreSQL migration). One SQLite process is
-- one replica, but the tables exist so both backends pass one store suite.
CREATE TABLE alert_inbox (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    body            TEXT NOT NULL,
    created_at      INTEGER NOT NULL
);

CREATE TABLE leaders (
    role            TEXT PRIMARY KEY,
    holder          TEXT NOT NULL,
    lease_until     INTEGER NOT NULL
);
