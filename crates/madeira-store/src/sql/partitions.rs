//! Retention by the day where the database keeps time partitions (PostgreSQL's
//! `logs` and `run_archive`, `Dialect::partition_days`): a day whose every run
//! has finished before the cutoff, or is gone, has its partitions dropped, not
//! its rows deleted; the runs' own rows go by `runs::prune`'s batches, which
//! leave those two tables' rows of partitioned days to the drop. Elsewhere the
//! dialect has no days and retention deletes rows as before. The partition that
//! holds an upgraded table's rows from before partitioning (`_old`) is dropped
//! once retention has pruned every run of its range.

use madeira_core::timebound::id_bound;

use super::{D, Pool, sql};
use crate::Result;
use crate::dialect::Dialect;

const DAY_MS: i64 = 86_400_000;

/// See `RetentionStore::keep_partitions`.
pub(super) async fn keep(pool: &Pool, from_ms: i64, to_ms: i64) -> Result<u32> {
    D::keep_partitions(pool, from_ms, to_ms).await
}

/// See `RetentionStore::drop_days`.
pub(super) async fn drop_days(pool: &Pool, before_ms: i64) -> Result<u32> {
    let mut dropped = 0;
    for day in D::partition_days(pool).await? {
        if day + DAY_MS > before_ms {
            break;
        }
        // A run of the day unfinished, or finished within retention, keeps it
        // (the runs_pkey range, read once; runs already pruned are not there).
        let kept: Option<(String,)> = sqlx::query_as(&sql(
            "SELECT id FROM runs WHERE id >= $1 AND id < $2 AND NOT (finished_at IS NOT NULL \
             AND finished_at < $3 AND state IN ('SUCCESS', 'FAILED', 'CANCELLED')) LIMIT 1",
        ))
        .bind(id_bound(day))
        .bind(id_bound(day + DAY_MS))
        .bind(before_ms)
        .fetch_optional(pool)
        .await?;
        if kept.is_some() {
            continue;
        }
        if D::retire_day(pool, day).await? {
            dropped += 1;
        }
    }
    // An upgraded store's old tables, emptied run by run over one retention period.
    D::retire_old(pool).await?;
    Ok(dropped)
}
