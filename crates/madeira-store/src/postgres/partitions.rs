//! The time partitions of `logs` and `run_archive` on PostgreSQL (migration
//! `20261212000100_time_partitions.sql`, docs/scale.md "Time partitions"): the
//! keeper that makes one partition per UTC day of run ids, days ahead, and the
//! retirement of a day (detach, then drop). The choice of DDL is the locks it
//! takes on the partitioned table, which every engine read and write of these
//! tables holds in ACCESS SHARE or ROW EXCLUSIVE mode (PostgreSQL 15 docs,
//! "Explicit Locking" 13.3.1, the conflict table):
//!
//! - `CREATE TABLE … PARTITION OF` would take ACCESS EXCLUSIVE on the parent
//!   (docs, "Table Partitioning" 5.11.2.2: "… requires taking an ACCESS
//!   EXCLUSIVE lock on the parent table"), which blocks every read and write.
//!   Instead the day's table is made on its own (`CREATE TABLE … (LIKE parent
//!   INCLUDING ALL)`: ACCESS SHARE on the parent) and attached: `ATTACH
//!   PARTITION` takes SHARE UPDATE EXCLUSIVE on the parent (ALTER TABLE, "ATTACH
//!   PARTITION": "… only a SHARE UPDATE EXCLUSIVE lock on the parent table"),
//!   which conflicts with neither; ACCESS EXCLUSIVE is taken on the new, empty
//!   table only, whose check scan reads nothing. There is no DEFAULT partition,
//!   which that ATTACH would also lock and scan.
//! - `DETACH PARTITION` would take ACCESS EXCLUSIVE on the parent; `DETACH
//!   PARTITION … CONCURRENTLY` takes SHARE UPDATE EXCLUSIVE on the parent and
//!   the partition (ALTER TABLE, "DETACH PARTITION": "… only SHARE UPDATE
//!   EXCLUSIVE … on the partitioned table"), then waits for the transactions
//!   that may still see the partition. It cannot run in a transaction block and
//!   is refused when a DEFAULT partition exists; interrupted, it leaves the
//!   partition "detach pending", which `… FINALIZE` completes (done here when
//!   seen).
//! - `DROP TABLE` of the detached table takes ACCESS EXCLUSIVE on that table
//!   only, which no query reaches any more.
//!
//! Two replicas keeping partitions at once serialise on an advisory lock (the
//! second finds the tables made); two retiring a day at once: the second's
//! `pg_try_advisory_lock` fails and it leaves the day to the first.

use sqlx::PgPool;

use crate::{Result, StoreError};

/// Milliseconds in a day.
pub(crate) const DAY_MS: i64 = 86_400_000;

/// How many days ahead the keeper makes partitions when the store opens.
pub(crate) const KEEP_AHEAD_DAYS: i64 = 7;

/// The partitioned tables.
const TABLES: [&str; 2] = ["logs", "run_archive"];

/// The advisory lock space of partition DDL (the flow and permit locks are 7070, 7071).
const LOCK_SPACE: i32 = 7072;

/// The name of `table`'s partition of the UTC day starting at `day_ms`.
fn partition_name(table: &str, day_ms: i64) -> String {
    let day = chrono::DateTime::from_timestamp_millis(day_ms).map(|t| t.format("%Y%m%d").to_string());
    format!("{table}_p{}", day.unwrap_or_default())
}

/// The UTC day (its first millisecond) of `name` (`<table>_pYYYYMMDD`).
fn day_of_name(name: &str) -> Option<i64> {
    let (_, day) = name.rsplit_once("_p")?;
    let date = chrono::NaiveDate::parse_from_str(day, "%Y%m%d").ok()?;
    Some(date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis())
}

/// The first millisecond of `ms`'s UTC day.
pub(crate) fn day_start(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS) * DAY_MS
}

/// The creation time of a run id (a UUIDv7's first 48 bits), when it is one.
pub(crate) fn id_ms(id: &str) -> Option<i64> {
    let b = id.as_bytes();
    let hex = |s: &[u8]| s.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
    if b.len() < 14 || b[8] != b'-' || !hex(&b[..8]) || !hex(&b[9..13]) || b[13] != b'-' {
        return None;
    }
    let high = i64::from_str_radix(&id[..8], 16).ok()?;
    let low = i64::from_str_radix(&id[9..13], 16).ok()?;
    Some((high << 16) | low)
}

/// Makes the missing day partitions of every UTC day from `from_ms`'s to
/// `to_ms`'s (both included), in each table; answers how many were made. A day
/// that overlaps a partition already there (the upgraded table's `_old`, whose
/// range ends the day after its newest row) is left out.
pub(crate) async fn keep(pool: &PgPool, from_ms: i64, to_ms: i64) -> Result<u32> {
    let mut made = 0;
    let mut day = day_start(from_ms);
    while day <= to_ms {
        for table in TABLES {
            if make(pool, table, day).await? {
                made += 1;
            }
        }
        day += DAY_MS;
    }
    Ok(made)
}

