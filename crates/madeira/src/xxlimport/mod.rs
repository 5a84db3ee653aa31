//! `madeira import xxl-job --from mysql://…/xxl_job [--app APP] [--out DIR]`:
//! reads XXL-JOB's `xxl_job_group` and `xxl_job_info` (2.3+ `schedule_type` /
//! `schedule_conf`, or the older `job_cron`), maps them (`map`), validates every
//! flow with the flow parser, and only then writes `DIR/<flow>.yaml` (or prints
//! them). Jobs that cannot be mapped are listed with the reason; the exit code is
//! 1 when any was refused, so a script cannot miss them.

pub mod map;
pub mod switch;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use sqlx::mysql::MySqlRow;
use sqlx::{Column, Row};

use map::{Group, Job, Mapped};

/// What `import xxl-job` was asked.
pub struct ImportArgs {
    pub from: String,
    pub app: Option<String>,
    pub out: Option<PathBuf>,
    pub timezone: String,
    pub output: crate::cli::Output,
}

pub async fn run(args: ImportArgs) -> Result<ExitCode> {
    if !args.from.starts_with("mysql://") {
        bail!(
            "--from `{}`: give XXL-JOB's database as mysql://user:pass@host:3306/xxl_job",
            crate::app::redact(&args.from)
        );
    }
    let (groups, jobs) =
        read(&args.from).await.with_context(|| format!("reading {}", crate::app::redact(&args.from)))?;
    if let Some(app) = &args.app
        && !groups.iter().any(|g| &g.app_name == app)
    {
        let apps: Vec<&str> = groups.iter().map(|g| g.app_name.as_str()).collect();
        bail!("--app {app}: no such executor app in xxl_job_group (has: {})", apps.join(", "));
    }
    let mapped = map::map(&groups, &jobs, args.app.as_deref(), &args.timezone);
    check(&mapped)?;
    if args.output == crate::cli::Output::Json {
        report_json(&mapped, args.out.as_deref())?;
    } else {
        report(&mapped, args.out.as_deref())?;
    }
    Ok(if mapped.refused.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Every flow must parse before any is written.
fn check(mapped: &Mapped) -> Result<()> {
    let mut problems = Vec::new();
    for (name, yaml) in &mapped.flows {
        if let Err(e) = madeira_core::spec::parse_flow(&format!("{name}.yaml"), yaml) {
            problems.push(format!("{e}\n{yaml}"));
        }
    }
    if !problems.is_empty() {
        bail!("the imported flows do not validate (nothing written):\n{}", problems.join("\n"));
    }
    Ok(())
}

fn report(mapped: &Mapped, out: Option<&Path>) -> Result<()> {
    match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, yaml) in &mapped.flows {
                let path = dir.join(format!("{name}.yaml"));
                std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                println!("wrote {}", path.display());
            }
        }
        None => {
            for (name, yaml) in &mapped.flows {
                println!("# --- {name}.yaml ---\n{yaml}");
            }
        }
    }
    for note in &mapped.notes {
        eprintln!("note: {note}");
    }
    for r in &mapped.refused {
        eprintln!("refused: job {} ({}): {}", r.job, r.desc, r.reason);
    }
    eprintln!(
        "{} flow(s), {} job(s) refused; flows are in observe mode (XXL-JOB keeps triggering) until promoted",
        mapped.flows.len(),
        mapped.refused.len()
    );
    Ok(())
}

/// `--output json`: the same, as one document on stdout (flows written to `out`
/// when given, else carried in it).
fn report_json(mapped: &Mapped, out: Option<&Path>) -> Result<()> {
    let mut flows = Vec::new();
    for (name, yaml) in &mapped.flows {
        match out {
            Some(dir) => {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                let path = dir.join(format!("{name}.yaml"));
                std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                flows.push(serde_json::json!({"flow": name, "file": path.display().to_string()}));
            }
            None => flows.push(serde_json::json!({"flow": name, "yaml": yaml})),
        }
    }
    let refused: Vec<_> = mapped
        .refused
        .iter()
        .map(|r| serde_json::json!({"job": r.job, "desc": r.desc, "reason": r.reason}))
        .collect();
    let doc = serde_json::json!({"flows": flows, "refused": refused, "notes": mapped.notes});
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}

fn text(row: &MySqlRow, col: &str) -> String {
    row.try_get::<Option<String>, _>(col).ok().flatten().unwrap_or_default()
}

fn int(row: &MySqlRow, col: &str) -> i64 {
    row.try_get::<Option<i64>, _>(col)
        .ok()
        .flatten()
        .or_else(|| row.try_get::<Option<i32>, _>(col).ok().flatten().map(i64::from))
        .or_else(|| row.try_get::<Option<i8>, _>(col).ok().flatten().map(i64::from))
        .unwrap_or_default()
}

async fn read(url: &str) -> Result<(Vec<Group>, Vec<Job>)> {
    use sqlx::ConnectOptions;
    let options: sqlx::mysql::MySqlConnectOptions = url.parse().context("parsing the MySQL URL")?;
    let mut conn = options.connect().await.context("connecting")?;
    let groups: Vec<Group> = sqlx::query("SELECT * FROM xxl_job_group ORDER BY id")
        .fetch_all(&mut conn)
        .await
        .context("SELECT FROM xxl_job_group")?
        .iter()
        .map(|r| Group { id: int(r, "id"), app_name: text(r, "app_name") })
        .collect();
    let rows = sqlx::query("SELECT * FROM xxl_job_info ORDER BY id")
        .fetch_all(&mut conn)
        .await
        .context("SELECT FROM xxl_job_info")?;
    let jobs = rows
        .iter()
        .map(|r| {
            let has = |c: &str| r.columns().iter().any(|col| col.name() == c);
            let newer = has("schedule_type");
            Job {
                id: int(r, "id"),
                group: int(r, "job_group"),
                desc: text(r, "job_desc"),
                alarm_email: text(r, "alarm_email"),
                schedule_type: newer.then(|| text(r, "schedule_type")),
                schedule_conf: if newer { text(r, "schedule_conf") } else { text(r, "job_cron") },
                misfire: has("misfire_strategy").then(|| text(r, "misfire_strategy")),
                route: text(r, "executor_route_strategy"),
                handler: text(r, "executor_handler"),
                param: text(r, "executor_param"),
                block: text(r, "executor_block_strategy"),
                timeout_secs: int(r, "executor_timeout"),
                retry_count: int(r, "executor_fail_retry_count"),
                glue_type: text(r, "glue_type"),
                child_jobid: text(r, "child_jobid"),
                trigger_status: int(r, "trigger_status"),
            }
        })
        .collect();
    Ok((groups, jobs))
}
