-- The business date of a run (issue #35 item 3): the day, in the flow's timezone,
-- whose business the run does, as 'YYYY-MM-DD' text (sorts and compares as the
-- date; the same on every backend). NULL for runs made before this column existed.
-- `wait_reason`: why a QUEUED run is not admitted yet, shown on the run
-- (`concurrency.depends_on_past`: the run for the previous business date is not
-- SUCCESS). NULL when nothing holds it beyond `max_active_runs`.
ALTER TABLE runs ADD COLUMN biz_date TEXT;
ALTER TABLE runs ADD COLUMN wait_reason TEXT;
CREATE INDEX runs_flow_biz_date ON runs(flow, biz_date);