/// Makes `table`'s partition of the day at `day_ms` unless it is there (or
/// would overlap one); answers whether it made it.
async fn make(pool: &PgPool, table: &str, day_ms: i64) -> Result<bool> {
    let name = partition_name(table, day_ms);
    let mut conn = pool.acquire().await?;
    let there = exists(&mut conn, &name).await?;
    drop(conn);
    if there {
        return Ok(false);
    }
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(LOCK_SPACE)
        .bind(table)
        .execute(&mut *tx)
        .await?;
    if exists(&mut tx, &name).await? {
        return Ok(false);
    }
    let (lo, hi) =
        (madeira_core::timebound::id_bound(day_ms), madeira_core::timebound::id_bound(day_ms + DAY_MS));
    // Bounded wait for the parent's lock (another DDL on it), rather than none:
    // SHARE UPDATE EXCLUSIVE queued behind DDL holds up no read or write.
    let ddl = [
        "SET LOCAL lock_timeout = '5s'".to_string(),
        format!("CREATE TABLE {name} (LIKE {table} INCLUDING ALL)"),
        format!("ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ('{lo}') TO ('{hi}')"),
    ];
    for statement in &ddl {
        if let Err(e) = sqlx::query(statement).execute(&mut *tx).await {
            // 42P17: "partition … would overlap partition …" (a day inside
            // `_old`'s range); 42P07: made meanwhile by another keeper.
            let code = e.as_database_error().and_then(|d| d.code());
            let taken = code.is_some_and(|c| c == "42P17" || c == "42P07");
            return if taken { Ok(false) } else { Err(e.into()) };
        }
    }
    tx.commit().await?;
    tracing::info!(partition = %name, "time partition made");
    Ok(true)
}

/// Whether the table `name` exists in the current schema: read from `pg_class`
/// by the statement's snapshot (`to_regclass` reads the session's catalog
/// cache, which an advisory lock does not refresh: a keeper that waited for
/// another's lock would not see the table it made).
async fn exists(c: &mut sqlx::PgConnection, name: &str) -> Result<bool> {
    let (found,): (bool,) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = $1 \
         AND relnamespace = current_schema()::regnamespace)",
    )
    .bind(name)
    .fetch_one(c)
    .await?;
    Ok(found)
}

/// The UTC days (first milliseconds, in order) that have a day table of either
/// partitioned table, attached or left detached by an interrupted retirement.
pub(crate) async fn days(pool: &PgPool) -> Result<Vec<i64>> {
    let names: Vec<(String,)> = sqlx::query_as(
        "SELECT c.relname::text FROM pg_class c WHERE c.relkind = 'r' \
         AND c.relnamespace = current_schema()::regnamespace \
         AND c.relname ~ '^(logs|run_archive)_p[0-9]{8}$'",
    )
    .fetch_all(pool)
    .await?;
    let mut days: Vec<i64> = names.iter().filter_map(|(n,)| day_of_name(n)).collect();
    days.sort_unstable();
    days.dedup();
    Ok(days)
}

/// The run ids whose `logs` and `run_archive` rows are in day partitions
/// (dropped with their day, not deleted with their run): from the end of the
/// upgraded tables' `_old` partitions (the lowest id once they are dropped) to
/// the start of `_far`.
pub(crate) async fn partitioned_ids(pool: &PgPool) -> Result<Option<(String, String)>> {
    let bounds: Vec<(String,)> = sqlx::query_as(
        "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c \
         WHERE c.oid IN (to_regclass('logs_old'), to_regclass('run_archive_old'), \
         to_regclass('logs_far'), to_regclass('run_archive_far'))",
    )
    .fetch_all(pool)
    .await?;
    // "FOR VALUES FROM (MINVALUE) TO ('…')" and "FOR VALUES FROM ('…') TO (MAXVALUE)".
    let lo = bounds.iter().filter(|(b,)| b.contains("(MINVALUE)")).filter_map(|(b,)| quoted(b)).max();
    let hi = bounds.iter().filter(|(b,)| b.contains("(MAXVALUE)")).filter_map(|(b,)| quoted(b)).min();
    Ok(hi.map(|hi| (lo.unwrap_or_default(), hi)))
}

/// The first quoted value of a partition bound.
fn quoted(bound: &str) -> Option<String> {
    bound.split('\'').nth(1).map(str::to_string)
}

