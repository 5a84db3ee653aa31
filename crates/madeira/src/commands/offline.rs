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
    for file in files {
        let name = file.display().to_string();
        let source = match crate::files::read_text(file, crate::files::Confine::Parent) {
            Ok(s) => s,
            Err(e) => {
                errors.push(format!("{name}:1: {}", e.problem));
                continue;
            }
        };
        match madeira_core::spec::parse_flow(&name, &source) {
            Ok(def) => {
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
                if problems.is_empty() {
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
    let CronCommand::Next { expr, timezone, from, count, output } = command;
    let from = match from {
        Some(text) => chrono::DateTime::parse_from_rfc3339(&text)
            .with_context(|| format!("--from `{text}`: use RFC 3339, e.g. 2026-03-29T00:00:00Z"))?
            .with_timezone(&chrono::Utc),
        None => chrono::Utc::now(),
    };
    let fires =
        madeira_core::schedule::next_fires(&expr, &timezone, from, count).map_err(anyhow::Error::msg)?;
    let lines: Vec<String> = fires.iter().map(|t| t.to_rfc3339()).collect();
    match output {
        Output::Json => println!("{}", json!({"expr": expr, "timezone": timezone, "next": lines})),
        Output::Text => lines.iter().for_each(|l| println!("{l}")),
    }
    Ok(ExitCode::SUCCESS)
}
