//! Runs one attempt of a declared job as a real process: argv without a shell, in
//! its own process group, with the SPEC §4 environment and input/output files;
//! stdout and stderr streamed and their last 64 KiB kept. A timeout or a cancel
//! sends SIGTERM to the whole group, waits `grace`, then SIGKILL; the attempt ends
//! only once every process of the group is gone (a forked grandchild included).

pub mod group;
mod logtail;
mod reap;
mod spawn;
mod workdir;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Map, Value as Json};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use logtail::LogTail;
pub use workdir::clear_spares;

use crate::config::JobSpec;

/// Bytes of output kept per attempt.
pub const LOG_TAIL_BYTES: usize = 64 * 1024;
/// Largest output file read.
const MAX_OUTPUT_FILE: u64 = 1024 * 1024;

/// One attempt to run, as assigned by the control plane.
#[derive(Debug, Clone, Default)]
pub struct Attempt {
    pub assignment_id: String,
    pub run_id: String,
    pub flow: String,
    pub node: String,
    pub attempt: u32,
    pub idempotency_key: String,
    /// `{"params": {...}, "nodes": {...}}`.
    pub input: Json,
    /// The node's timeout; the shorter of it and the job's applies.
    pub timeout: Option<Duration>,
    pub traceparent: Option<String>,
    /// `(index, total)` when the node is sharded.
    pub shard: Option<(u32, u32)>,
    pub no_retry_exit_codes: Vec<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Success,
    /// Not worth retrying (bad template, missing program, a `no_retry_exit_codes` code).
    Failed,
    Retryable,
}

/// How an attempt ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub error: String,
    pub outputs: Map<String, Json>,
    pub log_tail: Vec<u8>,
    pub duration: Duration,
    /// Stopped by `cancel` (the caller names why).
    pub cancelled: bool,
}

impl Outcome {
    fn early(status: Status, error: String) -> Self {
        Self {
            status,
            exit_code: None,
            signal: None,
            log_tail: format!("{error}\n").into_bytes(),
            error,
            outputs: Map::new(),
            duration: Duration::ZERO,
            cancelled: false,
        }
    }
}

/// What the runner needs from the sidecar around it.
pub struct RunCtx<'a> {
    /// Per-attempt directories (input and output files) are made here.
    pub work_root: &'a Path,
    /// Environment variables of the sidecar never handed to jobs (its token).
    pub hide_env: &'a [String],
    /// Live output chunks (best effort: dropped when the receiver lags).
    pub log_sink: Option<mpsc::Sender<Vec<u8>>>,
    /// Called with the job's process group id right after it is spawned.
    pub on_spawn: Option<Box<dyn FnOnce(u32) + Send + 'a>>,
    /// The attempt directory is left for the caller to remove
    /// (`remove_work_dir`), e.g. once the result is on its way.
    pub keep_dir: bool,
}

/// Runs `attempt` of `job` until it ends, times out or `cancel` fires.
pub async fn run(job: &JobSpec, attempt: &Attempt, ctx: RunCtx<'_>, cancel: CancellationToken) -> Outcome {
    let started = Instant::now();
    let dir = ctx.work_root.join(sanitize(&attempt.assignment_id));
    let mut outcome = match spawn::prepare(job, attempt, &dir, ctx.hide_env) {
        Ok((mut command, output)) => match command.spawn().inspect(|_| drop(command)) {
            Ok(child) => {
                if let Some(on_spawn) = ctx.on_spawn {
                    on_spawn(child.id());
                }
                supervise(job, attempt, child, output, ctx.log_sink, cancel, &dir).await
            }
            Err(e) => {
                let status = match e.kind() {
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => Status::Failed,
                    _ => Status::Retryable,
                };
                Outcome::early(status, format!("cannot start `{}`: {e}", spawn::program(job)))
            }
        },
        Err(e) => Outcome::early(Status::Failed, e),
    };
    outcome.duration = started.elapsed();
    if !ctx.keep_dir {
        remove_work_dir(ctx.work_root, &attempt.assignment_id);
    }
    outcome
}

/// Removes an attempt's directory (its input file, the output file the job
/// wrote): emptied and kept for the next attempt (`workdir.rs`: removing a
/// directory can wait for the disk), or removed when it is not kept. In place,
/// like its creation: a few entries in the page cache cost less than a trip to
/// the blocking pool.
pub fn remove_work_dir(work_root: &Path, assignment_id: &str) {
    let dir = work_root.join(sanitize(assignment_id));
    if workdir::recycle(work_root, &dir) {
        return;
    }
    if let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the attempt directory");
    }
}

/// Why the process stopped being awaited.
enum Stop {
    Exited(std::io::Result<std::process::ExitStatus>),
    TimedOut(Duration),
    Cancelled,
}

