-- Observability: the W3C trace context of each run (`traceparent` of its run span),
-- so a run that lasts hours or survives a restart keeps one trace. NULL for runs
-- created before this migration (the engine then derives one from the run id).

ALTER TABLE runs ADD COLUMN trace_context TEXT;
