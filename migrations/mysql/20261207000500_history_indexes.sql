-- Indexes the list routes use with a month of history (issue 39, docs/scale.md):
-- `GET /runs?flow=F` newest first reads (flow, id) backwards instead of walking
-- the primary key past every other flow's runs. (InnoDB's `runs_state (state)`
-- already ends with the primary key, so it serves `?status=S` newest first and
-- the console's capped counts as (state, id) does on PostgreSQL.)
CREATE INDEX runs_flow_id ON runs(flow, id);
