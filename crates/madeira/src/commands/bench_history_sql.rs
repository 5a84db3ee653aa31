//! The bulk SQL of `madeira bench --scenarios history` (see `bench_history`):
//! copies of a few real template runs (written by the engine itself, so every
//! row is in the store's own format) made with `INSERT … SELECT` over a
//! generated series, one day of history per statement group, with times shifted
//! and new UUIDv7 ids made from each copy's creation time. PostgreSQL uses
//! `generate_series`, MariaDB its `seq_1_to_N` sequence tables; the copy
//! statements are shared and differ only in identifier quoting.

use anyhow::{Context, Result, bail};
use std::str::FromStr;

use sqlx::ConnectOptions;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool};
use sqlx::postgres::{PgConnectOptions, PgPool};

/// A connection pool on the bench store, PostgreSQL or MariaDB/MySQL.
pub(super) enum Db {
    Pg(PgPool),
    My(MySqlPool),
}

impl Db {
    pub(super) async fn connect(url: &str) -> Result<Db> {
        if url.starts_with("postgres") {
            // Bulk statements take seconds: no slow-statement warning for each.
            let options = PgConnectOptions::from_str(url)?.disable_statement_logging();
            let pool =
                PgPool::connect_with(options).await.context("connecting to the PostgreSQL bench store")?;
            Ok(Db::Pg(pool))
        } else if url.starts_with("mysql") || url.starts_with("mariadb") {
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        sqlx::Executor::execute(&mut *conn, "SET time_zone = '+00:00'").await?;
                        Ok(())
                    })
                })
                .connect_with(MySqlConnectOptions::from_str(url)?.disable_statement_logging())
                .await
                .with_context(|| "connecting to the MariaDB bench store")?;
            Ok(Db::My(pool))
        } else {
            bail!(
                "the history scenario needs `--store postgres://…` or `--store mysql://…` (got a SQLite or unknown URL)"
            )
        }
    }

    pub(super) fn is_pg(&self) -> bool {
        matches!(self, Db::Pg(_))
    }

    /// Runs one statement; the rows it affected.
    pub(super) async fn exec(&self, sql: &str) -> Result<u64> {
        let n = match self {
            Db::Pg(p) => sqlx::query(sql).execute(p).await.map(|r| r.rows_affected()),
            Db::My(p) => sqlx::query(sql).execute(p).await.map(|r| r.rows_affected()),
        };
        n.with_context(|| format!("history SQL failed: {}", first_line(sql)))
    }

    /// The first column of the first row, as an integer.
    pub(super) async fn scalar(&self, sql: &str) -> Result<i64> {
        let v: Result<(i64,), sqlx::Error> = match self {
            Db::Pg(p) => sqlx::query_as(sql).fetch_one(p).await,
            Db::My(p) => sqlx::query_as(sql).fetch_one(p).await,
        };
        Ok(v.with_context(|| format!("history SQL failed: {}", first_line(sql)))?.0)
    }

    /// Rows of (text, integer).
    pub(super) async fn pairs(&self, sql: &str) -> Result<Vec<(String, i64)>> {
        let v = match self {
            Db::Pg(p) => sqlx::query_as(sql).fetch_all(p).await,
            Db::My(p) => sqlx::query_as(sql).fetch_all(p).await,
        };
        v.with_context(|| format!("history SQL failed: {}", first_line(sql)))
    }

    /// Rows of one text column.
    pub(super) async fn texts(&self, sql: &str) -> Result<Vec<String>> {
        let v: Result<Vec<(String,)>, sqlx::Error> = match self {
            Db::Pg(p) => sqlx::query_as(sql).fetch_all(p).await,
            Db::My(p) => sqlx::query_as(sql).fetch_all(p).await,
        };
        Ok(v.with_context(|| format!("history SQL failed: {}", first_line(sql)))?
            .into_iter()
            .map(|r| r.0)
            .collect())
    }

    /// `name` quoted as an identifier (`trigger`, `key` and `reads` are reserved on MySQL).
    fn q(&self, name: &str) -> String {
        if self.is_pg() { format!("\"{name}\"") } else { format!("`{name}`") }
    }

    pub(super) async fn close(self) {
        match self {
            Db::Pg(p) => p.close().await,
            Db::My(p) => p.close().await,
        }
    }
}

fn first_line(sql: &str) -> &str {
    sql.trim().lines().next().unwrap_or("")
}

