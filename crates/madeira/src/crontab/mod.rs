//! `madeira crontab import FILE|DIR...` (SPEC §11): user and system crontabs (with
//! the user column, /etc/cron.d style) become observe-mode flows, sidecar job
//! config and a rewritten crontab whose lines are wrapped by `madeira exec`. Each
//! job keeps cron's semantics: `[SHELL, "-c", command]` with the crontab's
//! environment and user, `%` as cron reads it. A line that cannot be translated is
//! reported with its line number and kept as it was; secrets in env lines are not
//! echoed. Jobs starting in the same minute are reported as a stampede;
//! `--jitter DURATION` spreads them (see `stampede`).

mod emit;
mod parse;
pub mod promote;
mod stampede;
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
    let CrontabCommand::Import {
        paths,
        group,
        grace,
        out,
        madeira,
        sidecar,
        system,
        timezone,
        jitter,
        output,
    } = command;
    madeira_core::spec::parse_duration(&grace).map_err(|e| anyhow::anyhow!("--grace: {e}"))?;
    let jitter_minutes = match &jitter {
        None => None,
        Some(text) => {
            let d = madeira_core::spec::parse_duration(text).map_err(|e| anyhow::anyhow!("--jitter: {e}"))?;
            let minutes = u32::try_from(d.as_secs() / 60).unwrap_or(u32::MAX);
            if !(1..=24 * 60).contains(&minutes) {
                anyhow::bail!("--jitter {text}: give 1m to 24h (cron starts jobs on whole minutes)");
            }
            Some(minutes)
        }
    };
    let madeira = match madeira {
        Some(path) => path,
        // cron's PATH is /usr/bin:/bin: a bare `madeira` would not start.
        None => std::env::current_exe()
            .and_then(|exe| exe.canonicalize())
            .context("finding this binary's path for the rewritten crontab; give --madeira PATH")?
            .display()
            .to_string(),
    };
    let options = ImportOptions { group, grace, madeira, sidecar: sidecar.display().to_string(), timezone };
    let mut skipped = Vec::new();
    let mut inputs = Vec::new();
    for path in &paths {
        for (file, is_system, within) in files(path, system, &mut skipped)? {
            let confine = within.as_deref().map_or(Confine::Parent, Confine::Within);
            let text = crate::files::read_text(&file, confine)?;
            inputs.push((file, text, is_system));
        }
    }
    let build = |overrides| {
        let mut import = Import::new(options.clone());
        import.overrides = overrides;
        for (file, why) in &skipped {
            import.note_file(file, why);
        }
        for (file, text, is_system) in &inputs {
            import.add_file(file, text, *is_system);
        }
        import
    };
    let mut import = build(Default::default());
    let stampedes = stampede::find(&import.planned);
    let planned = import.planned.clone();
    let mut spread = Vec::new();
    if let Some(minutes) = jitter_minutes
        && !stampedes.is_empty()
    {
        let (moved, notes) = stampede::spread(&planned, &stampedes, minutes);
        import = build(moved);
        spread = notes;
    }
    for group in &stampedes {
        let first = &planned[group.jobs[0]];
        let names: Vec<&str> = group.jobs.iter().map(|&i| planned[i].name.as_str()).collect();
        let advice = match &jitter {
            Some(j) => format!("spread over {j} (--jitter)"),
            None => "spread them with `--jitter 10m` or by hand".to_string(),
        };
        import.note(
            &first.file,
            first.line,
            "warning",
            format!(
                "stampede: {} jobs start at {} UTC ({} time(s) a week): {}; {advice}",
                names.len(),
                group.first.format("%a %H:%M"),
                group.times_a_week,
                names.join(", ")
            ),
        );
    }
    for (i, outcome) in spread {
        let job = &planned[i];
        let message = match outcome {
            Ok(new) => format!("--jitter: `{}` now starts at `{new}`", job.schedule),
            Err(why) => format!("--jitter: `{}` not moved: {why}", job.schedule),
        };
        import.note(
            &job.file,
            job.line,
            if message.contains("not moved") { "warning" } else { "info" },
            message,
        );
    }
    match &out {
        Some(dir) => write(dir, &import)?,
        None if output == Output::Json => println!("{}", json_of(&import)),
        None => print!("{}", import.text()),
    }
    for note in grouped(&import.notes) {
        eprintln!("{note}");
    }
    Ok(if import.untranslated() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// The crontab files named by `path`: itself, or every file of a directory (as
/// /etc/cron.d, with a user column), with the directory they must stay in.
/// Skipped files (not regular, symlinks out of the directory, backups) are noted.
fn files(
    path: &Path,
    system: bool,
    skipped: &mut Vec<(PathBuf, String)>,
) -> Result<Vec<(PathBuf, bool, Option<PathBuf>)>> {
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
                skipped.push((file, format!("skipped: {why}")));
                continue;
            }
        };
        let name = file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if name.starts_with('.')
            || name.ends_with('~')
            || name.contains(".dpkg-")
            || name.ends_with(".rpmsave")
        {
            skipped
                .push((file, "skipped: cron ignores hidden, backup and package-manager files".to_string()));
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
    let report: String = grouped(&import.notes).iter().map(|n| format!("{n}\n")).collect();
    std::fs::write(dir.join("report.txt"), report)?;
    eprintln!(
        "wrote {} flow(s), sidecar-jobs.yaml and {} crontab(s) to {}",
        import.flows.len(),
        import.crontabs.len(),
        dir.display()
    );
    Ok(())
}

/// The notes as printed: a notice repeated for several lines of a file is printed
/// once, at its first line, naming the others.
fn grouped(notes: &[emit::Note]) -> Vec<String> {
    let mut out: Vec<(&emit::Note, Vec<usize>)> = Vec::new();
    for note in notes {
        match out
            .iter_mut()
            .find(|(n, _)| n.file == note.file && n.level == note.level && n.message == note.message)
        {
            Some((_, lines)) => lines.push(note.line),
            None => out.push((note, Vec::new())),
        }
    }
    out.into_iter()
        .map(|(note, also)| match also.as_slice() {
            [] => note.to_string(),
            lines => {
                let lines: Vec<String> = lines.iter().map(ToString::to_string).collect();
                format!("{note} (also lines {})", lines.join(", "))
            }
        })
        .collect()
}

fn json_of(import: &Import) -> serde_json::Value {
    json!({
        "flows": import.flows.iter().map(|(name, yaml)| json!({"flow": name, "yaml": yaml})).collect::<Vec<_>>(),
        "sidecar_jobs": import.jobs_yaml(),
        "crontabs": import.crontabs.iter().map(|c| json!({"source": c.source.display().to_string(), "text": c.redacted})).collect::<Vec<_>>(),
        "report": import.notes.iter().map(|n| json!({"file": n.file, "line": n.line, "level": n.level, "message": n.message})).collect::<Vec<_>>(),
    })
}
