//! `madeira flows delete`, `madeira promote` and `madeira demote`: the server call
//! (`DELETE /flows/{name}`, `POST /flows/{name}/promote|demote`) and, for the
//! latter two, the crontab edit (`crate::crontab::promote`) or, for a flow
//! `import xxl-job` wrote, the job's switch in XXL-JOB's database
//! (`crate::xxlimport::switch`). The order leaves any
//! gap on the safe side: promote takes the line out of the crontab before the
//! flow is governed (restoring the file when the server refuses), demote makes
//! the flow observe-only before the line comes back, so a job never runs twice
//! for one tick; a missed tick in between is reported as a missed run.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use reqwest::Method;
use serde_json::{Value, json};

use super::client_cmds::{print, query_value, str_of};
use crate::cli::{Output, PromoteArgs, ServerArgs};
use crate::client::{Body, Client};
use crate::crontab::promote::{find, put_back, take_out};
use crate::xxlimport::switch;

/// Largest crontab read from stdin.
const MAX_STDIN: u64 = 1 << 20;

pub async fn delete(
    name: &str,
    cancel: bool,
    purge: bool,
    reason: Option<String>,
    server: &ServerArgs,
) -> Result<ExitCode> {
    let mut path = format!("/flows/{name}?cancel={cancel}&purge={purge}");
    if let Some(reason) = reason {
        path.push_str(&format!("&reason={}", query_value(&reason)));
    }
    let reply = Client::new(server)?.call(Method::DELETE, &path, None, &[]).await?;
    print(server, reply.body, |b| {
        let cancelled = b["cancelled"].as_array().map_or(0, Vec::len);
        let mut out = format!("flow {} deleted", str_of(&b["flow"]));
        if b["purged"] == json!(true) {
            out.push_str(&format!("; {} run(s) and its versions purged", b["runs"]));
        } else {
            out.push_str(&format!("; its {} run(s) and audit stay readable", b["runs"]));
        }
        if cancelled > 0 {
            out.push_str(&format!("; cancelled {cancelled} active run(s) first"));
        }
        if b["events_dropped"].as_u64().unwrap_or(0) > 0 {
            out.push_str(&format!("; dropped {} event(s) kept while paused", b["events_dropped"]));
        }
        out
    })
}

/// The crontab to edit: its text and, unless read from stdin, its path.
fn read_crontab(args: &PromoteArgs, crontab: &Path) -> Result<(String, Option<PathBuf>)> {
    if crontab == Path::new("-") {
        if args.write {
            bail!("--write needs a file: `--crontab -` reads stdin and prints the result");
        }
        let mut text = String::new();
        std::io::stdin()
            .take(MAX_STDIN + 1)
            .read_to_string(&mut text)
            .context("reading the crontab from stdin")?;
        if text.len() as u64 > MAX_STDIN {
            bail!("the crontab on stdin is over {MAX_STDIN} bytes");
        }
        return Ok((text, None));
    }
    let text = crate::files::read_text(crontab, crate::files::Confine::Parent)?;
    Ok((text, Some(crontab.to_path_buf())))
}

/// Replaces `path` with `text` (through a temporary file and a rename, keeping
/// its mode), the previous content kept in `path.bak`.
fn write_with_backup(path: &Path, old: &str, text: &str) -> Result<PathBuf> {
    let backup = PathBuf::from(format!("{}.bak", path.display()));
    let perms = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?.permissions();
    std::fs::write(&backup, old).with_context(|| format!("writing {}", backup.display()))?;
    std::fs::set_permissions(&backup, perms.clone())?;
    let tmp = PathBuf::from(format!("{}.madeira-tmp", path.display()));
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, perms)?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(backup)
}

/// The crontab or the XXL-JOB database the flow is switched in (clap makes one of them given).
enum Other<'a> {
    Crontab(&'a Path),
    Xxl(&'a str),
}

fn other(args: &PromoteArgs) -> Result<Other<'_>> {
    match (&args.crontab, &args.xxl_db) {
        (Some(crontab), _) => Ok(Other::Crontab(crontab)),
        (None, Some(db)) => Ok(Other::Xxl(db)),
        (None, None) => {
            bail!("give --crontab FILE (a crontab flow) or --xxl-db URL (a flow `import xxl-job` wrote)")
        }
    }
}

pub async fn promote(args: PromoteArgs) -> Result<ExitCode> {
    let crontab = match other(&args)? {
        Other::Crontab(crontab) => crontab,
        Other::Xxl(db) => return promote_xxl(&args, db).await,
    };
    let (text, path) = read_crontab(&args, crontab)?;
    let wrapped = find(&text, &args.flow).map_err(|e| anyhow::anyhow!("{}: {e}", crontab.display()))?;
    let edited = take_out(&text, &wrapped, &args.flow);
    let client = Client::new(&args.server)?;
    let body = json!({"cron": wrapped.schedule, "timezone": wrapped.timezone, "reason": args.reason});
    let backup = match (&path, args.write) {
        (Some(path), true) => Some(write_with_backup(path, &text, &edited)?),
        _ => None,
    };
    let route = format!("/flows/{}/promote", args.flow);
    let reply = match client.call(Method::POST, &route, Some(Body::Json(body)), &[]).await {
        Ok(reply) => reply,
        Err(e) => {
            if let (Some(path), Some(_)) = (&path, &backup) {
                std::fs::write(path, &text).with_context(|| format!("restoring {}", path.display()))?;
                return Err(e.context(format!("nothing promoted; {} restored", path.display())));
            }
            return Err(e.context("nothing promoted; the crontab is unchanged"));
        }
    };
    let summary = format!(
        "flow {} is governed (version {}): Madeira runs it on `{}`; line {} of {} is now a comment",
        args.flow,
        reply.body["version"],
        wrapped.schedule,
        wrapped.line,
        crontab.display()
    );
    finish(&args, crontab, reply.body, wrapped.line, &edited, backup, summary)
}

