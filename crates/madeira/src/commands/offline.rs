//! Commands that need no server: `validate` and `cron next`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;

use crate::cli::{CronCommand, Output};

pub fn validate(files: &[PathBuf], config: Option<&std::path::Path>, output: Output) -> Result<ExitCode> {
    // With a server config, SQL nodes must name one of its datasources and
    // message triggers one of its sources, as on apply.
    let known = match config {
        Some(path) => {
            let config = crate::config::ServerConfig::load(path)?;
            Some((config.datasource_names(), config.source_names()))
        }
        None => None,
    };
    let mut errors = Vec::new();
    let mut valid = Vec::new();
    // Calendars as on apply: the built-in ones, the config's, the calendar files
    // given here and those in a `calendars/` directory next to the flows.
    let (calendars, flows) = match validation_calendars(files, config) {
        Ok(found) => found,
        Err(e) => {
            errors.push(format!("{e:#}"));
            (madeira_calendar::Calendars::builtin(), Vec::new())
        }
    };
    for (file, source) in &flows {
        let name = file.display().to_string();
        match madeira_core::spec::parse_flow(&name, source) {
            Ok(def) => {
                let calendar_problems = madeira_core::spec::check_calendars(&name, &def, &calendars)
                    .err()
                    .map(|e| e.0)
                    .unwrap_or_default();
                errors.extend(calendar_problems.iter().map(ToString::to_string));
                let problems: Vec<String> = match &known {
                    Some((datasources, sources)) => [
                        madeira_core::spec::check_sources(&name, &def, sources),
                        madeira_core::spec::check_datasources(&name, &def, datasources),
                    ]
                    .into_iter()
                    .filter_map(Result::err)
                    .flat_map(|e| e.0)
                    .map(|e| e.to_string())
                    .collect(),
                    None => Vec::new(),
                };
                if problems.is_empty() && calendar_problems.is_empty() {
                    valid.push(json!({"file": name, "flow": def.name, "nodes": def.nodes.len()}));
                }
                errors.extend(problems);
            }
            Err(e) => errors.extend(e.0.iter().map(ToString::to_string)),
        }
    }
    match output {
        Output::Json => println!("{}", json!({"valid": valid, "errors": errors})),
        Output::Text => {
            for line in &errors {
                println!("{line}");
            }
            for v in &valid {
                eprintln!(
                    "{}: flow {} is valid ({} nodes)",
                    v["file"].as_str().unwrap_or(""),
                    v["flow"].as_str().unwrap_or(""),
                    v["nodes"]
                );
            }
        }
    }
    Ok(if errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

pub fn cron(command: CronCommand) -> Result<ExitCode> {
    let CronCommand::Next { expr, timezone, from, count, calendar, calendar_mode, config, output } = command;
    let from = match from {
        Some(text) => chrono::DateTime::parse_from_rfc3339(&text)
            .with_context(|| format!("--from `{text}`: use RFC 3339, e.g. 2026-03-29T00:00:00Z"))?
            .with_timezone(&chrono::Utc),
        None => chrono::Utc::now(),
    };
    if let Some(name) = calendar {
        let on = CalendarNext { expr, timezone, from, count, name, mode: calendar_mode, config, output };
        return cron_on_calendar(on);
    }
    let fires =
        madeira_core::schedule::next_fires(&expr, &timezone, from, count).map_err(anyhow::Error::msg)?;
    let lines: Vec<String> = fires.iter().map(|t| t.to_rfc3339()).collect();
    match output {
        Output::Json => println!("{}", json!({"expr": expr, "timezone": timezone, "next": lines})),
        Output::Text => lines.iter().for_each(|l| println!("{l}")),
    }
    Ok(ExitCode::SUCCESS)
}

struct CalendarNext {
    expr: String,
    timezone: String,
    from: chrono::DateTime<chrono::Utc>,
    count: usize,
    name: String,
    mode: String,
    config: Option<PathBuf>,
    output: Output,
}

/// `cron next --calendar`: the next fires on a calendar, with the days it skips
/// (or moves ticks off) and where the calendar's data ends.
fn cron_on_calendar(on: CalendarNext) -> Result<ExitCode> {
    use madeira_calendar::CalendarMode;
    use madeira_core::schedule::Planned;
    let calendars = configured_calendars(on.config.as_deref())?;
    let mode = match on.mode.as_str() {
        "skip" => CalendarMode::Skip,
        "next" => CalendarMode::Next,
        "previous" => CalendarMode::Previous,
        other => anyhow::bail!("--calendar-mode `{other}`: use skip, next or previous"),
    };
    if calendars.get(&on.name).is_none() {
        let known: Vec<&str> = calendars.names().collect();
        anyhow::bail!("unknown calendar `{}`; known: {} (custom ones: --config)", on.name, known.join(", "));
    }
    madeira_core::spec::parse_cron(&on.expr).map_err(anyhow::Error::msg)?;
    let tz = madeira_core::spec::parse_timezone(&on.timezone).map_err(anyhow::Error::msg)?;
    let trigger = madeira_core::model::CronTriggerDef {
        expr: on.expr.clone(),
        timezone: on.timezone.clone(),
        misfire: madeira_core::model::Misfire::RunOnce,
        jitter: std::time::Duration::ZERO,
        grace: None,
        catchup_window: std::time::Duration::ZERO,
        calendar: Some(madeira_core::model::TriggerCalendar { name: on.name.clone(), mode, line: None }),
    };
    let planned = madeira_core::schedule::plan_many(&trigger, &calendars, on.from, on.count);
    let local = |t: &chrono::DateTime<chrono::Utc>| t.with_timezone(&tz).to_rfc3339();
    let mut rows = Vec::new();
    for p in &planned {
        rows.push(match p {
            Planned::Fire { tick, at } if tick == at => json!({"fire": local(at)}),
            Planned::Fire { tick, at } => json!({"fire": local(at), "moved_from": local(tick)}),
            Planned::Skipped { day, .. } => json!({"skipped": day.to_string()}),
            Planned::Blocked { day, error, .. } => json!({"blocked": day.to_string(), "error": error}),
        });
    }
    let last = calendars.get(&on.name).and_then(|c| c.last_known_day()).map(|d| d.to_string());
    match on.output {
        Output::Json => println!(
            "{}",
            json!({"expr": on.expr, "timezone": on.timezone, "calendar": on.name, "calendar_mode": on.mode,
                   "last_known_day": last, "planned": rows})
        ),
        Output::Text => {
            for row in &rows {
                match (row["fire"].as_str(), row["moved_from"].as_str()) {
                    (Some(at), Some(from)) => println!("{at}  (moved from {from})"),
                    (Some(at), None) => println!("{at}"),
                    _ if row["skipped"].is_string() => {
                        println!(
                            "# {} skipped: not a business day of {}",
                            row["skipped"].as_str().unwrap_or(""),
                            on.name
                        )
                    }
                    _ => println!(
                        "# {} no run: {}",
                        row["blocked"].as_str().unwrap_or(""),
                        row["error"].as_str().unwrap_or("")
                    ),
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The built-in calendars plus those of the server config at `config` (its
/// `calendars:` and its flows directory's calendar files).
pub fn configured_calendars(config: Option<&std::path::Path>) -> Result<madeira_calendar::Calendars> {
    let Some(path) = config else { return Ok(madeira_calendar::Calendars::builtin()) };
    let config = crate::config::ServerConfig::load(path)?;
    Ok(crate::calendars::load(&config.calendars, &path.display().to_string(), config.flows.as_deref())?)
}

/// The calendars flows are validated against, and the flow files (with their
/// text) among `files` — calendar files are read as calendars, not flows.
fn validation_calendars(
    files: &[PathBuf],
    config: Option<&std::path::Path>,
) -> Result<(madeira_calendar::Calendars, Vec<(PathBuf, String)>)> {
    let mut calendar_files = Vec::new();
    let mut flows = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for file in files {
        let source = crate::files::read_text(file, crate::files::Confine::Parent)
            .map_err(|e| anyhow::anyhow!("{}:1: {}", file.display(), e.problem))?;
        if crate::calendars::is_calendar_file(&source) {
            calendar_files.push((file.clone(), source));
        } else {
            flows.push((file.clone(), source));
        }
        dirs.insert(file.parent().map(|p| p.join("calendars")).unwrap_or_else(|| "calendars".into()));
    }
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        for file in crate::files::yaml_files(dir).context("reading the calendars directory")? {
            if !calendar_files.iter().any(|(f, _)| *f == file) {
                let text = crate::files::read_text(&file, crate::files::Confine::Within(dir))?;
                calendar_files.push((file, text));
            }
        }
    }
    let (defs, file) = match config {
        Some(path) => (crate::config::ServerConfig::load(path)?.calendars, path.display().to_string()),
        None => (Vec::new(), String::new()),
    };
    // Calendar files given as arguments are also flows' `calendars/` entries: keep one.
    flows.retain(|(f, _)| !calendar_files.iter().any(|(c, _)| c == f));
    let calendars = crate::calendars::build(&defs, &file, &calendar_files)?;
    Ok((calendars, flows))
}
