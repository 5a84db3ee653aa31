//! Test support (feature `test-support`): a fresh PostgreSQL or MariaDB/MySQL
//! database per test, made and dropped by `madeira-store`'s test databases
//! (`MADEIRA_TEST_PG_URL`, `MADEIRA_TEST_MYSQL_URL`; skipped without a server
//! unless `CI=true`), and what the SQL tests read from it: rows as text, the
//! database's own view of its sessions, a statement's own time.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use madeira_store::testing::{MySqlTestDb, PgTestDb};
use sqlx::mysql::MySql;
use sqlx::postgres::Postgres;
use sqlx::{Connection, Database};

use crate::Kind;
use crate::backend::Driver;

pub use madeira_store::testing::services_required;

/// A database that exists for one test (dropped with it).
pub struct TestDb {
    pub kind: Kind,
    /// The test database's URL.
    pub url: String,
    /// The store's test database, which drops it when it goes.
    _db: Box<dyn std::any::Any + Send + Sync>,
}

impl TestDb {
    /// Creates `madeira_t_<uuid>`. `Ok(None)`: no server and not on CI (skip).
    pub async fn create(kind: Kind) -> Result<Option<Self>, String> {
        let db = match kind {
            Kind::Postgres => PgTestDb::create().await?.map(|db| (db.url.clone(), Box::new(db) as _)),
            Kind::Mysql => MySqlTestDb::create().await?.map(|db| (db.url.clone(), Box::new(db) as _)),
        };
        Ok(db.map(|(url, db)| Self { kind, url, _db: db }))
    }

    /// Runs `sql` (several statements allowed) on a fresh connection.
    pub async fn exec(&self, sql: &str) -> Result<(), String> {
        self.strings(sql).await.map(|_| ())
    }

    /// The first column of every row of `sql` (the last statement's), as text
    /// (`CAST(… AS CHAR)` / `::text` in the query).
    pub async fn strings(&self, sql: &str) -> Result<Vec<String>, String> {
        match self.kind {
            Kind::Postgres => strings::<Postgres>(&self.url, sql).await,
            Kind::Mysql => strings::<MySql>(&self.url, sql).await,
        }
    }

    /// Sessions of this database running a statement whose text contains `needle`,
    /// from the database's own activity view (the caller's session excluded).
    pub async fn active_statements(&self, needle: &str) -> Result<usize, String> {
        let like = needle.replace('\'', "''");
        let sql = match self.kind {
            Kind::Postgres => format!(
                "SELECT pid::text FROM pg_stat_activity WHERE datname = current_database() \
                 AND pid <> pg_backend_pid() AND state <> 'idle' AND query LIKE '%{like}%'"
            ),
            Kind::Mysql => format!(
                "SELECT CAST(ID AS CHAR) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() \
                 AND ID <> CONNECTION_ID() AND COMMAND <> 'Sleep' AND INFO LIKE '%{like}%'"
            ),
        };
        Ok(self.strings(&sql).await?.len())
    }

    /// Mean time of `sql` (prepared once) run `n` times on one warm connection: the
    /// statement's own time, for overhead figures.
    pub async fn statement_time(&self, sql: &str, n: u32) -> Result<Duration, String> {
        match self.kind {
            Kind::Postgres => statement_time::<Postgres>(&self.url, sql, n).await,
            Kind::Mysql => statement_time::<MySql>(&self.url, sql, n).await,
        }
    }

    /// Sessions connected to this database (other than the caller's).
    pub async fn sessions(&self) -> Result<usize, String> {
        let sql = match self.kind {
            Kind::Postgres => {
                "SELECT pid::text FROM pg_stat_activity WHERE datname = current_database() \
                 AND pid <> pg_backend_pid()"
            }
            Kind::Mysql => {
                "SELECT CAST(ID AS CHAR) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() \
                 AND ID <> CONNECTION_ID()"
            }
        };
        Ok(self.strings(sql).await?.len())
    }
}

async fn connect<DB: Driver>(url: &str) -> Result<DB::Connection, String> {
    DB::Connection::connect(url).await.map_err(|e| format!("connecting to the test database: {e}"))
}

async fn strings<DB: Driver>(url: &str, sql: &str) -> Result<Vec<String>, String> {
    let mut conn = connect::<DB>(url).await?;
    let rows = DB::raw(&mut conn, sql).await.map_err(|e| format!("{sql}: {e}"))?;
    let _ = conn.close().await;
    rows.iter().map(|r| DB::text(r, 0).map_err(|e| format!("{sql}: {e}"))).collect()
}

async fn statement_time<DB: Driver + Database>(url: &str, sql: &str, n: u32) -> Result<Duration, String> {
    let mut conn = connect::<DB>(url).await?;
    let e = |e: sqlx::Error| format!("{sql}: {e}");
    let n = n.max(1);
    DB::rows(&mut conn, sqlx::query(sql)).try_collect::<Vec<_>>().await.map_err(e)?;
    let started = Instant::now();
    for _ in 0..n {
        DB::rows(&mut conn, sqlx::query(sql)).try_collect::<Vec<_>>().await.map_err(e)?;
    }
    let took = started.elapsed() / n;
    let _ = conn.close().await;
    Ok(took)
}