pub async fn demote(args: PromoteArgs) -> Result<ExitCode> {
    let crontab = match other(&args)? {
        Other::Crontab(crontab) => crontab,
        Other::Xxl(db) => return demote_xxl(&args, db).await,
    };
    let (text, path) = read_crontab(&args, crontab)?;
    let (restored, line) =
        put_back(&text, &args.flow).map_err(|e| anyhow::anyhow!("{}: {e}", crontab.display()))?;
    let client = Client::new(&args.server)?;
    let body = json!({"reason": args.reason});
    let reply = client
        .call(Method::POST, &format!("/flows/{}/demote", args.flow), Some(Body::Json(body)), &[])
        .await
        .map_err(|e| e.context("nothing demoted; the crontab is unchanged"))?;
    let backup = match (&path, args.write) {
        (Some(path), true) => Some(write_with_backup(path, &text, &restored)?),
        _ => None,
    };
    let summary = format!(
        "flow {} is observe-only again (version {}); line {line} of {} runs it from cron again",
        args.flow,
        reply.body["version"],
        crontab.display()
    );
    finish(&args, crontab, reply.body, line, &restored, backup, summary)
}

/// Stops the flow's job in XXL-JOB, then governs the flow (its imported cron
/// trigger now fires in Madeira); puts the switch back when the server refuses.
async fn promote_xxl(args: &PromoteArgs, db: &str) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    let summary = client.call(Method::GET, &format!("/flows/{}", args.flow), None, &[]).await?;
    let job = switch::job_of(&args.flow, &summary.body)?;
    let before = switch::set(db, job, 0, 0).await?;
    let route = format!("/flows/{}/promote", args.flow);
    let body = json!({"reason": args.reason});
    let mut reply = match client.call(Method::POST, &route, Some(Body::Json(body)), &[]).await {
        Ok(reply) => reply,
        Err(e) => {
            switch::set(db, job, before.status, before.next_time).await.context(
                "the server refused and XXL-JOB's switch could not be put back: start the job in its admin",
            )?;
            return Err(e.context(format!("nothing promoted; XXL-JOB job {job} is as it was")));
        }
    };
    reply.body["xxl_job"] = json!({"id": job, "trigger_status": 0, "was": before.status});
    let text = format!(
        "flow {} is governed (version {}): Madeira triggers it; XXL-JOB job {job} is stopped there (trigger_status 0, was {})",
        args.flow, reply.body["version"], before.status
    );
    print_switch(args, reply.body, &text)
}

/// Makes the flow observe-only, then starts its job in XXL-JOB again.
async fn demote_xxl(args: &PromoteArgs, db: &str) -> Result<ExitCode> {
    let client = Client::new(&args.server)?;
    let summary = client.call(Method::GET, &format!("/flows/{}", args.flow), None, &[]).await?;
    let job = switch::job_of(&args.flow, &summary.body)?;
    let route = format!("/flows/{}/demote", args.flow);
    let body = json!({"reason": args.reason});
    let mut reply = client
        .call(Method::POST, &route, Some(Body::Json(body)), &[])
        .await
        .map_err(|e| e.context(format!("nothing demoted; XXL-JOB job {job} is unchanged")))?;
    switch::set(db, job, 1, 0).await.with_context(|| {
        format!(
            "flow {} is observe-only, but XXL-JOB job {job} could not be started: start it in its admin",
            args.flow
        )
    })?;
    reply.body["xxl_job"] = json!({"id": job, "trigger_status": 1});
    let text = format!(
        "flow {} is observe-only again (version {}); XXL-JOB job {job} is started there (trigger_status 1)",
        args.flow, reply.body["version"]
    );
    print_switch(args, reply.body, &text)
}

fn print_switch(args: &PromoteArgs, body: Value, text: &str) -> Result<ExitCode> {
    if args.server.output == Output::Json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    for warning in body["warnings"].as_array().into_iter().flatten() {
        eprintln!("warning: {}", str_of(warning));
    }
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// Prints the outcome: with `--write` a summary, otherwise the crontab to install
/// (on stdout; the summary on stderr). JSON carries both.
fn finish(
    args: &PromoteArgs,
    crontab_path: &Path,
    mut body: Value,
    line: usize,
    crontab: &str,
    backup: Option<PathBuf>,
    summary: String,
) -> Result<ExitCode> {
    let written = backup.is_some();
    body["crontab"] = json!({
        "path": crontab_path.display().to_string(),
        "line": line,
        "written": written,
        "backup": backup.as_ref().map(|b| b.display().to_string()),
        "text": crontab,
    });
    if args.server.output == Output::Json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    for warning in body["warnings"].as_array().into_iter().flatten() {
        eprintln!("warning: {}", str_of(warning));
    }
    match backup {
        Some(backup) => println!("{summary} (previous crontab in {})", backup.display()),
        None => {
            print!("{crontab}");
            eprintln!(
                "{summary} in the crontab printed above: install it (e.g. `crontab FILE`), or rerun with --write"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
