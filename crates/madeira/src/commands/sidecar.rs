//! `madeira sidecar --config FILE`: the sidecar daemon — its declared jobs, the
//! link to the control plane, the exec socket, the spool and `/metrics`. SIGTERM or
//! SIGINT drains it (no new work, running jobs get `shutdown_grace`, then SIGTERM);
//! a second signal exits at once. Also the text form of `madeira sidecars`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use madeira_sidecar::{Identity, LinkOptions, Sidecar, SidecarConfig, SidecarMetrics, SidecarOptions};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::app::shutdown_signal;
use crate::config::ConfigError;

pub async fn run(path: &Path) -> Result<ExitCode> {
    let file = path.display().to_string();
    let bad = |e: madeira_sidecar::ConfigError| ConfigError { file: e.file, message: e.message };
    let text = crate::files::read_text(path, crate::files::Confine::Anywhere)
        .map_err(|e| ConfigError { file: file.clone(), message: e.problem.to_string() })?;
    let config = SidecarConfig::parse(&file, &text).map_err(bad)?;
    let jobs = config.jobs(&file).map_err(bad)?;
    let err = |message: String| ConfigError { file: file.clone(), message };
    let group = config.group.clone().ok_or_else(|| err("`group` is not set".into()))?;
    let endpoint = config.control_plane.clone().ok_or_else(|| {
        err("`control_plane` is not set, e.g. `control_plane: http://madeira.internal:7071`".into())
    })?;
    let (token, hide_env) = token(&config).map_err(err)?;
    let tls = config.link_tls(&file, &endpoint).map_err(bad)?;
    let link = LinkOptions { endpoint, token, tls, ..Default::default() };
    // A bad URL or TLS material is a config error now, not a retry loop later.
    madeira_sidecar::link_endpoint(&link).map_err(|e| err(format!("control_plane/tls: {e}")))?;
    let spool_dir = config.spool_dir.clone().unwrap_or_else(|| "/var/lib/madeira/spool".into());
    let socket = config.socket.clone().unwrap_or_else(|| spool_dir.join("sidecar.sock"));
    let shutdown_grace = config.shutdown_grace(&file).map_err(bad)?;
    let exec = config.exec_policy(&file).map_err(bad)?;
    let metrics_addr: Option<SocketAddr> = match &config.metrics {
        Some(text) => {
            Some(text.parse().map_err(|e| err(format!("metrics: `{text}` is not an address ({e})")))?)
        }
        None => None,
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let identity = Identity {
        name: config.name.clone().unwrap_or_else(madeira_sidecar::config::host_name),
        group,
        version: env!("CARGO_PKG_VERSION").into(),
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
            let listener = madeira_sidecar::metrics::bind(addr)
                .await
                .with_context(|| format!("binding metrics {addr}"))?;
            let (registry, cancel) = (Arc::new(registry), cancel.clone());
            Some(tokio::spawn(async move {
                if let Err(e) = madeira_sidecar::metrics::serve(listener, registry, cancel).await {
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
            return Ok(ExitCode::from(130));
        }
    }
    if let Some(task) = metrics_task {
        let _ = tokio::time::timeout(Duration::from_secs(1), task).await;
    }
    Ok(ExitCode::SUCCESS)
}

/// The group token from `token_file` or `token_env`, and the variables to hide from jobs.
fn token(config: &SidecarConfig) -> std::result::Result<(Option<String>, Vec<String>), String> {
    let mut hide = vec!["MADEIRA_TOKEN".to_string()];
    let token = match (&config.token_env, &config.token_file) {
        (Some(var), None) => {
            hide.push(var.clone());
            Some(std::env::var(var).map_err(|_| format!("token_env: {var} is not set"))?)
        }
        (None, Some(path)) => Some(
            crate::files::read_text(path, crate::files::Confine::Anywhere)
                .map_err(|e| format!("token_file: {e}"))?,
        ),
        (None, None) => None,
        (Some(_), Some(_)) => return Err("give token_env or token_file, not both".into()),
    };
    Ok((token.map(|t| t.trim().to_string()), hide))
}

/// `madeira sidecars` as a table.
pub fn fleet_text(body: &Value) -> String {
    let mut out = format!(
        "{:<24} {:<12} {:<9} {:>7} {:>10}  {}\n",
        "NAME", "GROUP", "VERSION", "RUNNING", "HEARTBEAT", "JOBS"
    );
    for s in body["sidecars"].as_array().into_iter().flatten() {
        let jobs: Vec<&str> = s["jobs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let state = if s["connected"] == true { "" } else { " (disconnected)" };
        out.push_str(&format!(
            "{:<24} {:<12} {:<9} {:>7} {:>9.1}s  {}{state}\n",
            s["name"].as_str().unwrap_or(""),
            s["group"].as_str().unwrap_or(""),
            s["version"].as_str().unwrap_or(""),
            s["running"],
            s["last_heartbeat_age_seconds"].as_f64().unwrap_or(0.0),
            jobs.join(", "),
        ));
    }
    let waiting = body["waiting"].as_array().map_or(0, Vec::len);
    if waiting > 0 {
        out.push_str(&format!("\n{waiting} node(s) waiting in INIT for a sidecar:\n"));
        for w in body["waiting"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  run {} node {}: {}\n",
                w["run_id"].as_str().unwrap_or(""),
                w["node"].as_str().unwrap_or(""),
                w["reason"].as_str().unwrap_or("")
            ));
        }
    }
    out
}
