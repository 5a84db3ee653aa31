-- Web console: who started each run, where each attempt ran, and console sessions
-- kept in the store (they outlive a restart and work on every replica).

-- The actor of the run (a token's name, `scheduler`, `message:<source>`, …); runs
-- made before this migration take the actor of their first run transition.
ALTER TABLE runs ADD COLUMN actor TEXT NOT NULL DEFAULT '';
UPDATE runs SET actor = COALESCE((SELECT t.actor FROM transitions t
    WHERE t.run_id = runs.id AND t.node IS NULL ORDER BY t.id LIMIT 1), '');
CREATE INDEX runs_actor ON runs(actor, id);

-- The replica id (in-process attempts) or the sidecar name(s) an attempt ran on;
-- NULL for attempts made before this migration or not placed yet.
ALTER TABLE attempts ADD COLUMN host TEXT;

-- Signed-in console sessions. `id_hash` is the SHA-256 (hex) of the cookie's
-- value, never the value itself; `scope` is the token's label scope (JSON object,
-- NULL: every flow). Expired rows are deleted as new sessions are made.
CREATE TABLE console_sessions (
    id_hash         TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    role            TEXT NOT NULL,
    scope           TEXT,
    csrf            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions(expires_at);
