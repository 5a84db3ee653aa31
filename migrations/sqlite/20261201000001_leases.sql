-- Run ownership by lease (several control-plane replicas on one store): the replica
-- that holds a run is the only one that plans, commits and dispatches for it; a
-- lease that is not renewed expires and another replica takes the run over.
ALTER TABLE runs ADD COLUMN owner TEXT;
ALTER TABLE runs ADD COLUMN lease_until INTEGER;
CREATE INDEX runs_owner ON runs(owner) WHERE owner IS NOT NULL;
