//! The Unix socket `madeira exec` reports through: one JSON object a line (a start
//! report, then a finish report), each answered `ok` once it is spooled. The
//! sidecar forwards them to the control plane like any other report. The socket is
//! 0660 and every peer is checked by its credentials; reports name only the flows
//! the sidecar's `observe:` list allows (see `access`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use madeira_proto::v1::ExecReport;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::worker::Shared;

/// Longest line accepted (a finish report carries up to 64 KiB of log, escaped).
const MAX_LINE: usize = 512 * 1024;

/// One report of a wrapped run, as `madeira exec` sends it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExecMessage {
    /// Same for the start and the finish report of one run.
    pub exec_id: String,
    pub job: String,
    /// The flow to record the run in (default: the job name).
    pub flow: Option<String>,
    pub finished: bool,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The last 64 KiB of stdout and stderr (lossy UTF-8).
    #[serde(default)]
    pub log_tail: String,
    pub host: Option<String>,
}

impl ExecMessage {
    /// The report as forwarded: the flow normalized (what was checked is what is
    /// recorded) and the host always the sidecar's own, never the client's.
    fn into_report(self, host: &str) -> ExecReport {
        let flow = crate::access::flow_name(self.flow.as_deref().unwrap_or(&self.job));
        ExecReport {
            report_id: format!("{}-{}", self.exec_id, if self.finished { "finish" } else { "start" }),
            exec_id: self.exec_id,
            flow,
            job: self.job,
            finished: self.finished,
            started_at_ms: self.started_at_ms,
            finished_at_ms: self.finished_at_ms.unwrap_or(0),
            exit_code: self.exit_code,
            signal: self.signal,
            log_tail: self.log_tail.into_bytes(),
            host: host.to_string(),
        }
    }
}

/// Accepts `madeira exec` connections on `path` until `cancel`.
pub(crate) async fn serve(
    path: &Path,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let listener = UnixListener::bind(path)?;
    // Owner and `exec_group` only; every peer is checked again by its credentials.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o660))?;
    if let Some(gid) = shared.exec.socket_gid() {
        std::os::unix::fs::chown(path, None, Some(gid))?;
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        if let Err(e) = connection(stream, shared).await {
                            debug!(error = %e, "exec connection ended");
                        }
                    });
                }
                Err(e) => warn!(error = %e, "exec socket accept failed"),
            },
            _ = cancel.cancelled() => break,
        }
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

async fn connection(stream: UnixStream, shared: Arc<Shared>) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt;
    let cred = stream.peer_cred()?;
    let mut stream = stream;
    if let Err(reason) = shared.exec.peer_allowed(cred.uid(), cred.gid(), cred.pid()) {
        warn!(uid = cred.uid(), gid = cred.gid(), pid = ?cred.pid(), "exec socket: peer refused");
        stream.write_all(format!("error: {reason}\n").as_bytes()).await?;
        return Ok(());
    }
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let mut line = Vec::new();
        let n = (&mut reader).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line).await?;
        if n == 0 {
            return Ok(());
        }
        if line.len() > MAX_LINE {
            write.write_all(b"error: report too long\n").await?;
            return Ok(());
        }
        match serde_json::from_slice::<ExecMessage>(&line) {
            Ok(msg) => {
                let report = msg.into_report(&shared.identity.name);
                match shared.exec.report_allowed(&report.flow) {
                    Ok(()) => {
                        shared.exec.sent(&report.report_id, &report.flow);
                        shared.report_exec(report).await;
                        write.write_all(b"ok\n").await?;
                    }
                    Err(reason) => {
                        warn!(uid = cred.uid(), flow = %report.flow, "exec report refused: {reason}");
                        write.write_all(format!("error: {reason}\n").as_bytes()).await?;
                    }
                }
            }
            Err(e) => write.write_all(format!("error: {e}\n").as_bytes()).await?,
        }
    }
}

/// Client side: sends reports over one connection, each confirmed by `ok`.
pub struct ExecClient {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    write: tokio::net::unix::OwnedWriteHalf,
}

impl ExecClient {
    /// Connects to the sidecar's socket within `timeout`.
    pub async fn connect(path: &Path, timeout: Duration) -> std::io::Result<Self> {
        let stream = tokio::time::timeout(timeout, UnixStream::connect(path))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
        let (read, write) = stream.into_split();
        Ok(Self { lines: BufReader::new(read).lines(), write })
    }

    /// Sends one report and waits up to `timeout` for the sidecar to take it.
    pub async fn send(&mut self, msg: &ExecMessage, timeout: Duration) -> std::io::Result<()> {
        let mut line = serde_json::to_string(msg).map_err(std::io::Error::other)?;
        line.push('\n');
        let exchange = async {
            self.write.write_all(line.as_bytes()).await?;
            match self.lines.next_line().await? {
                Some(answer) if answer == "ok" => Ok(()),
                Some(answer) => Err(std::io::Error::other(answer)),
                None => {
                    Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "sidecar closed the socket"))
                }
            }
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "sidecar did not answer"))?
    }
}
