//! Reading a crontab as cron does: comments, environment lines (applying to the
//! lines below them), `@reboot`/`@daily`… or five time fields, an optional user
//! column (system crontabs, /etc/cron.d), and the command with cron's `%` rules:
//! `\%` is a literal `%`, the first unescaped `%` starts the job's stdin and each
//! later one is a newline in it.

/// One line of a crontab, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Blank,
    Comment(String),
    /// `NAME=value` (value unquoted).
    Env {
        name: String,
        value: String,
    },
    Job(Entry),
    /// A commented-out job (`# 0 2 * * * backup`).
    Disabled(Entry),
    /// Not understood; the message says why.
    Bad(String),
}

/// A job line.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Five fields joined by spaces, or `@daily`-style.
    pub schedule: String,
    pub user: Option<String>,
    /// The command as cron hands it to the shell (`\%` unescaped, stdin cut off).
    pub command: String,
    /// The command part exactly as written (for rewriting the line).
    pub raw_command: String,
    /// The `%`-part as written, including its leading `%` (kept on the rewritten line).
    pub raw_stdin: String,
    /// What cron feeds to stdin (`%` turned into newlines), if any.
    pub stdin: Option<String>,
}

const ALIASES: &[&str] =
    &["@reboot", "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"];

/// Classifies one line; `system` crontabs carry a user column.
pub fn line(text: &str, system: bool) -> Line {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Line::Blank;
    }
    if let Some(rest) = trimmed.strip_prefix('#') {
        let inner = rest.trim_start_matches('#').trim();
        if looks_like_job(inner)
            && let Ok(entry) = job(inner, system)
        {
            return Line::Disabled(entry);
        }
        return Line::Comment(text.to_string());
    }
    if let Some((name, value)) = env(trimmed) {
        return Line::Env { name, value };
    }
    match job(trimmed, system) {
        Ok(entry) => Line::Job(entry),
        Err(why) => Line::Bad(why),
    }
}

fn looks_like_job(text: &str) -> bool {
    let first = text.split_whitespace().next().unwrap_or("");
    let timeish = |f: &str| !f.is_empty() && f.chars().all(|c| c.is_ascii_digit() || ",-*/".contains(c));
    (ALIASES.contains(&first) || timeish(first)) && text.split_whitespace().count() >= 6
}

/// `NAME = value`, with optional quotes, as cron's env lines.
fn env(text: &str) -> Option<(String, String)> {
    let eq = text.find('=')?;
    let name = text[..eq].trim();
    if name.is_empty()
        || !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return None;
    }
    let mut value = text[eq + 1..].trim().to_string();
    for q in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(q) && value.ends_with(q) {
            value = value[1..value.len() - 1].to_string();
        }
    }
    Some((name.to_string(), value))
}

/// Splits off the first `n` whitespace-separated fields; the rest keeps its spacing.
fn fields(text: &str, n: usize) -> Option<(Vec<&str>, &str)> {
    let mut out = Vec::with_capacity(n);
    let mut rest = text.trim_start();
    for _ in 0..n {
        let end = rest.find(char::is_whitespace)?;
        out.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    Some((out, rest))
}

fn job(text: &str, system: bool) -> Result<Entry, String> {
    let user_cols = usize::from(system);
    let first = text.split_whitespace().next().unwrap_or("");
    let (schedule, rest) = if first.starts_with('@') {
        if !ALIASES.contains(&first.to_ascii_lowercase().as_str()) {
            return Err(format!("unknown schedule `{first}`; cron knows {}", ALIASES.join(", ")));
        }
        let (f, rest) = fields(text, 1 + user_cols).ok_or("the line has a schedule but no command")?;
        (f[0].to_ascii_lowercase(), (f.get(1).map(|u| u.to_string()), rest))
    } else {
        let need = 5 + user_cols;
        let (f, rest) = fields(text, need).ok_or_else(|| {
            let what =
                if system { "5 time fields, a user and a command" } else { "5 time fields and a command" };
            format!("not a cron line: it needs {what}")
        })?;
        (f[..5].join(" "), (f.get(5).map(|u| u.to_string()), rest))
    };
    let (user, rest) = rest;
    if rest.trim().is_empty() {
        return Err("the line has a schedule but no command".into());
    }
    let (raw_command, raw_stdin) = split_percent(rest);
    let command = raw_command.replace("\\%", "%");
    let stdin = raw_stdin.strip_prefix('%').map(|s| {
        let mut text = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&'%') => {
                    text.push('%');
                    chars.next();
                }
                '%' => text.push('\n'),
                c => text.push(c),
            }
        }
        text
    });
    Ok(Entry {
        schedule,
        user,
        command,
        raw_command: raw_command.to_string(),
        raw_stdin: raw_stdin.to_string(),
        stdin,
    })
}

/// The command up to the first unescaped `%`, and the rest (from that `%`).
fn split_percent(text: &str) -> (&str, &str) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if bytes.get(i + 1) == Some(&b'%') => i += 2,
            b'%' => return (&text[..i], &text[i..]),
            _ => i += 1,
        }
    }
    (text, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_of(text: &str, system: bool) -> Entry {
        match line(text, system) {
            Line::Job(e) => e,
            other => panic!("not a job: {other:?}"),
        }
    }

    #[test]
    fn percent_signs_follow_cron() {
        let e = job_of(r"0 1 * * * date +\%Y-\%m-\%d > /tmp/d%line one%line two", false);
        assert_eq!(e.command, "date +%Y-%m-%d > /tmp/d");
        assert_eq!(e.raw_command, r"date +\%Y-\%m-\%d > /tmp/d");
        assert_eq!(e.stdin.as_deref(), Some("line one\nline two"));
        assert_eq!(e.raw_stdin, "%line one%line two");
    }

    #[test]
    fn system_lines_have_a_user_and_aliases_work() {
        let e = job_of("*/5 * * * 1-5 backup /opt/bin/backup.sh --full", true);
        assert_eq!((e.schedule.as_str(), e.user.as_deref()), ("*/5 * * * 1-5", Some("backup")));
        assert_eq!(e.command, "/opt/bin/backup.sh --full");
        let e = job_of("@daily root run-parts /etc/cron.daily", true);
        assert_eq!(
            (e.schedule.as_str(), e.user.as_deref(), e.command.as_str()),
            ("@daily", Some("root"), "run-parts /etc/cron.daily")
        );
    }

    #[test]
    fn env_comments_disabled_jobs_and_junk() {
        assert_eq!(
            line("MAILTO=\"ops@example.com\"", false),
            Line::Env { name: "MAILTO".into(), value: "ops@example.com".into() }
        );
        assert_eq!(
            line("PATH = /usr/local/bin:/usr/bin", false),
            Line::Env { name: "PATH".into(), value: "/usr/local/bin:/usr/bin".into() }
        );
        assert!(matches!(line("# nightly jobs", false), Line::Comment(_)));
        assert!(
            matches!(line("#0 3 * * * /opt/old.sh", false), Line::Disabled(e) if e.command == "/opt/old.sh")
        );
        assert!(matches!(line("0 3 * *", false), Line::Bad(_)));
        assert!(matches!(line("@fortnightly /x", false), Line::Bad(m) if m.contains("unknown schedule")));
        assert_eq!(line("   ", false), Line::Blank);
    }
}
