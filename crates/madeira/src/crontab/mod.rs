//! `madeira crontab import FILE|DIR...` (SPEC §11): user and system crontabs (with
//! the user column, /etc/cron.d style) become observe-mode flows, sidecar job
//! config and a rewritten crontab whose lines are wrapped by `madeira exec`. Each
//! job keeps cron's semantics: `[SHELL, "-c", command]` with the crontab's
//! environment and user, `%` as cron reads it. A line that cannot be translated is
//! reported with its line number and kept as it was; secrets in env lines are not
//! echoed.

mod emit;
mod parse;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use serde_json::json;

use crate::cli::{CrontabCommand, Output};

pub use emit::{Import, ImportOptions};

pub fn run(command: CrontabCommand) -> Result<ExitCode> {
    let CrontabCommand::Import { paths, group, grace, out, madeira, sidecar, system, timezone, output } =
        command;
    madeira_core::spec::parse_duration(&grace).map_err(|e| anyhow::anyhow!("--grace: {e}"))?;
    let options = ImportOptions { group, grace, madeira, sidecar: sidecar.display().to_string(), timezone };
    let mut import = Import::new(options);
    for path in &paths {
        for (file, is_system) in files(path, system, &mut import)? {
            let text =
                std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            import.add_file(&file, &text, is_system);
        }
    }
    match &out {
        Some(dir) => write(dir, &import)?,
        None if output == Output::Json => println!("{}", json_of(&import)),
        None => print!("{}", import.text()),
    }
    for note in &import.notes {
        eprintln!("{note}");
    }
    Ok(if import.untranslated() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The crontab files named by `path`: itself, or every file of a directory (as
/// /etc/cron.d, with a user column). Skipped files are noted.
fn files(path: &Path, system: bool, import: &mut Import) -> Result<Vec<(PathBuf, bool)>> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        let is_system = system || path == Path::new("/etc/crontab");
        return Ok(vec![(path.to_path_buf(), is_system)]);
    }
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading directory {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for file in entries {
        let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if !file.is_file() {
            import.note_file(&file, "skipped: not a regular file");
        } else if name.starts_with('.')
            || name.ends_with('~')
            || name.contains(".dpkg-")
            || name.ends_with(".rpmsave")
        {
            import.note_file(&file, "skipped: cron ignores hidden, backup and package-manager files");
        } else {
            out.push((file, true));
        }
    }
    Ok(out)
}

/// `--out DIR`: flows/, sidecar-jobs.yaml, one rewritten crontab per input (with
/// secrets as written, mode 0600), and report.txt.
fn write(dir: &Path, import: &Import) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let flows = dir.join("flows");
    std::fs::create_dir_all(&flows).with_context(|| format!("creating {}", flows.display()))?;
    for (name, yaml) in &import.flows {
        std::fs::write(flows.join(format!("{name}.yaml")), yaml)?;
    }
    std::fs::write(dir.join("sidecar-jobs.yaml"), import.jobs_yaml())?;
    for crontab in &import.crontabs {
        let name = crontab.source.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let path = dir.join(format!("crontab.{name}"));
        std::fs::write(&path, &crontab.with_secrets)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    let report: String = import.notes.iter().map(|n| format!("{n}\n")).collect();
    std::fs::write(dir.join("report.txt"), report)?;
    eprintln!(
        "wrote {} flow(s), sidecar-jobs.yaml and {} crontab(s) to {}",
        import.flows.len(),
        import.crontabs.len(),
        dir.display()
    );
    Ok(())
}

fn json_of(import: &Import) -> serde_json::Value {
    json!({
        "flows": import.flows.iter().map(|(name, yaml)| json!({"flow": name, "yaml": yaml})).collect::<Vec<_>>(),
        "sidecar_jobs": import.jobs_yaml(),
        "crontabs": import.crontabs.iter().map(|c| json!({"source": c.source.display().to_string(), "text": c.redacted})).collect::<Vec<_>>(),
        "report": import.notes.iter().map(|n| json!({"file": n.file, "line": n.line, "level": n.level, "message": n.message})).collect::<Vec<_>>(),
    })
}
