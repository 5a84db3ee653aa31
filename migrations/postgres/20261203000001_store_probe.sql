-- One row rewritten by the engine's probe while commits fail, to learn when the
-- store takes writes again (then /readyz turns ready by itself).
CREATE TABLE store_probe (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    at              BIGINT NOT NULL
);
