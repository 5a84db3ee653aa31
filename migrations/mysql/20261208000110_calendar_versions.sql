-- Calendars applied like flows (issue #35): every version of a calendar file
-- applied through the API (`PUT /api/v1/calendars/{name}`), its YAML kept as
-- written. The latest version of each name is the calendar the servers use
-- (next to the built-in and configured ones). Same on every backend.
CREATE TABLE calendar_versions (
    name          VARCHAR(255) NOT NULL,
    version       BIGINT NOT NULL,
    source        TEXT NOT NULL,
    content_hash  TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (name, version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