/// One template: copies of `run_id` take the slots `lo..=hi` of every 1,000
/// generated runs, under `flow`, started by `trigger`/`actor`; `cron` copies get
/// `cron:<flow>:<instant>` idempotency keys as the scheduler writes them.
pub(super) struct Template {
    pub run_id: String,
    pub lo: u32,
    pub hi: u32,
    pub flow: String,
    pub trigger: String,
    pub actor: String,
    pub cron: bool,
}

/// Creates the work tables and fills `hist_tpl` with `templates`.
pub(super) async fn prepare(db: &Db, templates: &[Template]) -> Result<()> {
    let unlogged = if db.is_pg() { "UNLOGGED " } else { "" };
    let text = if db.is_pg() { "TEXT" } else { "VARCHAR(255)" };
    // The store's own collation, so joins with its tables compare as they do.
    let table = if db.is_pg() { "" } else { " DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci" };
    db.exec("DROP TABLE IF EXISTS hist_gen").await?;
    db.exec("DROP TABLE IF EXISTS hist_tpl").await?;
    db.exec(&format!(
        "CREATE {unlogged}TABLE hist_tpl (lo BIGINT NOT NULL, hi BIGINT NOT NULL, tpl {text} NOT NULL, \
         created BIGINT NOT NULL, flow {text} NOT NULL, trig {text} NOT NULL, actor {text} NOT NULL, cron INT NOT NULL){table}"
    ))
    .await?;
    db.exec(&format!(
        "CREATE {unlogged}TABLE hist_gen (id {text} NOT NULL PRIMARY KEY, tpl {text} NOT NULL, flow {text} NOT NULL, \
         delta BIGINT NOT NULL, ikey {text} NOT NULL, trig {text} NOT NULL, actor {text} NOT NULL){table}"
    ))
    .await?;
    for t in templates {
        db.exec(&format!(
            "INSERT INTO hist_tpl (lo, hi, tpl, created, flow, trig, actor, cron) \
             SELECT {}, {}, id, created_at, '{}', '{}', '{}', {} FROM runs WHERE id = '{}'",
            t.lo,
            t.hi,
            t.flow,
            t.trigger,
            t.actor,
            i32::from(t.cron),
            t.run_id
        ))
        .await?;
    }
    Ok(())
}

/// Drops the work tables.
pub(super) async fn finish(db: &Db) -> Result<()> {
    db.exec("DROP TABLE IF EXISTS hist_gen").await?;
    db.exec("DROP TABLE IF EXISTS hist_tpl").await?;
    Ok(())
}

/// Generates `n` runs created evenly over the day starting at `day_start_ms`
/// (`day` numbers it, for unique ids and keys) and copies the template rows.
/// Returns the runs inserted.
pub(super) async fn fill_day(db: &Db, day: u32, day_start_ms: i64, n: u64) -> Result<u64> {
    db.exec("DELETE FROM hist_gen").await?;
    let step = 86_400_000 / n.max(1) as i64;
    let gen_sql = if db.is_pg() {
        format!(
            "INSERT INTO hist_gen (id, tpl, flow, delta, ikey, trig, actor) \
             SELECT substr(s.h,1,8)||'-'||substr(s.h,9,4)||'-7'||substr(s.m,1,3)||'-8'||substr(s.m,4,3)||'-'||substr(s.m,7,12), \
               t.tpl, t.flow, s.created - t.created, \
               CASE WHEN t.cron = 1 THEN 'cron:'||t.flow||':'||to_char(to_timestamp(s.created / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') \
                    ELSE 'hist-{day}-'||s.g END, t.trig, t.actor \
             FROM (SELECT g, {day_start_ms} + (g - 1) * {step} AS created, \
                     lpad(to_hex({day_start_ms} + (g - 1) * {step}), 12, '0') AS h, md5('{day}:'||g) AS m \
                   FROM generate_series(1, {n}) AS g) s \
             JOIN hist_tpl t ON s.g % 1000 BETWEEN t.lo AND t.hi"
        )
    } else {
        format!(
            "INSERT INTO hist_gen (id, tpl, flow, delta, ikey, trig, actor) \
             SELECT CONCAT(SUBSTR(s.h,1,8),'-',SUBSTR(s.h,9,4),'-7',SUBSTR(s.m,1,3),'-8',SUBSTR(s.m,4,3),'-',SUBSTR(s.m,7,12)), \
               t.tpl, t.flow, s.created - t.created, \
               CASE WHEN t.cron = 1 THEN CONCAT('cron:', t.flow, ':', DATE_FORMAT(FROM_UNIXTIME(s.created DIV 1000), '%Y-%m-%dT%H:%i:%s'), '.', LPAD(s.created % 1000, 3, '0'), 'Z') \
                    ELSE CONCAT('hist-{day}-', s.seq) END, t.trig, t.actor \
             FROM (SELECT seq, {day_start_ms} + (CAST(seq AS SIGNED) - 1) * {step} AS created, \
                     LPAD(LOWER(HEX({day_start_ms} + (seq - 1) * {step})), 12, '0') AS h, MD5(CONCAT('{day}:', seq)) AS m \
                   FROM seq_1_to_{n}) s \
             JOIN hist_tpl t ON s.seq % 1000 BETWEEN t.lo AND t.hi"
        )
    };
    let runs = db.exec(&gen_sql).await?;
    for stmt in copies(db) {
        db.exec(&stmt).await?;
    }
    Ok(runs)
}