async fn supervise(
    job: &JobSpec,
    attempt: &Attempt,
    mut child: std::process::Child,
    output: spawn::Output,
    sink: Option<mpsc::Sender<Vec<u8>>>,
    cancel: CancellationToken,
    dir: &Path,
) -> Outcome {
    let pgid = child.id();
    let stdin = child.stdin.take().map(tokio::process::ChildStdin::from_std);
    if let (Some(Ok(mut stdin)), Some(text)) = (stdin, job.stdin.clone()) {
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    let tail = std::sync::Arc::new(std::sync::Mutex::new(LogTail::new(LOG_TAIL_BYTES)));
    let reader = tokio::spawn(pump(Box::new(output), tail.clone(), sink.clone()));
    let captured = (tail, reader);
    let timeout = match (job.timeout, attempt.timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let sleep = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let stop = tokio::select! {
        status = reap::exit(&mut child) => Stop::Exited(status),
        _ = sleep => Stop::TimedOut(timeout.unwrap_or_default()),
        _ = cancel.cancelled() => Stop::Cancelled,
    };
    let mut note = None;
    let status = match stop {
        Stop::Exited(status) => {
            if group::alive(pgid) {
                let killed = group::terminate(pgid, job.grace).await;
                note = Some(format!(
                    "the job left processes behind in its group; they got SIGTERM{}",
                    if killed { " and, after the grace, SIGKILL" } else { "" }
                ));
            }
            status
        }
        Stop::TimedOut(_) | Stop::Cancelled => {
            let killed = group::terminate(pgid, job.grace).await;
            let why = match stop {
                Stop::TimedOut(t) => format!("timed out after {}", humantime::format_duration(t)),
                _ => "cancelled".to_string(),
            };
            note = Some(format!(
                "{why}: SIGTERM sent to the process group{}",
                if killed {
                    format!(", SIGKILL after {} grace", humantime::format_duration(job.grace))
                } else {
                    String::new()
                }
            ));
            let status = reap::exit(&mut child).await;
            let stopped = Some(matches!(stop, Stop::Cancelled));
            return finish(attempt, status, note, captured, dir, stopped, &secret_values(job)).await;
        }
    };
    finish(attempt, status, note, captured, dir, None, &secret_values(job)).await
}

/// Collects the output and classifies the end. `stopped` is `Some(cancelled)` when
/// the sidecar stopped the job (timeout: `Some(false)`).
async fn finish(
    attempt: &Attempt,
    status: std::io::Result<std::process::ExitStatus>,
    note: Option<String>,
    (tail, reader): (std::sync::Arc<std::sync::Mutex<LogTail>>, tokio::task::JoinHandle<()>),
    dir: &Path,
    stopped: Option<bool>,
    secrets: &[String],
) -> Outcome {
    let abort = reader.abort_handle();
    if tokio::time::timeout(Duration::from_secs(2), reader).await.is_err() {
        abort.abort();
    }
    let push_note = |text: &str| {
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        t.push(format!("[madeira] {text}\n").as_bytes());
    };
    if let Some(note) = &note {
        push_note(note);
    }
    let (exit_code, signal) = match &status {
        Ok(s) => (s.code(), std::os::unix::process::ExitStatusExt::signal(s)),
        Err(_) => (None, None),
    };
    let (status, error, outputs) = match (stopped, &status) {
        (Some(_), _) => (Status::Retryable, note.clone().unwrap_or_else(|| "stopped".into()), Map::new()),
        (None, Err(e)) => (Status::Retryable, format!("cannot wait for the job: {e}"), Map::new()),
        (None, Ok(s)) if s.success() => match read_outputs(&dir.join("output.json")).await {
            Ok(outputs) => (Status::Success, String::new(), outputs),
            Err(e) => (Status::Failed, e, Map::new()),
        },
        (None, Ok(_)) => match (exit_code, signal) {
            (Some(code), _) if attempt.no_retry_exit_codes.contains(&code) => {
                (Status::Failed, format!("exit code {code} (listed in no_retry_exit_codes)"), Map::new())
            }
            (Some(code), _) => (Status::Retryable, format!("exit code {code}"), Map::new()),
            (None, Some(sig)) => (Status::Retryable, format!("killed by signal {sig}"), Map::new()),
            (None, None) => (Status::Retryable, "ended without an exit code".into(), Map::new()),
        },
    };
    if status != Status::Success && stopped.is_none() {
        push_note(&error);
    }
    let log_tail = tail.lock().unwrap_or_else(|p| p.into_inner()).bytes();
    let error = if status == Status::Success { error } else { with_last_lines(error, &log_tail, secrets) };
    Outcome {
        status,
        exit_code,
        signal,
        error,
        outputs,
        log_tail,
        duration: Duration::ZERO,
        cancelled: stopped == Some(true),
    }
}

/// How many of the job's last output lines a failure message carries, and how
/// much of each: enough to tell why in an alert, bounded whatever the job printed.
const ERROR_LINES: usize = 5;
const ERROR_LINE_CHARS: usize = 200;

/// The failure message followed by the last lines the job printed (its own, not
/// the sidecar's notes), values of its secret-looking env vars masked first.
fn with_last_lines(error: String, log: &[u8], secrets: &[String]) -> String {
    let text = String::from_utf8_lossy(log);
    let lines: Vec<&str> =
        text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("[madeira] ")).collect();
    if lines.is_empty() {
        return error;
    }
    let mut out = error + "\nlast output:";
    for line in &lines[lines.len().saturating_sub(ERROR_LINES)..] {
        let masked = secrets.iter().fold(line.to_string(), |l, secret| l.replace(secret.as_str(), "***"));
        out.push_str("\n  ");
        out.extend(masked.chars().take(ERROR_LINE_CHARS));
    }
    out
}

/// Values of the job's env vars whose names say they are secret (TOKEN,
/// PASSWORD, SECRET, KEY, …), to mask in what leaves the host as a message.
fn secret_values(job: &JobSpec) -> Vec<String> {
    const MARKS: &[&str] = &["TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH", "DSN"];
    job.env
        .iter()
        .filter(|(name, value)| {
            let name = name.to_ascii_uppercase();
            value.len() >= 4 && MARKS.iter().any(|m| name.contains(m))
        })
        .map(|(_, value)| value.clone())
        .collect()
}

async fn pump(
    mut stream: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    tail: std::sync::Arc<std::sync::Mutex<LogTail>>,
    sink: Option<mpsc::Sender<Vec<u8>>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    // Live output never blocks the job: while the link lags, chunks are dropped and
    // the next one that goes through says how many bytes were lost.
    let mut dropped: usize = 0;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.lock().unwrap_or_else(|p| p.into_inner()).push(&buf[..n]);
                if let Some(sink) = &sink {
                    let mut chunk = Vec::with_capacity(n + 64);
                    if dropped > 0 {
                        chunk.extend_from_slice(
                            format!("\n[madeira] {dropped} bytes of live output dropped (link busy)\n")
                                .as_bytes(),
                        );
                    }
                    chunk.extend_from_slice(&buf[..n]);
                    match sink.try_send(chunk) {
                        Ok(()) => dropped = 0,
                        Err(_) => dropped += n,
                    }
                }
            }
        }
    }
}

