-- Observability, the PostgreSQL twin of migrations/sqlite/20261130000020_trace.sql:
-- the W3C trace context of each run (`traceparent` of its run span), so a run that
-- lasts hours or survives a restart keeps one trace. NULL for runs created before.

ALTER TABLE runs ADD COLUMN trace_context TEXT;
