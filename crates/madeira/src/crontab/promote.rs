//! The crontab side of `madeira promote` / `madeira demote` (SPEC §11): finding
//! the line `crontab import` wrapped for a flow (`… madeira exec --job NAME
//! [--flow F] -- …`, the flow being F or the job's flow name), taking it out of
//! cron's hands, and putting it back. A promoted line is kept as a comment that
//! names the flow, so cron no longer runs it and `demote` restores it byte for byte.

use madeira_engine::observed::flow_name_for;

use super::parse::{self, Line};

/// The wrapped line of a flow in a crontab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapped {
    /// 1-based line number.
    pub line: usize,
    pub text: String,
    /// Five fields or an alias (never `@reboot`).
    pub schedule: String,
    /// CRON_TZ (or TZ) in force for the line, if the crontab sets one.
    pub timezone: Option<String>,
    pub job: String,
}

fn marker(flow: &str) -> String {
    format!("# madeira: promoted to flow {flow} (`madeira demote {flow}` restores this line): ")
}

/// The job and flow a wrapped command reports as (`exec --job NAME [--flow F]`).
fn exec_target(command: &str) -> Option<(String, String)> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let exec = words.iter().position(|w| *w == "exec")?;
    let (mut job, mut flow) = (None, None);
    let mut i = exec + 1;
    while i < words.len() && words[i] != "--" {
        let (key, inline) = match words[i].split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (words[i], None),
        };
        let value = || inline.map(str::to_string).or_else(|| words.get(i + 1).map(|v| v.to_string()));
        match key {
            "--job" => job = value(),
            "--flow" => flow = value(),
            _ => {}
        }
        i += if inline.is_none() && matches!(key, "--job" | "--flow" | "--sidecar") { 2 } else { 1 };
    }
    let job = job?;
    let flow = flow_name_for(flow.as_deref().unwrap_or(&job));
    Some((job, flow))
}

/// The one line of `text` that runs `madeira exec` for `flow`.
/// A system crontab's user column reads as part of the command here, which
/// changes neither the schedule nor the `exec` arguments.
pub fn find(text: &str, flow: &str) -> Result<Wrapped, String> {
    let mut timezone = None;
    let mut found = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        match parse::line(raw, false) {
            Line::Env { name, value } if name == "CRON_TZ" || (name == "TZ" && timezone.is_none()) => {
                timezone = Some(value)
            }
            Line::Job(entry) => {
                if let Some((job, f)) = exec_target(&entry.command)
                    && f == flow
                {
                    found.push(Wrapped {
                        line: i + 1,
                        text: raw.to_string(),
                        schedule: entry.schedule.clone(),
                        timezone: timezone.clone(),
                        job,
                    });
                }
            }
            _ => {}
        }
    }
    if text.lines().any(|l| l.starts_with(&marker(flow))) && found.is_empty() {
        return Err(format!("flow {flow}'s line is already promoted (commented out by `madeira promote`)"));
    }
    match found.len() {
        0 => Err(format!(
            "no line runs `madeira exec` for flow {flow} (`exec --job {flow}` or `--flow {flow}`); \
             is this the crontab `madeira crontab import` rewrote?"
        )),
        1 => {
            let wrapped = found.remove(0);
            if wrapped.schedule == "@reboot" {
                return Err(format!(
                    "line {}: an @reboot job has no schedule for Madeira to run it on; keep it in cron",
                    wrapped.line
                ));
            }
            Ok(wrapped)
        }
        _ => {
            let lines: Vec<String> = found.iter().map(|w| w.line.to_string()).collect();
            Err(format!("lines {} all run flow {flow}; promote needs exactly one", lines.join(", ")))
        }
    }
}

/// `text` with `wrapped`'s line turned into the comment `demote` reads back.
pub fn take_out(text: &str, wrapped: &Wrapped, flow: &str) -> String {
    let mut out = String::with_capacity(text.len() + 100);
    for (i, raw) in text.lines().enumerate() {
        if i + 1 == wrapped.line {
            out.push_str(&marker(flow));
        }
        out.push_str(raw);
        out.push('\n');
    }
    out
}

/// `text` with `flow`'s promoted line put back; the line number.
pub fn put_back(text: &str, flow: &str) -> Result<(String, usize), String> {
    let prefix = marker(flow);
    let mut out = String::with_capacity(text.len());
    let mut at = None;
    for (i, raw) in text.lines().enumerate() {
        match raw.strip_prefix(&prefix) {
            Some(line) if at.is_none() => {
                at = Some(i + 1);
                out.push_str(line);
            }
            _ => out.push_str(raw),
        }
        out.push('\n');
    }
    let at = at.ok_or_else(|| {
        format!(
            "no line of this crontab was promoted to flow {flow} (no `{}` comment); add the wrapped line back by hand",
            prefix.trim_end()
        )
    })?;
    Ok((out, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAB: &str = "MADEIRA_SIDECAR=/run/s.sock\nCRON_TZ=Asia/Shanghai\n# nightly\n5 1 * * * madeira exec --job backup-db -- /bin/sh -c '/opt/backup.sh'\n*/5 * * * * madeira exec --job=poll --flow poller -- /bin/sh -c 'poll'\n@reboot madeira exec --job warm -- /bin/sh -c 'warm'\n";

    #[test]
    fn finds_takes_out_and_puts_back_a_wrapped_line() {
        let w = find(TAB, "backup-db").expect("found");
        assert_eq!((w.line, w.schedule.as_str(), w.job.as_str()), (4, "5 1 * * *", "backup-db"));
        assert_eq!(w.timezone.as_deref(), Some("Asia/Shanghai"));
        let out = take_out(TAB, &w, "backup-db");
        assert!(find(&out, "backup-db").expect_err("gone").contains("already promoted"));
        assert_eq!(put_back(&out, "backup-db").expect("restored"), (TAB.to_string(), 4));
        let p = find(TAB, "poller").expect("--flow names the flow");
        assert_eq!((p.line, p.job.as_str()), (5, "poll"));
        assert!(find(TAB, "poll").is_err(), "the job name is not the flow when --flow is given");
        assert!(find(TAB, "warm").expect_err("reboot").contains("@reboot"));
        assert!(put_back(TAB, "backup-db").expect_err("nothing promoted").contains("by hand"));
    }

    #[test]
    fn a_system_crontab_keeps_its_user_column() {
        let tab = "0 3 * * * root madeira exec --job rotate -- /bin/sh -c 'logrotate'\n";
        let w = find(tab, "rotate").expect("found");
        assert_eq!((w.schedule.as_str(), w.job.as_str()), ("0 3 * * *", "rotate"));
    }
}
