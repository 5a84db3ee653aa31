//! MySQL 8 / MariaDB ≥ 10.6 backend: the same schema and semantics as PostgreSQL
//! (migrations/mysql), for several control-plane replicas on one database. InnoDB
//! commits are durable as the server is configured (`innodb_flush_log_at_trx_commit
//! = 1` by default). Every connection runs at READ COMMITTED (so InnoDB takes no
//! gap locks on the reads and claims, as on PostgreSQL), with ANSI_QUOTES (the
//! shared SQL double-quotes the identifiers MySQL reserves) and strict mode, and
//! waits at most `lock_wait_timeout` for a row lock: a wait that long fails as a
//! transient error and is retried, like a deadlock, instead of hanging. Decisions
//! PostgreSQL serialises with advisory locks lock a row of `store_locks` (FOR
//! UPDATE, released with the transaction, never held by an idle pooled
//! connection); claims use `FOR UPDATE SKIP LOCKED`. The SQL is `sql/`, compiled
//! here for this dialect.

// The SQL written once, compiled for this dialect (and again for the others).
#[allow(clippy::duplicate_mod)]
#[path = "../sql/mod.rs"]
mod sql;

use std::borrow::Cow;
use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::MySqlConnectOptions;
use sqlx::query_builder::Separated;
use sqlx::{Executor, MySql, MySqlPool, QueryBuilder, Transaction};

use crate::dialect::{Dialect, LockSpace, SqlStore};
use crate::{Result, StoreError};

/// Lock slots per space in `store_locks` (see the migration).
const LOCK_SLOTS: u32 = 4096;

/// MySQL's and MariaDB's dialect.
pub struct MySqlDialect;

impl Dialect for MySqlDialect {
    type DB = MySql;
    /// A prepared statement takes at most 65,535 placeholders.
    const CHUNK: usize = 1000;
    /// Exact keys are bytes (MEDIUMBLOB): their own collation orders them bytewise.
    const BYTEWISE: &'static str = "`binary`";
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    const RETRIES: u32 = 5;
    const ANSWER_WITHIN: Option<Duration> = Some(Duration::from_secs(15));
    const BIGINT: &'static str = "SIGNED";
    const NOW_MS: &'static str = "CAST(UNIX_TIMESTAMP(CURRENT_TIMESTAMP(6)) * 1000 AS SIGNED)";

    fn sql(sql: &str) -> Cow<'_, str> {
        Cow::Owned(placeholders(sql))
    }

    fn is_distinct(a: &str, b: &str) -> String {
        format!("NOT ({a} <=> {b})")
    }

    fn cron_key_order() -> (&'static str, Cow<'static, str>) {
        ("idempotency_head", Cow::Borrowed("idempotency_head"))
    }

    fn bytes_as_text(column: &str) -> Cow<'_, str> {
        Cow::Owned(format!("CAST({column} AS CHAR) AS {column}"))
    }

    fn runs_list_hint(flow: bool, state: bool) -> &'static str {
        // Measured at 100k runs: `flow = ? AND state = 'SUCCESS' ORDER BY id DESC
        // LIMIT 51` took 454 ms as an index-merge intersection and a filesort.
        match (flow, state) {
            (true, true) => " FORCE INDEX (runs_flow_state)",
            (true, false) => " FORCE INDEX (runs_flow_id)",
            _ => "",
        }
    }

    fn upsert(_keys: &str, columns: &[&str]) -> String {
        // MySQL replaces the row on whichever unique key the INSERT repeats; every
        // table the store upserts has one unique key. `VALUES(c)` (not a row alias)
        // is what MariaDB reads too.
        let set: Vec<String> = columns.iter().map(|c| format!("{c} = VALUES({c})")).collect();
        format!(" ON DUPLICATE KEY UPDATE {}", set.join(", "))
    }

    async fn insert_id(pool: &MySqlPool, q: QueryBuilder<'_, MySql>) -> Result<i64> {
        let mut q = q;
        let done = q.build().execute(pool).await?;
        i64::try_from(done.last_insert_id())
            .map_err(|_| StoreError::Corrupt { table: "run_commands", detail: "id out of range".into() })
    }

    fn update_from<'a, T>(
        q: &mut QueryBuilder<'a, MySql>,
        table: &str,
        columns: &[&str],
        set: &[(&str, &str)],
        rows: impl IntoIterator<Item = T>,
        mut push_row: impl FnMut(Separated<'_, 'a, MySql, &'static str>, T),
    ) {
        // A derived table of `SELECT … UNION ALL SELECT …`: MySQL 8 and MariaDB
        // name a VALUES list's columns differently. The empty first SELECT names them.
        let names: Vec<String> = columns.iter().map(|c| format!("NULL AS {c}")).collect();
        q.push(format!("UPDATE {table} JOIN (SELECT {} FROM DUAL WHERE 1 = 0", names.join(", ")));
        for row in rows {
            q.push(" UNION ALL SELECT ");
            push_row(q.separated(", "), row);
        }
        let set: Vec<String> = set.iter().map(|(c, e)| format!("{table}.{c} = {e}")).collect();
        let key = columns[0];
        q.push(format!(") AS v ON {table}.{key} = v.{key} SET {}", set.join(", ")));
    }

    async fn lock(tx: &mut Transaction<'_, MySql>, space: LockSpace, key: &str) -> Result<()> {
        let space: i64 = match space {
            LockSpace::Flow => 0,
            LockSpace::Permit => 1,
        };
        let locked: Option<i64> = sqlx::query_scalar(
            "SELECT slot FROM store_locks WHERE space = ? AND slot = CRC32(?) % ? FOR UPDATE",
        )
        .bind(space)
        .bind(key)
        .bind(i64::from(LOCK_SLOTS))
        .fetch_optional(&mut **tx)
        .await?;
        match locked {
            Some(_) => Ok(()),
            None => Err(StoreError::Corrupt {
                table: "store_locks",
                detail: format!("no lock slot for space {space}: the migration's rows are missing"),
            }),
        }
    }
}

