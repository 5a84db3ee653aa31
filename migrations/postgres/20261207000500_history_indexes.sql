-- Indexes the list routes use with a month of history (issue 39, docs/scale.md):
-- `GET /runs?flow=F` newest first reads (flow, id) backwards instead of walking
-- the primary key past every other flow's runs; `?status=S` and the console's
-- capped counts read (state, id) (it replaces the plain (state) index); the
-- scheduler's last cron key of a flow is the last entry of (flow, key) in byte
-- order among cron keys, instead of a sort of all of the flow's cron runs.
CREATE INDEX runs_flow_id ON runs(flow, id);
CREATE INDEX runs_state_id ON runs(state, id);
DROP INDEX runs_state;
CREATE INDEX runs_cron_key ON runs(flow, idempotency_key COLLATE "C") WHERE idempotency_key LIKE 'cron:%';
