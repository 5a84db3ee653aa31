//! Log output through `tracing`, shared by the `madeira` and `madeira-sidecar`
//! binaries: human format (colours on a terminal) by default, JSON lines with
//! `json` (each line carries the current span's fields, so lines logged during an
//! attempt have its `trace_id` and `span_id`, also lifted to the top level of the
//! line for log pipelines), filtered by `RUST_LOG` or the given level, and
//! changeable at run time through the returned `Reload`.

use std::io::IsTerminal;

use serde_json::Value;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, format::JsonFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, reload};

/// Installs a new filter (directives as in `RUST_LOG`), or says why it cannot.
pub type Reload = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// Installs the global subscriber writing to stderr. The filter is `RUST_LOG` when
/// set, else `level`; a filter that does not parse is reported and `warn` used.
/// Returns the filter in force and the way to change it.
pub fn init(level: &str, json: bool) -> (String, Reload) {
    let initial = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let initial = initial.unwrap_or_else(|| level.to_string());
    let (filter, initial) = match EnvFilter::try_new(&initial) {
        Ok(filter) => (filter, initial),
        Err(e) => {
            eprintln!("warning: log filter `{initial}`: {e}; using `warn`");
            (EnvFilter::new("warn"), "warn".to_string())
        }
    };
    let (filter, handle) = reload::Layer::new(filter);
    let output = if json {
        tracing_subscriber::fmt::layer()
            .fmt_fields(JsonFields::new())
            .event_format(TraceIds(format().json().with_current_span(true).with_span_list(false)))
            .with_writer(std::io::stderr)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .boxed()
    };
    tracing_subscriber::registry().with(filter).with(output).init();
    let reload: Reload = Box::new(move |directives| {
        let filter = EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
        handle.reload(filter).map_err(|e| e.to_string())
    });
    (initial, reload)
}

fn format() -> format::Format {
    format::Format::default()
}

/// The JSON line of `F` with the current span's `trace_id` and `span_id` copied to
/// the top level.
struct TraceIds<F>(F);

impl<S, N, F> FormatEvent<S, N> for TraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        writer.write_str(&lift_trace_ids(&line))
    }
}

fn lift_trace_ids(line: &str) -> String {
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(line.trim_end()) else {
        return line.to_string();
    };
    let ids: Vec<(String, Value)> = ["trace_id", "span_id"]
        .iter()
        .filter_map(|k| Some((k.to_string(), object.get("span")?.get(k)?.clone())))
        .collect();
    if ids.is_empty() {
        return line.to_string();
    }
    object.extend(ids);
    format!("{}\n", Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::lift_trace_ids;

    #[test]
    fn trace_ids_are_lifted_to_the_top_level() {
        let line = r#"{"level":"INFO","span":{"name":"attempt","trace_id":"ab","span_id":"cd"}}"#;
        let lifted: serde_json::Value = serde_json::from_str(&lift_trace_ids(line)).expect("json");
        assert_eq!(lifted["trace_id"], "ab");
        assert_eq!(lifted["span_id"], "cd");
        assert_eq!(lift_trace_ids("{\"level\":\"INFO\"}\n"), "{\"level\":\"INFO\"}\n");
        assert_eq!(lift_trace_ids("not json\n"), "not json\n");
    }
}
