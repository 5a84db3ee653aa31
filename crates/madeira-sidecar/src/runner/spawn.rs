//! Building the job's command: rendered argv (no shell), its own process group,
//! the SPEC §4 environment, the input file, and an optional user switch.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use serde_json::{Value as Json, json};
use std::process::Command;

use super::Attempt;
use crate::config::JobSpec;

pub(super) fn program(job: &JobSpec) -> String {
    job.command.first().and_then(|t| t.render(&Json::Null).ok()).unwrap_or_default()
}

/// The variables templates can read.
fn template_vars(attempt: &Attempt) -> Json {
    let (index, total) = attempt.shard.unwrap_or((0, 1));
    json!({
        "params": attempt.input.get("params").cloned().unwrap_or(Json::Object(Default::default())),
        "nodes": attempt.input.get("nodes").cloned().unwrap_or(Json::Object(Default::default())),
        "run_id": attempt.run_id,
        "flow": attempt.flow,
        "node": attempt.node,
        "attempt": attempt.attempt,
        "idempotency_key": attempt.idempotency_key,
        "shard_index": index,
        "shard_total": total,
        "biz_date": attempt.input.get("biz_date").cloned().unwrap_or(Json::Null),
    })
}

/// The read end of the one pipe a job's stdout and stderr both write into.
pub(super) type Output = tokio::net::unix::pipe::Receiver;

/// Renders the argv, writes the input file into `dir`, and builds the command,
/// with the read end of its output. stdout and stderr share one pipe (as `2>&1`
/// does), so lines are read in the order the job wrote them; the command holds
/// the write ends until it is dropped.
pub(super) fn prepare(
    job: &JobSpec,
    attempt: &Attempt,
    dir: &Path,
    hide_env: &[String],
) -> Result<(Command, Output), String> {
    let vars = template_vars(attempt);
    let argv = job
        .command
        .iter()
        .enumerate()
        .map(|(i, t)| t.render(&vars).map_err(|e| format!("job `{}`: command[{i}]: {e}", job.name)))
        .collect::<Result<Vec<String>, String>>()?;
    let user = match &job.user {
        Some(name) => Some(lookup_user(name)?),
        None => None,
    };
    let input = dir.join(super::workdir::INPUT);
    let output = dir.join("output.json");
    let owner = user.as_ref().map(|u| (u.uid, u.gid, u.name.clone()));
    // Written in place, not on the blocking pool: a directory and one small file
    // in the page cache (no sync) cost less than the trip there and back, and the
    // spawn that follows blocks this thread longer anyway.
    write_input(dir, &input, &attempt.input.to_string(), owner)?;

    let (reader, stdout) = std::io::pipe().map_err(|e| format!("cannot make the output pipe: {e}"))?;
    let stderr = stdout.try_clone().map_err(|e| format!("cannot make the output pipe: {e}"))?;
    let job_output =
        Output::from_owned_fd(reader.into()).map_err(|e| format!("cannot read the output pipe: {e}"))?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(if job.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    if job.clear_env {
        cmd.env_clear();
    }
    for var in hide_env {
        cmd.env_remove(var);
    }
    if let Some(u) = &user {
        cmd.uid(u.uid).gid(u.gid).env("HOME", &u.home).env("USER", &u.name).env("LOGNAME", &u.name);
    }
    cmd.envs(&job.env);
    let (index, total) = attempt.shard.unwrap_or((0, 0));
    cmd.env("MADEIRA_RUN_ID", &attempt.run_id)
        .env("MADEIRA_FLOW", &attempt.flow)
        .env("MADEIRA_NODE", &attempt.node)
        .env("MADEIRA_JOB", &job.name)
        .env("MADEIRA_ATTEMPT", attempt.attempt.to_string())
        .env("MADEIRA_IDEMPOTENCY_KEY", &attempt.idempotency_key)
        .env("MADEIRA_INPUT_FILE", &input)
        .env("MADEIRA_OUTPUT_FILE", &output);
    if let Some(date) = attempt.input.get("biz_date").and_then(Json::as_str) {
        cmd.env("MADEIRA_BIZ_DATE", date);
    }
    // A `foreach` node's item: text as it is, any other value as JSON.
    if let Some(item) = attempt.input.get("item") {
        let text = item.as_str().map_or_else(|| item.to_string(), str::to_string);
        cmd.env("MADEIRA_ITEM", text);
        if let Some(index) = attempt.input.get("item_index").and_then(Json::as_u64) {
            cmd.env("MADEIRA_ITEM_INDEX", index.to_string());
        }
    }
    if total > 0 {
        cmd.env("MADEIRA_SHARD_INDEX", index.to_string()).env("MADEIRA_SHARD_TOTAL", total.to_string());
    }
    if let Some(tp) = &attempt.traceparent {
        cmd.env("TRACEPARENT", tp);
    }
    if let Some(workdir) = &job.workdir {
        cmd.current_dir(workdir);
    }
    Ok((cmd, job_output))
}

/// Creates the attempt directory (0700; a recycled one when there is one,
/// `workdir.rs`) and its input file (0600), handed to the job's user when it switches.
fn write_input(
    dir: &Path,
    input: &Path,
    text: &str,
    owner: Option<(u32, u32, String)>,
) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if !super::workdir::reuse(dir) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    // Never through a symbolic link: the file is written, and handed over, as itself.
    // A recycled directory keeps its input file (`workdir.rs`): written over in
    // place and cut to this input's length, not truncated first (a file cut to
    // nothing frees its block, which waits for a discard on such disks).
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(input)
        .map_err(|e| format!("cannot write {}: {e}", input.display()))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.set_len(text.len() as u64))
        .map_err(|e| format!("cannot write {}: {e}", input.display()))?;
    if let Some((uid, gid, name)) = owner {
        let handed = std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .and_then(|()| std::os::unix::fs::fchown(&file, Some(uid), Some(gid)));
        handed.map_err(|e| format!("cannot hand {} to user {name}: {e}", dir.display()))?;
    }
    Ok(())
}

struct User {
    name: String,
    uid: u32,
    gid: u32,
    home: String,
}

/// Finds `name` in /etc/passwd. Switching needs root unless it is the current user.
fn lookup_user(name: &str) -> Result<User, String> {
    let passwd =
        std::fs::read_to_string("/etc/passwd").map_err(|e| format!("cannot read /etc/passwd: {e}"))?;
    let user = passwd
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 6 && f[0] == name)
        .and_then(|f| {
            Some(User {
                name: name.to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f[5].to_string(),
            })
        })
        .ok_or_else(|| format!("user `{name}` is not in /etc/passwd"))?;
    // SAFETY: geteuid(2) has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 && euid != user.uid {
        return Err(format!("the job runs as `{name}` but the sidecar is not root and cannot switch user"));
    }
    Ok(user)
}
