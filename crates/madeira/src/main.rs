//! The `madeira` binary: parses the command line, starts logging, runs the chosen
//! command and turns its outcome into an exit code. Everything else lives in
//! library code (`app`, `commands`).

use std::process::ExitCode;

use clap::Parser;

mod app;
mod cli;
mod client;
mod commands;
mod config;
mod crontab;
mod files;
mod logging;
mod sidecars;
mod sources;
mod tls;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    if cli.command.only_prints() {
        // SAFETY: restoring the default disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let log_control = logging::init(&cli.global);
    let telemetry = cli.global.telemetry(log_control);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(70);
        }
    };
    match runtime.block_on(commands::run(cli, telemetry)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(e.downcast_ref::<config::ConfigError>().map_or(1, |_| 64))
        }
    }
}
