//! `madeira exec --job NAME [--flow F] -- CMD ARGS...` (SPEC §11): runs the command
//! exactly as given — no shell, stdin inherited, stdout and stderr copied byte for
//! byte, signals forwarded, the same exit status (a signal death is re-raised) —
//! and reports start, end, exit code, duration and the last 64 KiB of output
//! through the local sidecar's Unix socket. Without a sidecar it still runs the
//! command and says so on stderr.

use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use madeira_sidecar::runner::LogTail;
use madeira_sidecar::{ExecClient, ExecMessage};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::cli::ExecArgs;

const TAIL: usize = 64 * 1024;
const CONNECT: Duration = Duration::from_secs(1);
const ANSWER: Duration = Duration::from_secs(3);
/// Signals passed on to the command.
const FORWARDED: [i32; 6] =
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

pub async fn run(args: ExecArgs) -> Result<ExitCode> {
    let mut report = ExecMessage {
        exec_id: uuid::Uuid::now_v7().to_string(),
        job: args.job.clone(),
        flow: args.flow.clone(),
        finished: false,
        started_at_ms: now_ms(),
        finished_at_ms: None,
        exit_code: None,
        signal: None,
        log_tail: String::new(),
        host: None,
    };
    let mut client = match ExecClient::connect(&args.sidecar, CONNECT).await {
        Ok(mut c) => match c.send(&report, ANSWER).await {
            Ok(()) => Some(c),
            Err(e) => unreported(&args, &e),
        },
        Err(e) => unreported(&args, &e),
    };
    let tail = Arc::new(Mutex::new(LogTail::new(TAIL)));
    let (status, code) = execute(&args, &tail).await;
    report.finished = true;
    report.finished_at_ms = Some(now_ms());
    report.exit_code = status.as_ref().and_then(|s| s.code()).or(code);
    report.signal = status.as_ref().and_then(std::os::unix::process::ExitStatusExt::signal);
    report.log_tail =
        String::from_utf8_lossy(&tail.lock().unwrap_or_else(|p| p.into_inner()).bytes()).into_owned();
    if client.is_none() && args.sidecar.exists() {
        client = ExecClient::connect(&args.sidecar, CONNECT).await.ok();
    }
    if let Some(c) = client.as_mut()
        && let Err(e) = c.send(&report, ANSWER).await
    {
        eprintln!("madeira exec: the end of this run was not reported to the sidecar: {e}");
    }
    match (report.exit_code, report.signal) {
        (_, Some(sig)) => Ok(reraise(sig)),
        (Some(code), _) => Ok(ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))),
        (None, None) => Ok(ExitCode::from(1)),
    }
}

fn unreported(args: &ExecArgs, e: &std::io::Error) -> Option<ExecClient> {
    eprintln!(
        "madeira exec: no sidecar answers at {} ({e}); running `{}` unreported",
        args.sidecar.display(),
        args.job
    );
    None
}

/// Runs the command; `(status, exit code when it could not start)`.
async fn execute(
    args: &ExecArgs,
    tail: &Arc<Mutex<LogTail>>,
) -> (Option<std::process::ExitStatus>, Option<i32>) {
    let mut command = tokio::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]).stdin(Stdio::inherit()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let signals = register_signals();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let line = format!("madeira exec: cannot run {:?}: {e}\n", args.command[0]);
            eprint!("{line}");
            tail.lock().unwrap_or_else(|p| p.into_inner()).push(line.as_bytes());
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            return (None, Some(code));
        }
    };
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let out = child.stdout.take().map(|s| tokio::spawn(copy(s, std::io::stdout(), tail.clone())));
    let err = child.stderr.take().map(|s| tokio::spawn(copy(s, std::io::stderr(), tail.clone())));
    let forward = pid.map(|pid| tokio::spawn(forward_signals(pid, signals)));
    let status = child.wait().await.ok();
    for task in [out, err].into_iter().flatten() {
        let _ = task.await;
    }
    if let Some(f) = forward {
        f.abort();
    }
    (status, None)
}

/// Copies a stream to our own, byte for byte, keeping a tail.
async fn copy(mut from: impl AsyncRead + Unpin, mut to: impl std::io::Write, tail: Arc<Mutex<LogTail>>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let _ = to.write_all(&buf[..n]);
                let _ = to.flush();
                tail.lock().unwrap_or_else(|p| p.into_inner()).push(&buf[..n]);
            }
        }
    }
}

/// Takes over the forwarded signals before the child starts (so none is lost).
fn register_signals() -> Vec<(i32, tokio::signal::unix::Signal)> {
    use tokio::signal::unix::{SignalKind, signal};
    FORWARDED.iter().filter_map(|&sig| signal(SignalKind::from_raw(sig)).ok().map(|s| (sig, s))).collect()
}

async fn forward_signals(pid: i32, streams: Vec<(i32, tokio::signal::unix::Signal)>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (sig, mut stream) in streams {
        let tx = tx.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if tx.send(sig).is_err() {
                    return;
                }
            }
        });
    }
    while let Some(sig) = rx.recv().await {
        // SAFETY: kill(2) only sends a signal to the child we started.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Dies of `sig` like the command did (so the caller sees the same status).
fn reraise(sig: i32) -> ExitCode {
    // SAFETY: restoring the default action and raising a signal touch no memory of ours.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
    ExitCode::from(u8::try_from((128 + sig) & 0xff).unwrap_or(1))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
