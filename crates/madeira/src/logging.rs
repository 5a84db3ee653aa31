//! Logging through `tracing`: human format (colours on a terminal) by default, JSON
//! with `--log-format json` (each line carries the current span's fields, so lines
//! logged during an attempt have its `trace_id` and `span_id`), filtered by
//! `RUST_LOG` or `--log-level`, and changeable at run time through the returned
//! `LogControl` (`PUT /admin/log-level`).

use std::io::IsTerminal;

use madeira_telemetry::LogControl;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, reload};

use crate::cli::{Global, LogFormat};

pub fn init(global: &Global) -> LogControl {
    let initial = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let initial = initial.unwrap_or_else(|| global.log_level.clone());
    let (filter, initial) = match EnvFilter::try_new(&initial) {
        Ok(filter) => (filter, initial),
        Err(e) => {
            eprintln!("warning: log filter `{initial}`: {e}; using `warn`");
            (EnvFilter::new("warn"), "warn".to_string())
        }
    };
    let (filter, handle) = reload::Layer::new(filter);
    let output = match global.log_format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .boxed(),
    };
    tracing_subscriber::registry().with(filter).with(output).init();
    LogControl::new(initial, move |directives| {
        let filter = EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
        handle.reload(filter).map_err(|e| e.to_string())
    })
}
