//! One module per command family; `run` dispatches and returns the exit code.

mod alerts;
pub(crate) mod backfill;
mod bench;
mod bench_alerts;
mod bench_engines;
mod bench_floor;
mod bench_history;
mod bench_history_sql;
mod bench_sidecar;
mod bench_storage;
mod calendars;
mod client_cmds;
mod demo;
mod estate;
mod exec;
mod follow_logs;
mod lifecycle;
mod offline;
mod servers;
mod sidecar;

use std::process::ExitCode;

use anyhow::Result;

use madeira_telemetry::TelemetryOptions;

use crate::cli::{Cli, Command, FlowsCommand};

/// Runs the command; servers start with `telemetry`.
pub async fn run(cli: Cli, telemetry: TelemetryOptions) -> Result<ExitCode> {
    match cli.command {
        Command::Dev(args) => servers::dev(args, telemetry).await,
        Command::Serve { config } => servers::serve(&config, telemetry).await,
        Command::Demo(args) => demo::run(args).await,
        Command::Bench(args) => bench::run(args, telemetry).await,
        Command::Validate { files, config, output } => offline::validate(&files, config.as_deref(), output),
        Command::Cron { command } => offline::cron(command),
        Command::Alerts(args) => alerts::run(args).await,
        Command::Sidecar { config } => sidecar::run(&config).await,
        Command::Exec(args) => exec::run(args).await,
        Command::Crontab { command } => crate::crontab::run(command),
        Command::Flows {
            command: Some(FlowsCommand::Delete { name, cancel, purge, reason, server }),
            ..
        } => lifecycle::delete(&name, cancel, purge, reason, &server).await,
        Command::Promote(args) => lifecycle::promote(args).await,
        Command::Backfill(args) => backfill::backfill(args).await,
        Command::Backfills { command, server } => backfill::backfills(command, server).await,
        Command::Demote(args) => lifecycle::demote(args).await,
        Command::Calendars { command, server } => calendars::run(command, server).await,
        Command::Import {
            command: crate::cli::ImportCommand::XxlJob { from, app, out, timezone, output },
        } => crate::xxlimport::run(crate::xxlimport::ImportArgs { from, app, out, timezone, output }).await,
        other => client_cmds::run(other).await,
    }
}
