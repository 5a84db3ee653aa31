//! PostgreSQL backend: the same schema and semantics as the SQLite one, for
//! production and several control-plane replicas on one database. Commits are
//! durable (`synchronous_commit` as configured on the server, `on` by default);
//! decisions that SQLite serialises with its single writer (run creation with
//! idempotency and overlap, promotion of queued runs, flow versions, throttle
//! permits) take a transaction-scoped advisory lock here, claims use
//! `FOR UPDATE SKIP LOCKED`, and transient errors are retried. The SQL is `sql/`,
//! compiled here for this dialect.

// The SQL written once, compiled for this dialect (and again for the others).
#[allow(clippy::duplicate_mod)]
#[path = "../sql/mod.rs"]
mod sql;

mod partitions;

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{PgPool, Postgres, Transaction};

use crate::dialect::{Dialect, LockSpace, SqlStore};
use crate::{Result, StoreError};

/// PostgreSQL's dialect.
pub struct PgDialect;

impl Dialect for PgDialect {
    const NOW_MS: &'static str = "CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)";
    type DB = Postgres;
    /// PostgreSQL allows 65,535 bound values per statement.
    const CHUNK: usize = 1000;
    const BYTEWISE: &'static str = "\"C\"";
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const SKIP_LOCKED: &'static str = " FOR UPDATE SKIP LOCKED";
    const RETRIES: u32 = 5;
    const ANSWER_WITHIN: Option<Duration> = Some(Duration::from_secs(15));

    async fn insert_id(pool: &PgPool, mut q: sqlx::QueryBuilder<'_, Postgres>) -> Result<i64> {
        q.push(" RETURNING id");
        Ok(q.build_query_scalar().fetch_one(pool).await?)
    }

    async fn keep_partitions(pool: &PgPool, from_ms: i64, to_ms: i64) -> Result<u32> {
        partitions::keep(pool, from_ms, to_ms).await
    }

    async fn partition_days(pool: &PgPool) -> Result<Vec<i64>> {
        partitions::days(pool).await
    }

    async fn retire_day(pool: &PgPool, day_ms: i64) -> Result<bool> {
        partitions::retire(pool, day_ms).await
    }

    async fn retire_old(pool: &PgPool) -> Result<u32> {
        partitions::retire_old(pool).await
    }

    async fn partitioned_ids(pool: &PgPool) -> Result<Option<(String, String)>> {
        partitions::partitioned_ids(pool).await
    }

    fn missing_partition(e: &StoreError) -> Option<String> {
        partitions::missing_partition(e)
    }

    async fn make_room(pool: &PgPool, key: &str) -> Result<u32> {
        partitions::make_room(pool, key).await
    }

    async fn lock(tx: &mut Transaction<'_, Postgres>, space: LockSpace, key: &str) -> Result<()> {
        let space: i64 = match space {
            LockSpace::Flow => 7070,
            LockSpace::Permit => 7071,
        };
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, $2))")
            .bind(key)
            .bind(space)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }
}

type D = PgDialect;
/// `D`'s connection type, named (the shared SQL implements a trait for it).
type DConn = sqlx::PgConnection;

/// The store on PostgreSQL.
pub type PostgresStore = SqlStore<PgDialect>;

impl SqlStore<PgDialect> {
    /// Connects to `url` (`postgres://user@host/db`; a pool of `dialect::POOL_SIZE`)
    /// and applies the migrations (sqlx takes an advisory lock, so replicas
    /// starting together are safe).
    pub async fn open(url: &str) -> Result<Self> {
        let connect = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::BadUrl { url: url.to_string(), reason: e.to_string() })?
            .application_name("madeira")
            // The store's queries are short index look-ups. With a month of history
            // the planner's cost estimates pass `jit_above_cost` and PostgreSQL spends
            // ~1 s compiling a query that runs in 1 ms (seen at 1M runs: the held-runs
            // sweep took 1.1 s, all of it JIT).
            .options([("jit", "off")]);
        let pool = crate::dialect::pool_options(crate::dialect::POOL_SIZE, crate::dialect::ACQUIRE_TIMEOUT)
            .connect_with(connect)
            .await?;
        sqlx::migrate!("../../migrations/postgres").run(&pool).await?;
        // The time partitions of yesterday to a week ahead, before any write
        // (then the engine's keeper, `RetentionStore::keep_partitions`).
        let now = chrono::Utc::now().timestamp_millis();
        partitions::keep(
            &pool,
            now - partitions::DAY_MS,
            now + partitions::KEEP_AHEAD_DAYS * partitions::DAY_MS,
        )
        .await?;
        Ok(Self { writer: pool.clone(), reader: pool, dialect: PgDialect, answer_within: D::ANSWER_WITHIN })
    }

    /// The connection pool (for LISTEN/NOTIFY and tests).
    pub fn pool(&self) -> &PgPool {
        &self.writer
    }

    /// `Dialect::partitioned_ids` of this store.
    #[cfg(test)]
    pub(crate) async fn partitioned_ids_for_tests(&self) -> Result<Option<(String, String)>> {
        partitions::partitioned_ids(&self.writer).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PgTestDb;

    #[tokio::test]
    async fn the_stores_connections_run_without_jit() {
        let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
        let store = PostgresStore::open(&db.url).await.expect("open postgres");
        for _ in 0..3 {
            let (jit,): (String,) =
                sqlx::query_as("SHOW jit").fetch_one(store.pool()).await.expect("show jit");
            assert_eq!(jit, "off", "every pooled connection");
        }
    }
}
