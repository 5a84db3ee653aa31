//! `madeira-sidecar --config FILE`: the sidecar daemon alone, for hosts that need
//! nothing else of Madeira. The same code as `madeira sidecar` (it is
//! `madeira_sidecar::daemon`), in a binary that links only the sidecar, so its
//! resident memory stays small beside the services it governs. Exit codes: 0 after
//! draining on a signal, 130 on a second signal, 64 for a config error, 1 otherwise.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use madeira_sidecar::daemon::{self, DaemonError, Exit};

#[derive(Debug, Parser)]
#[command(
    name = "madeira-sidecar",
    version,
    about = "Madeira's sidecar daemon: the jobs declared in its config, on dispatch"
)]
struct Args {
    /// The sidecar config (`docs/sidecar.md`).
    #[arg(long)]
    config: PathBuf,
    /// Log filter when RUST_LOG is not set.
    #[arg(long, default_value = "warn")]
    log_level: String,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let _reload = madeira_log::init(&args.log_level, args.log_format == LogFormat::Json);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(70);
        }
    };
    match runtime.block_on(daemon::run(&args.config, env!("CARGO_PKG_VERSION"))) {
        Ok(Exit::Drained) => ExitCode::SUCCESS,
        Ok(Exit::Interrupted) => ExitCode::from(130),
        Err(e @ DaemonError::Config(_)) => {
            eprintln!("error: {e}");
            ExitCode::from(64)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
