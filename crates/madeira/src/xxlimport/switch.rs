//! `madeira promote FLOW --xxl-db URL` / `demote`: the XXL-JOB side of moving an
//! imported flow (`labels: {source: xxl-job, xxl_job_id: N}`) between XXL-JOB and
//! Madeira. Promote stops job N in XXL-JOB's `xxl_job_info` (`trigger_status` 0)
//! before the flow is governed; demote makes the flow observe-only before the job
//! is started again there, so a tick never runs in both (the crontab path's order).

use anyhow::{Context, Result, bail};
use serde_json::Value;
use sqlx::{ConnectOptions, MySqlConnection};

/// A job's schedule switch in XXL-JOB, as it was before Madeira changed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    pub job: i64,
    pub status: i64,
    pub next_time: i64,
}

/// The XXL-JOB job id of an imported flow (`GET /flows/{name}`'s labels).
pub fn job_of(flow: &str, summary: &Value) -> Result<i64> {
    let labels = &summary["labels"];
    let id = labels["xxl_job_id"].as_str().and_then(|s| s.parse::<i64>().ok());
    match (labels["source"].as_str(), id) {
        (Some("xxl-job"), Some(id)) => Ok(id),
        _ => bail!(
            "flow {flow} was not written by `madeira import xxl-job` (no labels `source: xxl-job`, `xxl_job_id`); \
             promote a crontab flow with --crontab FILE, or add the labels"
        ),
    }
}

async fn connect(url: &str) -> Result<MySqlConnection> {
    if !url.starts_with("mysql://") {
        bail!(
            "--xxl-db `{}`: give XXL-JOB's database as mysql://user:pass@host:3306/xxl_job",
            crate::app::redact(url)
        );
    }
    let options: sqlx::mysql::MySqlConnectOptions = url.parse().context("parsing the --xxl-db URL")?;
    options.connect().await.with_context(|| format!("connecting to {}", crate::app::redact(url)))
}

/// Sets job `job`'s `trigger_status` to `status` (0 stops XXL-JOB's schedule, 1 starts
/// it; `trigger_next_time` as given, 0 lets XXL-JOB compute it) and returns what it was.
pub async fn set(url: &str, job: i64, status: i64, next_time: i64) -> Result<Switch> {
    let mut conn = connect(url).await?;
    let before: Option<(i64, i64)> = sqlx::query_as(
        "SELECT CAST(trigger_status AS SIGNED), CAST(trigger_next_time AS SIGNED) FROM xxl_job_info WHERE id = ?",
    )
    .bind(job)
    .fetch_optional(&mut conn)
    .await
    .context("reading xxl_job_info")?;
    let Some((old_status, old_next)) = before else {
        bail!("XXL-JOB has no job {job} in xxl_job_info (was it deleted there?)");
    };
    sqlx::query("UPDATE xxl_job_info SET trigger_status = ?, trigger_next_time = ? WHERE id = ?")
        .bind(status)
        .bind(next_time)
        .bind(job)
        .execute(&mut conn)
        .await
        .context("updating xxl_job_info")?;
    Ok(Switch { job, status: old_status, next_time: old_next })
}
