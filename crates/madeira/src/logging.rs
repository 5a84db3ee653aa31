//! Logging through `tracing`: human format by default, JSON with `--log-format json`,
//! filtered by `RUST_LOG` (default `warn` for client commands, `info` for servers).

use tracing_subscriber::EnvFilter;

use crate::cli::{Global, LogFormat};

pub fn init(global: &Global) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&global.log_level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match global.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}
