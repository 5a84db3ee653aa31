//! Test support (feature `test-support`): a fresh PostgreSQL database per test,
//! created on the server named by `MADEIRA_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), or a fresh MySQL/MariaDB one on
//! `MADEIRA_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306`), dropped when
//! the guard goes. Without a reachable server a test is skipped, unless
//! `CI=true`: then it fails.

use sqlx::Connection;
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;

/// The admin URL tests create their databases from.
pub fn pg_admin_url() -> String {
    std::env::var("MADEIRA_TEST_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The admin URL MySQL/MariaDB test databases are created from.
pub fn mysql_admin_url() -> String {
    std::env::var("MADEIRA_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// The Redis tests use (`MADEIRA_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`);
/// tests keep apart by key prefix.
pub fn redis_url() -> String {
    std::env::var("MADEIRA_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Whether a missing service must fail the test rather than skip it.
pub fn services_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A database that exists for one test.
pub struct PgTestDb {
    pub url: String,
    name: String,
    admin_url: String,
}

impl PgTestDb {
    /// Creates `madeira_t_<uuid>`. `Ok(None)`: no server and not on CI (skip).
    pub async fn create() -> Result<Option<Self>, String> {
        let admin_url = pg_admin_url();
        let Some((url, name)) = create_db::<PgConnection>(&admin_url, "PostgreSQL", "").await? else {
            return Ok(None);
        };
        Ok(Some(Self { url, name, admin_url }))
    }
}

/// Creates a fresh `madeira_t_<uuid>` database (`CREATE DATABASE name{suffix}`) on
/// the server at `admin_url`; its URL and name. `Ok(None)`: unreachable, not on CI.
async fn create_db<C: Connection>(
    admin_url: &str,
    server: &str,
    suffix: &str,
) -> Result<Option<(String, String)>, String>
where
    for<'c> &'c mut C: sqlx::Executor<'c>,
{
    let mut admin = match C::connect(admin_url).await {
        Ok(conn) => conn,
        Err(e) if !services_required() => {
            eprintln!("skipping: {server} at {admin_url} is unreachable ({e})");
            return Ok(None);
        }
        Err(e) => return Err(format!("CI=true and {server} at {admin_url} is unreachable: {e}")),
    };
    let name = format!("madeira_t_{}", uuid::Uuid::now_v7().simple());
    sqlx::raw_sql(&format!("CREATE DATABASE {name}{suffix}"))
        .execute(&mut admin)
        .await
        .map_err(|e| format!("CREATE DATABASE {name}: {e}"))?;
    let _ = admin.close().await;
    Ok(Some((replace_db(admin_url, &name), name)))
}

/// Runs `drop` to completion on a runtime of its own thread: `Drop` may run
/// inside (or outside) a runtime.
fn on_own_runtime<F: std::future::Future<Output = ()> + Send + 'static>(drop: F) {
    let dropper = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
            rt.block_on(drop);
        }
    });
    let _ = dropper.join();
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

impl Drop for PgTestDb {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        on_own_runtime(async move {
            if let Ok(mut admin) = PgConnection::connect(&admin_url).await {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await;
                let _ = admin.close().await;
            }
        });
    }
}

/// A MySQL/MariaDB database that exists for one test.
pub struct MySqlTestDb {
    pub url: String,
    name: String,
    admin_url: String,
}

impl MySqlTestDb {
    /// Creates `madeira_t_<uuid>`. `Ok(None)`: no server and not on CI (skip).
    pub async fn create() -> Result<Option<Self>, String> {
        let admin_url = mysql_admin_url();
        let Some((url, name)) =
            create_db::<MySqlConnection>(&admin_url, "MySQL/MariaDB", " CHARACTER SET utf8mb4").await?
        else {
            return Ok(None);
        };
        Ok(Some(Self { url, name, admin_url }))
    }
}

impl Drop for MySqlTestDb {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        on_own_runtime(async move {
            let Ok(mut admin) = MySqlConnection::connect(&admin_url).await else { return };
            // Like PostgreSQL's `WITH (FORCE)`: the store's pooled connections may
            // still hold a transaction (their rollback runs on a runtime that is no
            // longer polled), and DROP would wait on it.
            let ids: Vec<(i64,)> =
                sqlx::query_as("SELECT CAST(id AS SIGNED) FROM information_schema.processlist WHERE db = ?")
                    .bind(&name)
                    .fetch_all(&mut admin)
                    .await
                    .unwrap_or_default();
            for (id,) in ids {
                let _ = sqlx::query(&format!("KILL {id}")).execute(&mut admin).await;
            }
            let _ = sqlx::query("SET SESSION lock_wait_timeout = 30").execute(&mut admin).await;
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}")).execute(&mut admin).await;
            let _ = admin.close().await;
        });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn database_name_is_replaced() {
        assert_eq!(super::replace_db("postgres://u@h:5432/test", "x"), "postgres://u@h:5432/x");
        assert_eq!(
            super::replace_db("postgres://u@h/test?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
        assert_eq!(super::replace_db("postgres://u@h", "x"), "postgres://u@h/x");
    }
}
