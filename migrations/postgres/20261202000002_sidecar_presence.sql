-- Which replica has live sidecars of which group, declaring which jobs (JSON array
-- of names), as of `seen_at`; each replica rewrites its own rows every few
-- seconds. A replica holding a run whose node waits for a group it has no sidecar
-- of hands the run over to a replica listed here.
CREATE TABLE sidecar_presence (
    replica         TEXT NOT NULL,
    grp             TEXT NOT NULL,
    jobs            TEXT NOT NULL,
    seen_at         BIGINT NOT NULL,
    PRIMARY KEY (replica, grp)
);
