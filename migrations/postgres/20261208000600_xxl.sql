-- XXL-JOB executors and callbacks (issue #38), kept in the store so that every
-- replica sees an executor that registered with one of them, and a callback
-- that reached one replica reaches the attempt another one runs (and survives a
-- restart between the callback's answer and the attempt's commit).
-- `xxl_executors`: one row per (app, address), renewed by each registration.
-- `xxl_callbacks`: the first callback of each logId per app (the token's: another
-- app's forged callback cannot shadow the real one); later ones change nothing.
CREATE TABLE xxl_executors (
    app             TEXT NOT NULL,
    address         TEXT NOT NULL,
    since_ms        BIGINT NOT NULL,
    seen_ms         BIGINT NOT NULL,
    PRIMARY KEY (app, address)
);
CREATE TABLE xxl_callbacks (
    log_id          BIGINT NOT NULL,
    app             TEXT NOT NULL,
    code            BIGINT NOT NULL,
    msg             TEXT,
    at_ms           BIGINT NOT NULL,
    PRIMARY KEY (log_id, app)
);
CREATE INDEX xxl_callbacks_at ON xxl_callbacks(at_ms);
