-- Calendars applied like flows (issue #35): every version of a calendar file
-- applied through the API (`PUT /api/v1/calendars/{name}`), its YAML kept as
-- written. The latest version of each name is the calendar the servers use
-- (next to the built-in and configured ones). Same on every backend.
CREATE TABLE calendar_versions (
    name          TEXT NOT NULL,
    version       INTEGER NOT NULL,
    source        TEXT NOT NULL,
    content_hash  TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (name, version)
);
