-- Alerts across replicas: every replica appends the alert events of the runs it
-- holds to `alert_inbox`; one replica at a time (the holder of the `alerts` row in
-- `leaders`) aggregates them, deletes what it consumed in the same transaction as
-- the alerts and deliveries it wrote, and sends the deliveries.
CREATE TABLE alert_inbox (
    seq             BIGSERIAL PRIMARY KEY,
    body            TEXT NOT NULL,
    created_at      BIGINT NOT NULL
);

-- One row per cluster-wide role; a holder keeps it by renewing `lease_until`.
CREATE TABLE leaders (
    role            TEXT PRIMARY KEY,
    holder          TEXT NOT NULL,
    lease_until     BIGINT NOT NULL
);