/// Drops each table's `_old` partition (its rows from before partitioning, ids up
/// to its bound) once no run with an id below that bound is left: retention has
/// pruned them all, so no row of that range can come any more (a rerun needs its
/// run). What is still in it then (rows of runs deleted without them) goes too.
pub(crate) async fn retire_old(pool: &PgPool) -> Result<u32> {
    let mut dropped = 0;
    for table in TABLES {
        let old = format!("{table}_old");
        let bound: Option<(String,)> = sqlx::query_as(
            "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c WHERE c.oid = to_regclass($1)",
        )
        .bind(&old)
        .fetch_optional(pool)
        .await?;
        let Some(upper) = bound.and_then(|(b,)| quoted(&b)) else { continue };
        let left: Option<(String,)> = sqlx::query_as("SELECT id FROM runs WHERE id < $1 LIMIT 1")
            .bind(&upper)
            .fetch_optional(pool)
            .await?;
        if left.is_some() {
            continue;
        }
        if retire_parts(pool, &[(table, old)]).await? {
            dropped += 1;
        }
    }
    Ok(dropped)
}

/// Detaches (concurrently) and drops every table of the day at `day_ms`;
/// answers false when another replica is retiring a day (its lock is taken).
pub(crate) async fn retire(pool: &PgPool, day_ms: i64) -> Result<bool> {
    let parts = TABLES.map(|table| (table, partition_name(table, day_ms)));
    retire_parts(pool, &parts).await
}

/// Detaches and drops each `(table, partition)` of `parts` under the
/// retirement's advisory lock; false when another replica holds it.
async fn retire_parts(pool: &PgPool, parts: &[(&str, String)]) -> Result<bool> {
    let mut conn = pool.acquire().await?;
    let (locked,): (bool,) =
        sqlx::query_as("SELECT pg_try_advisory_lock($1, 0)").bind(LOCK_SPACE).fetch_one(&mut *conn).await?;
    if !locked {
        return Ok(false);
    }
    let mut done = Ok(());
    for (table, name) in parts {
        done = detach_and_drop(&mut conn, table, name).await;
        if done.is_err() {
            break;
        }
    }
    let unlocked = sqlx::query("SELECT pg_advisory_unlock($1, 0)").bind(LOCK_SPACE).execute(&mut *conn).await;
    if unlocked.is_err() {
        // The session's lock must not go back to the pool with the connection.
        conn.close_on_drop();
    }
    done.map(|_| true)
}

async fn detach_and_drop(conn: &mut sqlx::PgConnection, table: &str, name: &str) -> Result<()> {
    let attached: Option<(bool,)> = sqlx::query_as(
        "SELECT i.inhdetachpending FROM pg_inherits i WHERE i.inhrelid = to_regclass($1) \
         AND i.inhparent = to_regclass($2)",
    )
    .bind(name)
    .bind(table)
    .fetch_optional(&mut *conn)
    .await?;
    match attached {
        Some((true,)) => {
            sqlx::query(&format!("ALTER TABLE {table} DETACH PARTITION {name} FINALIZE"))
                .execute(&mut *conn)
                .await?;
        }
        Some((false,)) => {
            sqlx::query(&format!("ALTER TABLE {table} DETACH PARTITION {name} CONCURRENTLY"))
                .execute(&mut *conn)
                .await?;
        }
        None => {}
    }
    sqlx::query(&format!("DROP TABLE IF EXISTS {name}")).execute(&mut *conn).await?;
    tracing::info!(partition = %name, "time partition dropped");
    Ok(())
}

/// The run id of a row that found no partition (`no partition of relation …
/// found for row`, SQLSTATE 23514), from the error's detail: `Partition key of
/// the failing row contains (run_id) = (…).`
pub(crate) fn missing_partition(e: &StoreError) -> Option<String> {
    let StoreError::Db(sqlx::Error::Database(d)) = e else { return None };
    let pg = d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()?;
    if pg.code() != "23514" || !pg.message().starts_with("no partition of relation") {
        return None;
    }
    let detail = pg.detail()?;
    let key = detail.split_once(") = (")?.1;
    Some(key.strip_suffix(").").unwrap_or(key).to_string())
}

/// Makes the partitions of the day of run id `key` (a write found none); fails
/// for an id that is not a time id, which has no day.
pub(crate) async fn make_room(pool: &PgPool, key: &str) -> Result<u32> {
    let ms = id_ms(key).ok_or_else(|| StoreError::Refused(format!("run id {key} has no time partition")))?;
    keep(pool, ms, ms).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_days_and_ids_agree() {
        let day = chrono::NaiveDate::from_ymd_opt(2026, 12, 6)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| t.and_utc().timestamp_millis())
            .expect("date");
        assert_eq!(partition_name("logs", day), "logs_p20261206");
        assert_eq!(day_of_name("run_archive_p20261206"), Some(day));
        assert_eq!(day_of_name("logs_old"), None);
        let id = madeira_core::timebound::id_bound(day + 5_000);
        assert_eq!(id_ms(&id), Some(day + 5_000));
        assert_eq!(day_start(day + DAY_MS - 1), day);
        assert_eq!(id_ms("r1"), None);
        assert_eq!(id_ms("0192zzzz-0000-7000"), None);
    }
}