/// `sql` with each `$n` placeholder (outside quotes) written `?`. MySQL binds
/// `?` in order, so the shared SQL numbers its placeholders in order, each once.
fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    let mut next = 1u32;
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                out.push(c);
            }
            None if c == '\'' || c == '"' || c == '`' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) => {
                let mut n = 0u32;
                while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                    n = n * 10 + d;
                    chars.next();
                }
                debug_assert_eq!(n, next, "placeholders must be numbered in order, each once: {sql}");
                next += 1;
                out.push('?');
            }
            None => out.push(c),
        }
    }
    out
}

/// Pool and session settings for `MySqlStore::open_with`.
#[derive(Debug, Clone)]
pub struct MySqlOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    /// `innodb_lock_wait_timeout` of each connection (whole seconds, at least 1).
    pub lock_wait_timeout: Duration,
}

impl Default for MySqlOptions {
    fn default() -> Self {
        use crate::dialect::{ACQUIRE_TIMEOUT, POOL_SIZE};
        Self {
            max_connections: POOL_SIZE,
            acquire_timeout: ACQUIRE_TIMEOUT,
            lock_wait_timeout: ACQUIRE_TIMEOUT,
        }
    }
}

type D = MySqlDialect;
/// `D`'s connection type, named (the shared SQL implements a trait for it).
type DConn = sqlx::MySqlConnection;

/// The store on MySQL or MariaDB.
pub type MySqlStore = SqlStore<MySqlDialect>;

impl SqlStore<MySqlDialect> {
    /// Connects to `url` (`mysql://user:pass@host/db`, MariaDB too) and applies the
    /// migrations (sqlx takes a named lock, so replicas starting together are safe).
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(url, &MySqlOptions::default()).await
    }

    pub async fn open_with(url: &str, options: &MySqlOptions) -> Result<Self> {
        let connect = MySqlConnectOptions::from_str(url)
            .map_err(|e| StoreError::BadUrl { url: redact(url), reason: e.to_string() })?
            .charset("utf8mb4");
        let wait = options.lock_wait_timeout.as_secs().max(1);
        let session = format!(
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; \
             SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES,STRICT_TRANS_TABLES'); \
             SET SESSION innodb_lock_wait_timeout = {wait}"
        );
        let pool = crate::dialect::pool_options(options.max_connections, options.acquire_timeout)
            .after_connect(move |conn: &mut sqlx::MySqlConnection, _| {
                let session = session.clone();
                Box::pin(async move {
                    conn.execute(session.as_str()).await?;
                    Ok(())
                })
            })
            .connect_with(connect)
            .await?;
        sqlx::migrate!("../../migrations/mysql").run(&pool).await?;
        Ok(Self {
            writer: pool.clone(),
            reader: pool,
            dialect: MySqlDialect,
            answer_within: D::ANSWER_WITHIN,
        })
    }

    /// The connection pool (for tests).
    pub fn pool(&self) -> &MySqlPool {
        &self.writer
    }
}

/// `url` without its password, for errors.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => match url[scheme + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::{placeholders, redact};

    #[test]
    fn placeholders_become_question_marks_outside_quotes() {
        assert_eq!(
            placeholders("SELECT '$1', \"$2\" FROM t WHERE a = $1 AND b IN ($2, $3) LIMIT $4"),
            "SELECT '$1', \"$2\" FROM t WHERE a = ? AND b IN (?, ?) LIMIT ?"
        );
        assert_eq!(placeholders("SELECT 1"), "SELECT 1");
    }

    #[test]
    #[should_panic(expected = "numbered in order")]
    fn a_repeated_placeholder_is_refused_in_tests() {
        placeholders("SELECT $1, $1");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("mysql://u:secret@h/db"), "mysql://u:***@h/db");
        assert_eq!(redact("mysql://u@h/db"), "mysql://u@h/db");
    }
}
