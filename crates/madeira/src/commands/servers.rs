//! `madeira serve` and `madeira dev`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use madeira_engine::EngineOptions;
use madeira_server::AuthConfig;
use madeira_telemetry::TelemetryOptions;

use crate::app::{ControlPlane, PlaneOptions, shutdown_signal, sqlite_url_in};
use crate::cli::DevArgs;
use crate::config::{ConfigError, ServerConfig};
use crate::sidecars::{FleetSetup, LocalSidecar};
use madeira_fleet::FleetOptions;

pub async fn serve(config_path: &Path, telemetry: TelemetryOptions) -> Result<ExitCode> {
    let file = config_path.display().to_string();
    let config = ServerConfig::load(config_path)?;
    let auth = config.auth(&file)?;
    let sources = config.sources(&file)?;
    let http = config.http_addr(&file, "0.0.0.0:7070")?;
    // Certificates and keys are read now: a bad file stops `serve` before any bind.
    let http_tls = config.http_tls(&file)?;
    let grpc_tls = config.grpc_tls(&file)?;
    let store_url = config.store.clone().ok_or_else(|| ConfigError {
        file: file.clone(),
        message: "store is not set: give `store: postgres://madeira@db/madeira`, `mysql://madeira:pass@db/madeira` or `sqlite:///var/lib/madeira/madeira.db` (or MADEIRA_STORE)"
            .into(),
    })?;
    let engine = EngineOptions {
        retention: config.retention(&file)?,
        archive_after: config.archive_after(&file)?,
        http: config.http_executor.clone(),
        replica_id: config.replica_id(),
        lease: config.lease(&file)?,
        redis: config.redis_url(&file)?,
        // Several replicas may share a PostgreSQL or MySQL store: count permits there.
        shared_store: crate::app::is_shared_store(&store_url),
        live_log_bytes: config.live_log_bytes.unwrap_or(madeira_engine::livelog::DEFAULT_MAX_BYTES),
        message_sources: crate::sources::names(&sources),
        calendars: crate::calendars::load(&config.calendars, &file, config.flows.as_deref())?,
        ..Default::default()
    };
    // The sidecar endpoint runs when the config asks for it (`grpc:`) or names
    // sidecar group tokens; without either there is nothing a sidecar could use.
    let tokens = config.sidecar_tokens(&file)?;
    ServerConfig::distinct_secrets(&file, &auth, &tokens)?;
    let link_mode = match &config.grpc_tls {
        Some(section) if section.client_ca_file.is_some() => "mTLS",
        Some(_) => "TLS",
        None => "plain",
    };
    let fleet = if config.grpc.is_some() || config.grpc_tls.is_some() || !tokens.is_empty() {
        if tokens.is_empty() {
            tracing::warn!(
                "auth.sidecar_tokens is empty: every sidecar will be refused until a group token is configured"
            );
        }
        Some(FleetSetup {
            grpc: config.grpc_addr(&file, "0.0.0.0:7071")?,
            options: FleetOptions {
                tokens: Some(tokens),
                shared_store: crate::app::is_shared_store(&store_url),
                observe_max_flows: config
                    .observe_max_flows
                    .unwrap_or(FleetOptions::default().observe_max_flows),
                ..FleetOptions::with_lost_after(config.sidecar_lost_after(&file)?)
            },
            tls: grpc_tls,
            local: None,
        })
    } else {
        tracing::info!("no `grpc:` and no auth.sidecar_tokens: the sidecar endpoint is off");
        None
    };
    let replica = engine.replica_id.clone();
    let alerts = config.alerts(&file)?;
    // One process per SQLite store file (a missing directory is the store's to report).
    let _lock = match crate::datalock::sqlite_file(&store_url) {
        Some(db) if db.parent().is_none_or(|p| p.as_os_str().is_empty() || p.is_dir()) => {
            let hint = ", or use a PostgreSQL or MySQL store for several replicas";
            Some(crate::datalock::lock_store(&db, &format!("store {store_url}"), hint)?)
        }
        _ => None,
    };
    let plane = ControlPlane::start(PlaneOptions {
        shutdown_grace: config.shutdown_grace(&file)?,
        datasources: config.datasources(&file)?,
        observers: Vec::new(),
        telemetry: telemetry.clone(),
        store_url,
        engine,
        auth,
        http: Some(http),
        http_tls: http_tls.clone(),
        alerts,
        fleet,
        sources,
        scheduler_clock: None,
        xxl: crate::xxl::options(config.xxl_job.as_ref(), &file)?,
    })
    .await?;
    if let Some(dir) = &config.flows {
        plane.apply_dir(dir).await?;
    }
    if let Some(addr) = plane.http_addr {
        let scheme = if http_tls.is_some() { "https" } else { "http" };
        eprintln!("madeira serve: API on {scheme}://{addr}/api/v1 · web console {scheme}://{addr}/");
    }
    if let Some(parts) = &plane.fleet {
        eprintln!("madeira serve: sidecar link on {} ({link_mode})", parts.grpc_addr);
    }
    tracing::info!(
        http = ?plane.http_addr,
        grpc = ?plane.fleet.as_ref().map(|f| f.grpc_addr),
        replica = %replica,
        "madeira control plane serving"
    );
    stop_on_signal(plane).await
}