/// The statements copying each template's rows to its generated runs.
fn copies(db: &Db) -> Vec<String> {
    let (trigger, key, reads) = (db.q("trigger"), db.q("key"), db.q("reads"));
    let e = if db.is_pg() { "E" } else { "" };
    let failed_log = "'Traceback (most recent call last):\\n  File \"/opt/jobs/verify.py\", line 88, in <module>\\n    \
                      check_totals(batch)\\n  File \"/opt/jobs/verify.py\", line 41, in check_totals\\n    raise \
                      MismatchError(f\"payments {a} != ledger {b}\")\\nMismatchError: payments 1204 != ledger 1203\\n'";
    let ok_log = "'exported 1204 rows to s3://settlement/out/part-0000.csv.gz in 2.3s\\n'";
    vec![
        format!(
            "INSERT INTO runs (id, flow, version, state, params, idempotency_key, {trigger}, created_at, started_at, \
             finished_at, trace_context, owner, lease_until, actor, admitted_at) \
             SELECT g.id, g.flow, r.version, r.state, r.params, g.ikey, g.trig, r.created_at + g.delta, \
             r.started_at + g.delta, r.finished_at + g.delta, NULL, NULL, NULL, g.actor, r.admitted_at + g.delta \
             FROM hist_gen g JOIN runs r ON r.id = g.tpl"
        ),
        format!(
            "INSERT INTO nodes (run_id, idx, node, state, reason, attempt, series_start, data_version, outputs, {reads}, \
             stale, fallback, next_attempt_at, started_at, finished_at) \
             SELECT g.id, n.idx, n.node, n.state, n.reason, n.attempt, n.series_start, n.data_version, n.outputs, \
             n.{reads}, n.stale, n.fallback, n.next_attempt_at + g.delta, n.started_at + g.delta, n.finished_at + g.delta \
             FROM hist_gen g JOIN nodes n ON n.run_id = g.tpl"
        ),
        // Packed as the engine wrote them: one row per run and write, `at` its first transition's.
        "INSERT INTO transitions (run_id, at, entries) \
         SELECT g.id, t.at + g.delta, t.entries \
         FROM hist_gen g JOIN transitions t ON t.run_id = g.tpl ORDER BY g.id, t.id"
            .to_string(),
        format!(
            "INSERT INTO node_outputs (run_id, node, data_version, {key}, value) \
             SELECT g.id, o.node, o.data_version, o.{key}, o.value FROM hist_gen g JOIN node_outputs o ON o.run_id = g.tpl"
        ),
        "INSERT INTO attempts (run_id, node, attempt, started_at, finished_at, outcome, error, host) \
         SELECT g.id, a.node, a.attempt, a.started_at + g.delta, a.finished_at + g.delta, a.outcome, a.error, a.host \
         FROM hist_gen g JOIN attempts a ON a.run_id = g.tpl"
            .to_string(),
        // What real jobs print: a traceback for each failed attempt, a line from the last node.
        format!(
            "INSERT INTO logs (run_id, node, attempt, content) \
             SELECT g.id, a.node, a.attempt, CASE WHEN a.outcome = 'SUCCESS' THEN {e}{ok_log} ELSE {e}{failed_log} END \
             FROM hist_gen g JOIN attempts a ON a.run_id = g.tpl \
             WHERE a.outcome <> 'SUCCESS' OR a.node = 'export' OR a.node = 'report'"
        ),
        "INSERT INTO audit (at, actor, action, run_id, node, reason, details) \
         SELECT u.at + g.delta, u.actor, u.action, g.id, u.node, u.reason, u.details \
         FROM hist_gen g JOIN audit u ON u.run_id = g.tpl ORDER BY g.id, u.id"
            .to_string(),
        // An operator looks at each failed run and reruns it (recorded, not performed).
        "INSERT INTO audit (at, actor, action, run_id, node, reason, details) \
         SELECT r.finished_at + 600000, 'ops-oncall', 'rerun', g.id, 'verify', 'ledger reloaded, rerunning', NULL \
         FROM hist_gen g JOIN runs r ON r.id = g.id WHERE r.state = 'FAILED'"
            .to_string(),
    ]
}

