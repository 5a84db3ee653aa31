//! The `madeira` binary: parses the command line, starts logging, runs the chosen
//! command and turns its outcome into an exit code. The control plane itself is
//! the `madeira-app` library; `commands` holds what each command does with it.

use std::process::ExitCode;

use clap::Parser;

mod cli;
mod cli_backfill;
mod client;
mod commands;
mod crontab;
mod datalock;
mod logging;
mod server_args;
mod xxlimport;

use madeira_app::{app, calendars, config, files, sidecars, sources, xxl};

fn main() -> ExitCode {
    cap_malloc_arenas();
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
            let config = e.downcast_ref::<config::ConfigError>().is_some()
                || e.downcast_ref::<madeira_app::Error>().is_some_and(madeira_app::Error::is_config);
            ExitCode::from(if config { 64 } else { 1 })
        }
    }
}

/// Caps glibc's malloc at two arenas unless `MALLOC_ARENA_MAX` is set: by
/// default each thread that allocates may get an arena of its own (up to eight
/// per core) and memory freed in one is not reused by another, so a process whose
/// SQLite writes and tasks move between threads holds more for no gain (`madeira
/// bench --scenarios settlement`: peak RSS 36.0–36.2 MB with this cap, 39.3–39.7 MB
/// with `MALLOC_ARENA_MAX=16`, at the same throughput).
fn cap_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: called first in `main`, before any thread starts; it only sets
        // an allocator parameter.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
}
