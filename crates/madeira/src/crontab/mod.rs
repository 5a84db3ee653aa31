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
use crate::files::{Confine, Entry};

pub use emit::{Import, ImportOptions};

pub fn run(command: CrontabCommand) -> Result<ExitCode> {
    let CrontabCommand::Import { paths, group, grace, out, madeira, sidecar, system, timezone, output } =
        command;
    madeira_core::spec::parse_duration(&grace).map_err(|e| anyhow::anyhow!("--grace: {e}"))?;
    let options = ImportOptions { group, grace, madeira, sidecar: sidecar.display().to_string(), timezone };
    let mut import = Import::new(options);
    for path in &paths {
        for (file, is_system, within) in files(path, system, &mut import)? {
            let confine = within.as_deref().map_or(Confine::Parent, Confine::Within);
            let text = crate::files::read_text(&file, confine)?;
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
/// /etc/cron.d, with a user column), with the directory they must stay in.
/// Skipped files (not regular, symlinks out of the directory, backups) are noted.
fn files(path: &Path, system: bool, import: &mut Import) -> Result<Vec<(PathBuf, bool, Option<PathBuf>)>> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        let is_system = system || path == Path::new("/etc/crontab");
        return Ok(vec![(path.to_path_buf(), is_system, None)]);
    }
    let mut out = Vec::new();
    for entry in crate::files::dir_entries(path)? {
        let file = match entry {
            Entry::File(file) => file,
            Entry::Skipped(file, why) => {
                import.note_file(&file, &format!("skipped: {why}"));
                continue;
            }
        };
        let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if name.starts_with('.')
            || name.ends_with('~')
            || name.contains(".dpkg-")
            || name.ends_with(".rpmsave")
        {
            import.note_file(&file, "skipped: cron ignores hidden, backup and package-manager files");
        } else {
            out.push((file, true, Some(path.to_path_buf())));
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
