-- Admission decides whether a run may start; starting is a state change the
-- engine makes (`Command::Start`, QUEUED -> RUNNING, in its group commit). A run
-- admitted to start — at creation when `max_active_runs` leaves room, or later by
-- promotion — is written QUEUED with `admitted_at` set, and counts against
-- `max_active_runs` from then on. NULL: waiting for room, or started before this
-- column existed (RUNNING runs count whatever it holds). Same on every backend.
ALTER TABLE runs ADD COLUMN admitted_at BIGINT;