/// The job's output file as a JSON object; absent or empty means `{}` (an absent
/// file is told by one `stat`; reading one is a trip to the blocking pool).
async fn read_outputs(path: &Path) -> Result<Map<String, Json>, String> {
    if matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(Map::new());
    }
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || read_outputs_now(&path))
        .await
        .map_err(|e| format!("cannot read MADEIRA_OUTPUT_FILE: {e}"))?
}

/// The job's `MADEIRA_OUTPUT_FILE`, read as the sidecar's user: only a regular
/// file with no other hard link, never through a symbolic link (a job running as
/// another user could point it at a file only the sidecar may read), never a FIFO
/// (which would block), and at most `MAX_OUTPUT_FILE` bytes of it.
fn read_outputs_now(path: &Path) -> Result<Map<String, Json>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |why: String| Err(format!("MADEIRA_OUTPUT_FILE {why}"));
    let opened =
        std::fs::File::options().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return refuse("is a symbolic link; write the JSON object into the file itself".into());
        }
        Err(e) => return refuse(format!("cannot be read: {e}")),
    };
    let meta = file.metadata().map_err(|e| format!("MADEIRA_OUTPUT_FILE cannot be read: {e}"))?;
    if !meta.is_file() {
        return refuse("is not a regular file; write the JSON object into a plain file".into());
    }
    // Another name for the same file (a hard link to a file the job could not read).
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return refuse("has other hard links; write the JSON object into a new file".into());
    }
    if meta.len() > MAX_OUTPUT_FILE {
        return refuse(format!("is {} bytes; at most {MAX_OUTPUT_FILE} are read", meta.len()));
    }
    let mut text = String::new();
    file.take(MAX_OUTPUT_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("MADEIRA_OUTPUT_FILE cannot be read: {e}"))?;
    if text.len() as u64 > MAX_OUTPUT_FILE {
        return refuse(format!("grew past {MAX_OUTPUT_FILE} bytes while read"));
    }
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Json>(&text) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(_) => Err("MADEIRA_OUTPUT_FILE must hold a JSON object".into()),
        Err(e) => Err(format!("MADEIRA_OUTPUT_FILE is not valid JSON: {e}")),
    }
}

/// A directory name made only of safe characters.
/// The name of an attempt's work directory under the work root.
pub fn work_dir_name(assignment_id: &str) -> String {
    sanitize(assignment_id)
}

fn sanitize(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests;
