//! The sidecar daemon as both binaries run it (`madeira sidecar --config FILE` and
//! the slim `madeira-sidecar --config FILE`): reads and checks the config file,
//! starts the jobs' link to the control plane, the exec socket, the spool and
//! `/metrics`, and runs until SIGTERM or SIGINT. The first signal drains it (no
//! new work, running jobs get `shutdown_grace`, then SIGTERM); a second signal
//! exits at once.

use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::{
    ConfigError, Identity, LinkOptions, Sidecar, SidecarConfig, SidecarError, SidecarMetrics, SidecarOptions,
};

/// The largest config or token file read (they are a few hundred bytes).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The config (or a file it names) is wrong: exit code 64.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Sidecar(#[from] SidecarError),
    #[error("binding metrics {addr}: {source}")]
    Metrics { addr: SocketAddr, source: std::io::Error },
}

/// How the daemon ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Drained after a signal.
    Drained,
    /// A second signal came while draining.
    Interrupted,
}

/// Runs the sidecar of the config file at `path` until a signal (see the module
/// doc). `version` is what it reports to the control plane.
pub async fn run(path: &Path, version: &str) -> Result<Exit, DaemonError> {
    let file = path.display().to_string();
    let err = |message: String| ConfigError { file: file.clone(), message };
    let text = read_small(path).map_err(err)?;
    let config = SidecarConfig::parse(&file, &text)?;
    let jobs = config.jobs(&file)?;
    let group = config.group.clone().ok_or_else(|| err("`group` is not set".into()))?;
    let endpoint = config.control_plane.clone().ok_or_else(|| {
        err("`control_plane` is not set, e.g. `control_plane: http://madeira.internal:7071`".into())
    })?;
    let (token, hide_env) = token(&config).map_err(err)?;
    let tls = config.link_tls(&file, &endpoint)?;
    let link = LinkOptions { endpoint, token, tls, ..Default::default() };
    // A bad URL or TLS material is a config error now, not a retry loop later.
    crate::link_endpoint(&link).map_err(|e| err(format!("control_plane/tls: {e}")))?;
    let spool_dir = config.spool_dir.clone().unwrap_or_else(|| "/var/lib/madeira/spool".into());
    let socket = config.socket.clone().unwrap_or_else(|| spool_dir.join("sidecar.sock"));
    let shutdown_grace = config.shutdown_grace(&file)?;
    let exec = config.exec_policy(&file)?;
    let metrics_addr: Option<SocketAddr> = match &config.metrics {
        Some(text) => {
            Some(text.parse().map_err(|e| err(format!("metrics: `{text}` is not an address ({e})")))?)
        }
        None => None,
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let identity = Identity {
        name: config.name.clone().unwrap_or_else(crate::config::host_name),
        group,
        version: version.into(),
    };
    let sidecar = Sidecar::new(SidecarOptions {
        identity: identity.clone(),
        link,
        jobs,
        spool_dir,
        socket: Some(socket.clone()),
        exec,
        shutdown_grace,
        hide_env,
        metrics: SidecarMetrics::register(&mut registry),
    })?;
    let cancel = CancellationToken::new();
    let metrics_task = match metrics_addr {
        Some(addr) => {
            let listener =
                crate::metrics::bind(addr).await.map_err(|source| DaemonError::Metrics { addr, source })?;
            let (registry, cancel) = (Arc::new(registry), cancel.clone());
            Some(tokio::spawn(async move {
                if let Err(e) = crate::metrics::serve(listener, registry, cancel).await {
                    tracing::error!(error = %e, "metrics endpoint stopped");
                }
            }))
        }
        None => None,
    };
    eprintln!(
        "madeira sidecar {} (group {}): exec socket {}",
        identity.name,
        identity.group,
        socket.display()
    );
    let running = tokio::spawn(sidecar.run(cancel.clone()));
    shutdown_signal().await;
    eprintln!("madeira sidecar: draining (a second signal stops at once)");
    cancel.cancel();
    tokio::select! {
        _ = running => {}
        _ = shutdown_signal() => {
            eprintln!("madeira sidecar: second signal, exiting now");
            return Ok(Exit::Interrupted);
        }
    }
    if let Some(task) = metrics_task {
        let _ = tokio::time::timeout(Duration::from_secs(1), task).await;
    }
    Ok(Exit::Drained)
}

/// Resolves on SIGTERM or SIGINT (ctrl-c).
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = ctrl_c.await;
            return;
        }
    };
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

/// The group token from `token_file` or `token_env`, and the variables to hide from jobs.
fn token(config: &SidecarConfig) -> Result<(Option<String>, Vec<String>), String> {
    let mut hide = vec!["MADEIRA_TOKEN".to_string()];
    let token = match (&config.token_env, &config.token_file) {
        (Some(var), None) => {
            hide.push(var.clone());
            Some(std::env::var(var).map_err(|_| format!("token_env: {var} is not set"))?)
        }
        (None, Some(path)) => {
            Some(read_small(path).map_err(|e| format!("token_file: {}: {e}", path.display()))?)
        }
        (None, None) => None,
        (Some(_), Some(_)) => return Err("give token_env or token_file, not both".into()),
    };
    Ok((token.map(|t| t.trim().to_string()), hide))
}

/// A regular file of at most `MAX_FILE_BYTES`, as UTF-8 text; the error says
/// what is wrong with it (the caller names the file).
fn read_small(path: &Path) -> Result<String, String> {
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting.
    let file = std::fs::File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())
}

#[cfg(test)]
mod tests {
    use super::read_small;

    #[test]
    fn small_files_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ok = dir.path().join("ok.yaml");
        std::fs::write(&ok, "group: g\n").expect("write");
        assert_eq!(read_small(&ok).expect("read"), "group: g\n");
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'a'; (super::MAX_FILE_BYTES + 1) as usize]).expect("write");
        assert!(read_small(&big).expect_err("too large").contains("larger than"));
        assert!(read_small(dir.path()).expect_err("a directory").contains("not a regular file"));
        let missing = read_small(&dir.path().join("nope")).expect_err("missing");
        assert!(missing.contains("No such file"), "{missing}");
    }
}
