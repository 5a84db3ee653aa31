//! Operator actions forwarded between replicas (`run_commands`): queued by the
//! replica that received them, taken once by the holder (`D::SKIP_LOCKED`),
//! answered back.

use sqlx::QueryBuilder;

use super::{CHUNK, D, Db, Pool, push_list, sql};
use crate::dialect::Dialect;
use crate::{Result, RunCommand};

type Row = (i64, String, String, String, Option<String>, String, Option<String>, i64);

fn command((id, run_id, target, action, node, actor, reason, created_at): Row) -> RunCommand {
    RunCommand { id, run_id, target, action, node, actor, reason, created_at }
}

pub(super) async fn send_command(pool: &Pool, cmd: &RunCommand) -> Result<i64> {
    let mut q: QueryBuilder<Db> = QueryBuilder::new(
        "INSERT INTO run_commands (run_id, target, action, node, actor, reason, created_at) ",
    );
    q.push_values([cmd], |mut b, c| {
        b.push_bind(&c.run_id)
            .push_bind(&c.target)
            .push_bind(&c.action)
            .push_bind(&c.node)
            .push_bind(&c.actor)
            .push_bind(&c.reason)
            .push_bind(c.created_at);
    });
    D::insert_id(pool, q).await
}

pub(super) async fn take_commands(pool: &Pool, target: &str, now_ms: i64) -> Result<Vec<RunCommand>> {
    // Selected and locked (skipping rows another transaction is taking), then
    // marked taken, in one transaction.
    let mut tx = pool.begin().await?;
    let rows: Vec<Row> = sqlx::query_as(&sql(&format!(
        "SELECT id, run_id, target, action, node, actor, reason, created_at FROM run_commands \
         WHERE target = $1 AND taken_at IS NULL ORDER BY id{}",
        D::SKIP_LOCKED
    )))
    .bind(target)
    .fetch_all(&mut *tx)
    .await?;
    let mut commands: Vec<RunCommand> = rows.into_iter().map(command).collect();
    commands.sort_by_key(|c| c.id);
    for chunk in commands.chunks(CHUNK) {
        let mut q: QueryBuilder<Db> = QueryBuilder::new("UPDATE run_commands SET taken_at = ");
        q.push_bind(now_ms).push(" WHERE id IN ");
        push_list(&mut q, chunk.iter().map(|c| c.id));
        q.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(commands)
}

pub(super) async fn answer_command(pool: &Pool, id: i64, answer: &str, now_ms: i64) -> Result<()> {
    sqlx::query(&sql("UPDATE run_commands SET answer = $1, answered_at = $2 WHERE id = $3"))
        .bind(answer)
        .bind(now_ms)
        .bind(id)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn command_answer(pool: &Pool, id: i64) -> Result<Option<String>> {
    let row: Option<(Option<String>,)> =
        sqlx::query_as(&sql("SELECT answer FROM run_commands WHERE id = $1"))
            .bind(id)
            .fetch_optional(pool)
            .await?;
    Ok(row.and_then(|(a,)| a))
}

pub(super) async fn withdraw_command(pool: &Pool, id: i64) -> Result<bool> {
    let done = sqlx::query(&sql("DELETE FROM run_commands WHERE id = $1 AND taken_at IS NULL"))
        .bind(id)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}
