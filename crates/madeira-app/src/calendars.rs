//! The server's calendars: the built-in ones (`weekdays`, `all_days`,
//! `cn-workdays`), the server config's `calendars:` list, and calendar files in
//! the flows directory — `calendars/*.yaml` under it, or any file there whose
//! top level says `kind: calendar`. Read once at start (a change needs a restart);
//! every problem names its file.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use madeira_calendar::{CalendarDef, Calendars, parse_definitions};

use crate::files::{Confine, read_text, yaml_files};

/// True when `source` is a calendar file: a top-level `kind: calendar` line, or
/// a top-level `calendar: NAME` (where a flow file says `flow: NAME`).
pub fn is_calendar_file(source: &str) -> bool {
    source.lines().any(|l| {
        let value =
            |rest: &str| rest.split('#').next().unwrap_or("").trim().trim_matches(['"', '\'']).to_string();
        match (l.strip_prefix("kind:"), l.strip_prefix("calendar:")) {
            (Some(rest), _) => value(rest) == "calendar",
            (_, Some(rest)) => !value(rest).is_empty(),
            _ => false,
        }
    })
}

/// The calendar files of a flows directory: `DIR/calendars/*.yaml` and the
/// `kind: calendar` files in `DIR`, with their text.
pub fn files_in(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let sub = dir.join("calendars");
    if sub.is_dir() {
        let files = yaml_files(&sub)
            .map_err(|source| Error::Dir { what: "reading the calendars directory", source })?;
        for file in files {
            let text = read_text(&file, Confine::Within(&sub))?;
            out.push((file, text));
        }
    }
    let files =
        yaml_files(dir).map_err(|source| Error::Dir { what: "reading the flows directory", source })?;
    for file in files {
        let text = read_text(&file, Confine::Within(dir))?;
        if is_calendar_file(&text) {
            out.push((file, text));
        }
    }
    Ok(out)
}

/// The built-in calendars plus `config` (from `config_file`) and `files`.
pub fn build(config: &[CalendarDef], config_file: &str, files: &[(PathBuf, String)]) -> Result<Calendars> {
    let mut defs = config.to_vec();
    for (path, text) in files {
        let parsed = parse_definitions(text)
            .map_err(|source| Error::Calendar { what: path.display().to_string(), source })?;
        defs.extend(parsed);
    }
    let what = match (config.is_empty(), files.is_empty()) {
        (false, true) => format!("{config_file}: calendars"),
        (true, false) => "calendar files".to_string(),
        _ => format!("{config_file}: calendars and calendar files"),
    };
    Calendars::builtin().extend(defs).map_err(|source| Error::Calendar { what, source })
}

/// Loads the server's calendars: config, then the flows directory's files.
pub fn load(config: &[CalendarDef], config_file: &str, flows: Option<&Path>) -> Result<Calendars> {
    let files = match flows {
        Some(dir) => files_in(dir)?,
        None => Vec::new(),
    };
    let calendars = build(config, config_file, &files)?;
    for calendar in calendars.iter() {
        tracing::info!(
            calendar = calendar.name(),
            last_known_day = ?calendar.last_known_day(),
            "calendar loaded"
        );
    }
    Ok(calendars)
}

/// `madeira_calendar_last_day_timestamp_seconds{calendar}`: the start (00:00 UTC)
/// of the last day each bounded calendar has data for; the alert rule
/// `MadeiraCalendarRunningOut` warns 30 days before it.
pub fn register_metrics(calendars: &Calendars, registry: &mut prometheus_client::registry::Registry) {
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    let family: Family<Vec<(String, String)>, Gauge> = Family::default();
    for calendar in calendars.iter() {
        let Some(last) = calendar.last_known_day() else { continue };
        let seconds = last.and_hms_opt(0, 0, 0).map(|t| t.and_utc().timestamp()).unwrap_or_default();
        family.get_or_create(&vec![("calendar".to_string(), calendar.name().to_string())]).set(seconds);
    }
    registry.register(
        "madeira_calendar_last_day_timestamp_seconds",
        "Last day a calendar has data for (Unix seconds of its 00:00 UTC); ticks after it make no run",
        family,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_files_are_found_by_kind_or_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("calendars")).expect("mkdir");
        std::fs::write(dir.path().join("calendars/plant.yaml"), "name: plant\nholidays: [2026-08-03]\n")
            .expect("write");
        std::fs::write(
            dir.path().join("sse.yaml"),
            "kind: calendar\nname: sse\nbase: cn-workdays\nexclude_weekends: true\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("flow.yaml"), "flow: f\nnodes:\n  a: {run: {builtin: noop}}\n")
            .expect("write");
        let calendars = load(&[], "server.yaml", Some(dir.path())).expect("load");
        let names: Vec<&str> = calendars.names().collect();
        assert_eq!(names, ["all_days", "cn-workdays", "plant", "sse", "weekdays"]);
        std::fs::write(dir.path().join("calendars/bad.yaml"), "name: bad\nbase: nowhere\n").expect("write");
        let err = load(&[], "server.yaml", Some(dir.path())).expect_err("unknown base");
        let cause = std::error::Error::source(&err).map(ToString::to_string).unwrap_or_default();
        assert_eq!(err.to_string(), "calendar files");
        assert!(cause.contains("unknown base `nowhere`"), "{cause}");
    }

    #[test]
    fn only_a_top_level_kind_calendar_makes_a_calendar_file() {
        assert!(is_calendar_file("kind: calendar\nname: x\n"));
        assert!(is_calendar_file("name: x\nkind: 'calendar'  # a calendar\n"));
        assert!(!is_calendar_file("flow: x\nnodes:\n  kind: calendar\n"));
        assert!(!is_calendar_file("flow: x\n"));
    }
}