/// Waits for SIGTERM/SIGINT, then shuts down gracefully; a second signal exits now.
async fn stop_on_signal(plane: ControlPlane) -> Result<ExitCode> {
    shutdown_signal().await;
    eprintln!("madeira: shutting down (sidecar attempts keep running; a second signal stops at once)");
    tokio::select! {
        _ = plane.shutdown() => Ok(ExitCode::SUCCESS),
        _ = shutdown_signal() => {
            eprintln!("madeira: second signal, exiting now");
            Ok(ExitCode::from(130))
        }
    }
}

pub async fn dev(args: DevArgs, telemetry: TelemetryOptions) -> Result<ExitCode> {
    let http: SocketAddr = args.http.parse().with_context(|| format!("--http `{}`", args.http))?;
    if !http.ip().is_loopback() {
        bail!("--http {http}: dev mode has no authentication and listens on loopback only; use 127.0.0.1");
    }
    let grpc: SocketAddr = args.grpc.parse().with_context(|| format!("--grpc `{}`", args.grpc))?;
    if !grpc.ip().is_loopback() {
        bail!("--grpc {grpc}: dev mode has no sidecar tokens and listens on loopback only; use 127.0.0.1");
    }
    let jobs = match &args.jobs {
        Some(path) => crate::sidecars::load_jobs(path)?,
        None => Default::default(),
    };
    let config = match &args.config {
        Some(path) => ServerConfig::load(path)?,
        None => ServerConfig::default(),
    };
    let file = args.config.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    if config.tls.is_some() || config.grpc_tls.is_some() {
        let message =
            "tls/grpc_tls: `dev` serves plain HTTP and gRPC on loopback; use `serve` for TLS".into();
        return Err(ConfigError { file, message }.into());
    }
    let sources = config.sources(&file)?;
    let engine = EngineOptions {
        retention: config.retention(&file)?,
        archive_after: config.archive_after(&file)?,
        // `dev` serves on loopback for a local developer: local targets are fine.
        http: madeira_engine::HttpPolicy { allow_loopback: true, ..config.http_executor.clone() },
        // One dev control plane per data directory: a restart takes its runs back at once.
        replica_id: "dev".to_string(),
        live_log_bytes: config.live_log_bytes.unwrap_or(madeira_engine::livelog::DEFAULT_MAX_BYTES),
        message_sources: crate::sources::names(&sources),
        calendars: crate::calendars::load(&config.calendars, &file, args.flows.as_deref())?,
        ..Default::default()
    };
    let alerts = config.alerts(&file)?;
    let scheduler_clock = args.clock_start.as_deref().map(clock_from).transpose()?;
    let store_url = sqlite_url_in(&args.data)?;
    let data = args.data.canonicalize().unwrap_or_else(|_| args.data.clone());
    // One dev per data directory: a second would run a second scheduler on the same
    // store and, on exit, remove the first one's exec socket.
    let what = format!("data directory {}", args.data.display());
    let _lock = crate::datalock::lock_store(&data.join("madeira.db"), &what, ", or give another --data")?;
    let fleet = FleetSetup {
        grpc,
        options: FleetOptions {
            observe_max_flows: config.observe_max_flows.unwrap_or(FleetOptions::default().observe_max_flows),
            ..FleetOptions::with_lost_after(config.sidecar_lost_after(&file)?)
        },
        tls: None,
        local: Some(LocalSidecar {
            jobs,
            dir: data.join("sidecar"),
            socket: Some(data.join("sidecar.sock")),
        }),
    };
    let plane = ControlPlane::start(PlaneOptions {
        shutdown_grace: config.shutdown_grace(&file)?,
        datasources: config.datasources(&file)?,
        observers: Vec::new(),
        telemetry: telemetry.clone(),
        store_url,
        engine,
        auth: AuthConfig::default(),
        http: Some(http),
        http_tls: None,
        alerts,
        fleet: Some(fleet),
        sources,
        scheduler_clock,
        xxl: crate::xxl::options(config.xxl_job.as_ref(), &file)?,
    })
    .await?;
    if let Some(dir) = &args.flows {
        let n = plane.apply_dir(dir).await?;
        tracing::info!(flows = n, dir = %dir.display(), "flows applied");
    }
    if let Some(addr) = plane.http_addr {
        eprintln!(
            "madeira dev: API on http://{addr}/api/v1 · web console http://{addr}/ (data in {})",
            args.data.display()
        );
    }
    if let Some(parts) = &plane.fleet {
        eprintln!(
            "madeira dev: sidecar link on {} (in-process sidecar of group `local`; exec socket {})",
            parts.grpc_addr,
            data.join("sidecar.sock").display()
        );
    }
    stop_on_signal(plane).await
}

/// `--clock-start`: the scheduler's wall clock starts at this instant and runs at
/// the real clock's pace (to see a cron flow on a given date without waiting).
fn clock_from(text: &str) -> Result<madeira_engine::WallClock> {
    let start = chrono::DateTime::parse_from_rfc3339(text)
        .with_context(|| format!("--clock-start `{text}`: use RFC 3339, e.g. 2026-02-13T17:04:50Z"))?;
    let offset = start.timestamp_millis() - chrono::Utc::now().timestamp_millis();
    tracing::warn!(clock_start = %start, "the scheduler runs on a moved clock (--clock-start)");
    Ok(std::sync::Arc::new(move || chrono::Utc::now().timestamp_millis() + offset))
}
