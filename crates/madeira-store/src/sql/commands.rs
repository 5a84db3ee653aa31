//! Operator actions forwarded between replicas (`run_commands`): queued by the
//! replica that received them, taken once by the holder (`D::SKIP_LOCKED`),
//! answered back.

use super::{D, Pool};
use crate::dialect::Dialect;
use crate::{Result, RunCommand};

type Row = (i64, String, String, String, Option<String>, String, Option<String>, i64);

fn command((id, run_id, target, action, node, actor, reason, created_at): Row) -> RunCommand {
    RunCommand { id, run_id, target, action, node, actor, reason, created_at }
}

pub(super) async fn send_command(pool: &Pool, cmd: &RunCommand) -> Result<i64> {
    let (id,): (i64,) = sqlx::query_as(
        "INSERT INTO run_commands (run_id, target, action, node, actor, reason, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(&cmd.run_id)
    .bind(&cmd.target)
    .bind(&cmd.action)
    .bind(&cmd.node)
    .bind(&cmd.actor)
    .bind(&cmd.reason)
    .bind(cmd.created_at)
    .fetch_one(pool)
    .await?;
    Ok(id)
}

pub(super) async fn take_commands(pool: &Pool, target: &str, now_ms: i64) -> Result<Vec<RunCommand>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "UPDATE run_commands SET taken_at = $1 WHERE id IN ( \
           SELECT id FROM run_commands WHERE target = $2 AND taken_at IS NULL \
           ORDER BY id{}) \
         RETURNING id, run_id, target, action, node, actor, reason, created_at",
        D::SKIP_LOCKED
    ))
    .bind(now_ms)
    .bind(target)
    .fetch_all(pool)
    .await?;
    let mut commands: Vec<RunCommand> = rows.into_iter().map(command).collect();
    commands.sort_by_key(|c| c.id);
    Ok(commands)
}

pub(super) async fn answer_command(pool: &Pool, id: i64, answer: &str, now_ms: i64) -> Result<()> {
    sqlx::query("UPDATE run_commands SET answer = $1, answered_at = $2 WHERE id = $3")
        .bind(answer)
        .bind(now_ms)
        .bind(id)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn command_answer(pool: &Pool, id: i64) -> Result<Option<String>> {
    let row: Option<(Option<String>,)> =
        sqlx::query_as("SELECT answer FROM run_commands WHERE id = $1").bind(id).fetch_optional(pool).await?;
    Ok(row.and_then(|(a,)| a))
}

pub(super) async fn withdraw_command(pool: &Pool, id: i64) -> Result<bool> {
    let done = sqlx::query("DELETE FROM run_commands WHERE id = $1 AND taken_at IS NULL")
        .bind(id)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() > 0)
}
