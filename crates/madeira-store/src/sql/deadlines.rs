//! Deadline misses: the (flow, business date) pairs whose `MadeiraDeadlineMissed`
//! alert has fired, recorded once under the flow's lock.

use super::{Pool, sql};
use crate::Result;

/// Records that the deadline of `flow` for `biz_date` was missed; true only for
/// the first caller (the one that raises the alert), on any replica.
pub(super) async fn record_deadline_miss(
    pool: &Pool,
    flow: &str,
    biz_date: &str,
    now_ms: i64,
) -> Result<bool> {
    let mut tx = pool.begin().await?;
    super::runs::lock_flow(&mut tx, flow).await?;
    let seen: Option<(i64,)> =
        sqlx::query_as(&sql("SELECT fired_at FROM deadline_misses WHERE flow = $1 AND biz_date = $2"))
            .bind(flow)
            .bind(biz_date)
            .fetch_optional(&mut *tx)
            .await?;
    if seen.is_some() {
        return Ok(false);
    }
    sqlx::query(&sql("INSERT INTO deadline_misses (flow, biz_date, fired_at) VALUES ($1, $2, $3)"))
        .bind(flow)
        .bind(biz_date)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}
