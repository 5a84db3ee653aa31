-- Finished runs folded into one row (issue 39, storage): the archiver (store
-- `fold_finished`, on every replica) moves a finished run's nodes, attempts, node
-- outputs and packed transition rows into one `run_archive` row, a document made
-- and LZ4-compressed by the store (crates/madeira-store/src/archive.rs), and marks
-- the run `folded`. Readers take the archive when it is there; claiming a folded
-- run (an operator's rerun, mark-success, …) unfolds it first. Logs and audit stay
-- where they are. Existing finished runs are folded by the archiver as it catches up.

CREATE TABLE run_archive (
    run_id          TEXT PRIMARY KEY,
    nodes           INTEGER NOT NULL,           -- node rows folded (counts, B/node)
    succeeded       TEXT NOT NULL,              -- ',a,b!c,': SUCCESS nodes, `_` written `!` (node-level `after`)
    doc             BYTEA NOT NULL              -- MessagePack, LZ4-compressed by the store
);
-- Already compressed: kept inline and never compressed again by TOAST.
ALTER TABLE run_archive ALTER COLUMN doc SET STORAGE EXTERNAL;

ALTER TABLE runs ADD COLUMN folded BOOLEAN NOT NULL DEFAULT FALSE;
-- Only finished runs not folded yet: small whatever the history.
CREATE INDEX runs_to_fold ON runs(finished_at) WHERE folded = FALSE AND finished_at IS NOT NULL;
