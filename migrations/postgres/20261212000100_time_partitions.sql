-- Time partitions for the tables that grow with history (issue 39 §2,
-- docs/scale.md "Time partitions"): `logs` and `run_archive` become partitioned
-- by range of `run_id`. A run id is a UUIDv7 whose text starts with its creation
-- time (`madeira_core::timebound::id_bound`), so one UTC day of runs is one id
-- range, and retention drops a day's partitions (DETACH … CONCURRENTLY, then
-- DROP) instead of deleting its rows. Ids of the same shape order the same
-- under any collation (fixed-width lowercase hex, hyphens at fixed places), so
-- the key keeps the column's collation and `run_id = $1` prunes to one partition.
--
-- The conversion copies nothing: each table is renamed `<t>_old` and attached
-- as the partition of every id up to the day after the newest id it holds (its
-- rows are checked by one read-only scan; the engine does not run during
-- migrations). Rows whose id is not a time id at all (past `id_bound` of
-- 2200-01-01: tests' `r1`, `up1`) move to `<t>_far`, the partition of those ids.
-- Day partitions `<t>_pYYYYMMDD` are made by the store's partition keeper
-- (crates/madeira-store/src/postgres/partitions.rs) when the store opens and
-- periodically, days ahead, with CREATE TABLE then ATTACH PARTITION (SHARE UPDATE
-- EXCLUSIVE on the parent, which reads and writes do not wait for). There is no
-- DEFAULT partition: with one, DETACH … CONCURRENTLY is refused and every ATTACH
-- locks and scans it.

CREATE FUNCTION pg_temp.partition_by_run_id(t text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    far CONSTANT text := '0699e991-a800-0000-0000-000000000000';
    newest text;
    hi text := '00000000-0000-0000-0000-000000000000';
    day_ms bigint;
    stray text;
BEGIN
    EXECUTE format('ALTER TABLE %I RENAME TO %I', t, t || '_old');
    EXECUTE format('ALTER INDEX %I RENAME TO %I', t || '_pkey', t || '_old_pkey');
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL) PARTITION BY RANGE (run_id)', t, t || '_old');
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL)', t || '_far', t || '_old');
    EXECUTE format('INSERT INTO %I SELECT * FROM %I WHERE run_id >= $1', t || '_far', t || '_old') USING far;
    EXECUTE format('DELETE FROM %I WHERE run_id >= $1', t || '_old') USING far;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (MAXVALUE)', t, t || '_far', far);
    EXECUTE format('SELECT max(run_id) FROM %I WHERE run_id ~ ''^[0-9a-f]{8}-[0-9a-f]{4}-''', t || '_old')
        INTO newest;
    IF newest IS NOT NULL THEN
        -- The id's first 48 bits are its milliseconds; the bound is the next UTC day's first id.
        day_ms := (('x' || substr(replace(newest, '-', ''), 1, 12))::bit(48)::bigint / 86400000 + 1) * 86400000;
        hi := lpad(to_hex(day_ms >> 16), 8, '0') || '-' || lpad(to_hex(day_ms & 65535), 4, '0')
            || '-0000-0000-000000000000';
    END IF;
    EXECUTE format('SELECT min(run_id) FROM %I WHERE run_id >= $1', t || '_old') INTO stray USING hi;
    IF stray IS NOT NULL THEN
        RAISE EXCEPTION '%: run id % is neither a time id nor past %', t, stray, far;
    END IF;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)', t, t || '_old', hi);
END $$;

SELECT pg_temp.partition_by_run_id('logs');
SELECT pg_temp.partition_by_run_id('run_archive');
