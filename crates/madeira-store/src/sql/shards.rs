//! Kept shard results (`crate::ShardResult`): written as each shard succeeds,
//! read when a sharded attempt starts.

use super::{Pool, sql, upsert};

use crate::{Result, ShardResult};

pub(super) async fn put(pool: &Pool, r: &ShardResult) -> Result<()> {
    sqlx::query(&sql(&format!(
        "INSERT INTO shard_results (run_id, node, idem_key, shard, input_hash, outputs, at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7){}",
        upsert("run_id, node, idem_key, shard", "input_hash, outputs, at")
    )))
    .bind(&r.run_id)
    .bind(&r.node)
    .bind(&r.key)
    .bind(i64::from(r.shard))
    .bind(&r.input_hash)
    .bind(&r.outputs)
    .bind(r.at_ms)
    .execute(pool)
    .await?;
    Ok(())
}

pub(super) async fn list(pool: &Pool, run_id: &str, node: &str, key: &str) -> Result<Vec<ShardResult>> {
    let rows: Vec<(i64, String, String, i64)> =
        sqlx::query_as(&sql("SELECT shard, input_hash, outputs, at FROM shard_results \
         WHERE run_id = $1 AND node = $2 AND idem_key = $3 ORDER BY shard"))
        .bind(run_id)
        .bind(node)
        .bind(key)
        .fetch_all(pool)
        .await?;
    rows.into_iter()
        .map(|(shard, input_hash, outputs, at_ms)| {
            let shard = u32::try_from(shard).map_err(|_| crate::StoreError::Corrupt {
                table: "shard_results",
                detail: format!("shard index {shard} of run {run_id} node {node}"),
            })?;
            Ok(ShardResult {
                run_id: run_id.to_string(),
                node: node.to_string(),
                key: key.to_string(),
                shard,
                input_hash,
                outputs,
                at_ms,
            })
        })
        .collect()
}
