//! Test support (feature `test-support`): a fresh database per test on the
//! PostgreSQL of `MADEIRA_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`)
//! or the MariaDB/MySQL of `MADEIRA_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306`),
//! dropped when the guard goes. Without a reachable server a test is skipped,
//! unless `CI=true`: then it fails.

use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, Row};

use crate::Kind;

/// Whether a missing service must fail the test rather than skip it.
pub fn services_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn admin_url(kind: Kind) -> String {
    match kind {
        Kind::Postgres => std::env::var("MADEIRA_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into()),
        Kind::Mysql => {
            std::env::var("MADEIRA_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
        }
    }
}

/// A database that exists for one test.
pub struct TestDb {
    pub kind: Kind,
    /// The test database's URL.
    pub url: String,
    name: String,
    admin_url: String,
}

impl TestDb {
    /// Creates `madeira_sql_<uuid>`. `Ok(None)`: no server and not on CI (skip).
    pub async fn create(kind: Kind) -> Result<Option<Self>, String> {
        let admin_url = admin_url(kind);
        let name = format!("madeira_sql_{}", uuid::Uuid::now_v7().simple());
        let created = match kind {
            Kind::Postgres => match PgConnection::connect(&admin_url).await {
                Ok(mut c) => Some(
                    sqlx::Executor::execute(&mut c, format!("CREATE DATABASE {name}").as_str())
                        .await
                        .map(|_| ()),
                ),
                Err(e) => skip_or_fail(&admin_url, e)?,
            },
            Kind::Mysql => match MySqlConnection::connect(&admin_url).await {
                Ok(mut c) => Some(
                    sqlx::Executor::execute(&mut c, format!("CREATE DATABASE {name}").as_str())
                        .await
                        .map(|_| ()),
                ),
                Err(e) => skip_or_fail(&admin_url, e)?,
            },
        };
        match created {
            None => Ok(None),
            Some(Err(e)) => Err(format!("CREATE DATABASE {name}: {e}")),
            Some(Ok(())) => Ok(Some(Self { kind, url: replace_db(&admin_url, &name), name, admin_url })),
        }
    }

    /// Runs `sql` (several statements allowed) on a fresh connection.
    pub async fn exec(&self, sql: &str) -> Result<(), String> {
        match self.kind {
            Kind::Postgres => {
                let mut c = PgConnection::connect(&self.url).await.map_err(|e| e.to_string())?;
                sqlx::Executor::execute(&mut c, sql).await.map(|_| ()).map_err(|e| format!("{sql}: {e}"))
            }
            Kind::Mysql => {
                let mut c = MySqlConnection::connect(&self.url).await.map_err(|e| e.to_string())?;
                sqlx::Executor::execute(&mut c, sql).await.map(|_| ()).map_err(|e| format!("{sql}: {e}"))
            }
        }
    }

    /// The first column of every row of `sql`, as text (`CAST(… AS CHAR)` / `::text` in the query).
    pub async fn strings(&self, sql: &str) -> Result<Vec<String>, String> {
        let e = |e: sqlx::Error| format!("{sql}: {e}");
        match self.kind {
            Kind::Postgres => {
                let mut c = PgConnection::connect(&self.url).await.map_err(|e| e.to_string())?;
                let rows = sqlx::query(sql).fetch_all(&mut c).await.map_err(e)?;
                rows.iter().map(|r| r.try_get::<String, _>(0).map_err(|x| x.to_string())).collect()
            }
            Kind::Mysql => {
                let mut c = MySqlConnection::connect(&self.url).await.map_err(|e| e.to_string())?;
                let rows = sqlx::query(sql).fetch_all(&mut c).await.map_err(e)?;
                rows.iter().map(|r| r.try_get_unchecked::<String, _>(0).map_err(|x| x.to_string())).collect()
            }
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
    pub async fn statement_time(&self, sql: &str, n: u32) -> Result<std::time::Duration, String> {
        let e = |e: sqlx::Error| e.to_string();
        let n = n.max(1);
        match self.kind {
            Kind::Postgres => {
                let mut c = PgConnection::connect(&self.url).await.map_err(e)?;
                sqlx::query(sql).fetch_all(&mut c).await.map_err(e)?;
                let started = std::time::Instant::now();
                for _ in 0..n {
                    sqlx::query(sql).fetch_all(&mut c).await.map_err(e)?;
                }
                Ok(started.elapsed() / n)
            }
            Kind::Mysql => {
                let mut c = MySqlConnection::connect(&self.url).await.map_err(e)?;
                sqlx::query(sql).fetch_all(&mut c).await.map_err(e)?;
                let started = std::time::Instant::now();
                for _ in 0..n {
                    sqlx::query(sql).fetch_all(&mut c).await.map_err(e)?;
                }
                Ok(started.elapsed() / n)
            }
        }
    }

    /// Sessions connected to this database (other than the caller's).
    pub async fn sessions(&self) -> Result<usize, String> {
        let sql = match self.kind {
            Kind::Postgres => "SELECT pid::text FROM pg_stat_activity WHERE datname = current_database() \
                               AND pid <> pg_backend_pid()"
                .to_string(),
            Kind::Mysql => {
                "SELECT CAST(ID AS CHAR) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() \
                            AND ID <> CONNECTION_ID()"
                    .to_string()
            }
        };
        Ok(self.strings(&sql).await?.len())
    }
}

fn skip_or_fail<T>(url: &str, e: sqlx::Error) -> Result<Option<T>, String> {
    if services_required() {
        return Err(format!("CI=true and the database at {url} is unreachable: {e}"));
    }
    eprintln!("skipping: the database at {url} is unreachable ({e})");
    Ok(None)
}

/// `url` with its database path replaced by `db` (query string kept).
fn replace_db(url: &str, db: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{db}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin_url, name, kind) = (self.admin_url.clone(), self.name.clone(), self.kind);
        // A thread of its own: Drop may run inside (or outside) a runtime.
        let dropper = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async {
                let _ = match kind {
                    Kind::Postgres => match PgConnection::connect(&admin_url).await {
                        Ok(mut c) => sqlx::Executor::execute(
                            &mut c,
                            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str(),
                        )
                        .await
                        .map(|_| ()),
                        Err(e) => Err(e),
                    },
                    Kind::Mysql => match MySqlConnection::connect(&admin_url).await {
                        Ok(mut c) => sqlx::Executor::execute(
                            &mut c,
                            format!("DROP DATABASE IF EXISTS {name}").as_str(),
                        )
                        .await
                        .map(|_| ()),
                        Err(e) => Err(e),
                    },
                };
            });
        });
        let _ = dropper.join();
    }
}