/// One resolved alert per failing hour: copies of `alert_id` (an alert the
/// template failures raised) over the day starting at `day_start_ms`.
pub(super) async fn alerts_day(db: &Db, alert_id: &str, day: u32, day_start_ms: i64) -> Result<u64> {
    let (key, hours) = (db.q("key"), 24);
    let sql = if db.is_pg() {
        format!(
            "INSERT INTO alerts (id, {key}, severity, status, flow, node, details, created_at, notify_at, updated_at, resolved_at) \
             SELECT substr(h,1,8)||'-'||substr(h,9,4)||'-7'||substr(m,1,3)||'-9'||substr(m,4,3)||'-'||substr(m,7,12), \
               a.{key}, a.severity, 'resolved', a.flow, a.node, a.details, c, c + 30000, c + 1800000, c + 1800000 \
             FROM (SELECT {day_start_ms} + g * 3600000 AS c, lpad(to_hex({day_start_ms} + g * 3600000), 12, '0') AS h, \
                     md5('alert:{day}:'||g) AS m FROM generate_series(0, {hours} - 1) AS g) s, alerts a WHERE a.id = '{alert_id}'"
        )
    } else {
        format!(
            "INSERT INTO alerts (id, {key}, severity, status, flow, node, details, created_at, notify_at, updated_at, resolved_at) \
             SELECT CONCAT(SUBSTR(h,1,8),'-',SUBSTR(h,9,4),'-7',SUBSTR(m,1,3),'-9',SUBSTR(m,4,3),'-',SUBSTR(m,7,12)), \
               a.{key}, a.severity, 'resolved', a.flow, a.node, a.details, c, c + 30000, c + 1800000, c + 1800000 \
             FROM (SELECT {day_start_ms} + seq * 3600000 AS c, LPAD(LOWER(HEX({day_start_ms} + seq * 3600000)), 12, '0') AS h, \
                     MD5(CONCAT('alert:{day}:', seq)) AS m FROM seq_0_to_{}) s, alerts a WHERE a.id = '{alert_id}'",
            hours - 1
        )
    };
    db.exec(&sql).await
}

/// Updates the planner's statistics after the bulk load.
pub(super) async fn analyze(db: &Db) -> Result<()> {
    if db.is_pg() {
        db.exec("ANALYZE").await?;
    } else {
        for t in [
            "runs",
            "nodes",
            "transitions",
            "node_outputs",
            "attempts",
            "logs",
            "audit",
            "alerts",
            "run_archive",
        ] {
            db.exec(&format!("ANALYZE TABLE {t}")).await?;
        }
    }
    Ok(())
}

/// Rebuilds the tables the fold emptied (and `runs`, whose rows it updated),
/// giving back the space a store in service would reuse for new rows:
/// `VACUUM FULL` on PostgreSQL, `OPTIMIZE TABLE` (a rebuild) on MariaDB.
pub(super) async fn compact(db: &Db) -> Result<()> {
    for t in ["nodes", "attempts", "node_outputs", "transitions", "runs"] {
        let stmt = if db.is_pg() { format!("VACUUM FULL {t}") } else { format!("OPTIMIZE TABLE {t}") };
        db.exec(&stmt).await?;
    }
    Ok(())
}

/// Bytes of each table with its indexes (PostgreSQL: `pg_total_relation_size`;
/// MariaDB: `data_length + index_length` after `ANALYZE TABLE`).
pub(super) async fn table_bytes(db: &Db) -> Result<Vec<(String, i64)>> {
    let sql = if db.is_pg() {
        // A partition counts under its table (`logs`, `run_archive`: time partitions).
        "SELECT COALESCE(p.relname, c.relname)::text, SUM(pg_total_relation_size(c.oid))::bigint \
         FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid LEFT JOIN pg_class p ON p.oid = i.inhparent \
         WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace AND c.relname NOT LIKE 'hist_%' \
         AND c.relname <> '_sqlx_migrations' GROUP BY 1 ORDER BY 2 DESC"
    } else {
        "SELECT CAST(table_name AS CHAR), CAST(data_length + index_length AS SIGNED) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name NOT LIKE 'hist_%' AND table_name <> '_sqlx_migrations' ORDER BY 2 DESC"
    };
    db.pairs(sql).await
}
