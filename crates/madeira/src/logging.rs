//! Logging of the `madeira` binary: `madeira_log` (text or JSON lines on stderr,
//! `RUST_LOG` or `--log-level`), its filter changeable at run time through the
//! returned `LogControl` (`PUT /admin/log-level`).

use madeira_telemetry::LogControl;

use crate::cli::{Global, LogFormat};

pub fn init(global: &Global) -> LogControl {
    let (initial, reload) =
        madeira_log::init(&global.log_level, matches!(global.log_format, LogFormat::Json));
    LogControl::new(initial, reload)
}
