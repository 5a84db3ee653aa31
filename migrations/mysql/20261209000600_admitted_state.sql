-- Admission is a run state (`ADMITTED`): a run admitted to start, at creation
-- when `max_active_runs` left room or later by promotion, is ADMITTED until the
-- engine's `Command::Start` takes it RUNNING; a waiting run is QUEUED. Until now
-- the difference was the `admitted_at` column alone (kept: when it was admitted).
-- Runs admitted and not started when this migration runs take the new state;
-- their past has no QUEUED -> ADMITTED record (their creation edge says QUEUED).
UPDATE runs SET state = 'ADMITTED' WHERE state = 'QUEUED' AND admitted_at IS NOT NULL;
