//! One module per command family; `run` dispatches and returns the exit code.

mod bench;
mod bench_sidecar;
mod client_cmds;
mod demo;
mod exec;
mod offline;
mod servers;
mod sidecar;

use std::process::ExitCode;

use anyhow::Result;

use crate::cli::{Cli, Command};

pub async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Dev(args) => servers::dev(args).await,
        Command::Serve { config } => servers::serve(&config).await,
        Command::Demo => demo::run().await,
        Command::Bench(args) => bench::run(args).await,
        Command::Validate { files, output } => offline::validate(&files, output),
        Command::Cron { command } => offline::cron(command),
        Command::Sidecar { config } => sidecar::run(&config).await,
        Command::Exec(args) => exec::run(args).await,
        Command::Crontab { command } => crate::crontab::run(command),
        other => client_cmds::run(other).await,
    }
}
