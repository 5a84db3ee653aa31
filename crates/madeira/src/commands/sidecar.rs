//! `madeira sidecar --config FILE`: the sidecar daemon of `madeira_sidecar::daemon`
//! (the same code as the slim `madeira-sidecar` binary), its outcome as an exit
//! code. Also the text form of `madeira sidecars`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use madeira_sidecar::daemon::{self, DaemonError, Exit};
use serde_json::Value;

use crate::config::ConfigError;

pub async fn run(path: &Path) -> Result<ExitCode> {
    match daemon::run(path, env!("CARGO_PKG_VERSION")).await {
        Ok(Exit::Drained) => Ok(ExitCode::SUCCESS),
        Ok(Exit::Interrupted) => Ok(ExitCode::from(130)),
        Err(DaemonError::Config(e)) => Err(ConfigError { file: e.file, message: e.message }.into()),
        Err(e) => Err(e.into()),
    }
}

/// `madeira sidecars` as a table.
pub fn fleet_text(body: &Value) -> String {
    let mut out = format!(
        "{:<24} {:<12} {:<9} {:>7} {:>10}  {}\n",
        "NAME", "GROUP", "VERSION", "RUNNING", "HEARTBEAT", "JOBS"
    );
    for s in body["sidecars"].as_array().into_iter().flatten() {
        let jobs: Vec<&str> = s["jobs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let state = if s["connected"] == true { "" } else { " (disconnected)" };
        out.push_str(&format!(
            "{:<24} {:<12} {:<9} {:>7} {:>9.1}s  {}{state}\n",
            s["name"].as_str().unwrap_or(""),
            s["group"].as_str().unwrap_or(""),
            s["version"].as_str().unwrap_or(""),
            s["running"],
            s["last_heartbeat_age_seconds"].as_f64().unwrap_or(0.0),
            jobs.join(", "),
        ));
    }
    for x in body["xxl"].as_array().into_iter().flatten() {
        let age = (madeira_engine::now_ms() - x["last_seen_ms"].as_i64().unwrap_or(0)) as f64 / 1000.0;
        let state = if x["live"] == true { "" } else { " (dead)" };
        out.push_str(&format!(
            "{:<24} {:<12} {:<9} {:>7} {:>9.1}s  {}{state}\n",
            x["name"].as_str().unwrap_or(""),
            x["group"].as_str().unwrap_or(""),
            "xxl",
            "-",
            age,
            "(XXL-JOB executor)",
        ));
    }
    let waiting = body["waiting"].as_array().map_or(0, Vec::len);
    if waiting > 0 {
        out.push_str(&format!("\n{waiting} node(s) waiting in INIT for a sidecar:\n"));
        for w in body["waiting"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  run {} node {}: {}\n",
                w["run_id"].as_str().unwrap_or(""),
                w["node"].as_str().unwrap_or(""),
                w["reason"].as_str().unwrap_or("")
            ));
        }
    }
    out
}
