//! Turning parsed crontab lines into observe-mode flows, sidecar jobs and the
//! rewritten crontab, with a note for everything that is not carried over as is.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use madeira_engine::observed::{flow_name_for, observed_flow_yaml};

use super::parse::{self, Entry, Line};

#[derive(Debug, Clone)]
pub struct ImportOptions {
    pub group: String,
    pub grace: String,
    /// The madeira binary as the rewritten crontab calls it.
    pub madeira: String,
    /// The sidecar's exec socket (`MADEIRA_SIDECAR` in the rewritten crontab).
    pub sidecar: String,
    /// Schedule timezone when the crontab sets neither CRON_TZ nor TZ.
    pub timezone: String,
}

/// Something the user should know about one line (or file).
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub file: String,
    pub line: usize,
    /// `error` (not translated), `warning` or `info`.
    pub level: &'static str,
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}: {}", self.file, self.line, self.level, self.message)
    }
}

/// One input crontab, rewritten.
#[derive(Debug, Clone)]
pub struct Rewritten {
    pub source: PathBuf,
    /// Printed form: secret env values replaced.
    pub redacted: String,
    /// Installable form, secrets as written (only ever written to a 0600 file).
    pub with_secrets: String,
}

/// Everything an import produced.
pub struct Import {
    options: ImportOptions,
    /// `(flow name, YAML)`.
    pub flows: Vec<(String, String)>,
    /// Job name → its YAML body lines (already indented).
    jobs: BTreeMap<String, String>,
    pub crontabs: Vec<Rewritten>,
    pub notes: Vec<Note>,
    names: HashSet<String>,
    /// Every translated job with a schedule (for the stampede check).
    pub planned: Vec<super::stampede::Planned>,
    /// New schedules by (file, line), from `--jitter`.
    pub overrides: std::collections::HashMap<(PathBuf, usize), String>,
}

/// The environment cron gives the lines below an env line.
struct Env {
    vars: Vec<(String, String)>,
}

impl Env {
    fn new() -> Self {
        Self { vars: vec![("SHELL".into(), "/bin/sh".into()), ("PATH".into(), "/usr/bin:/bin".into())] }
    }

    fn set(&mut self, name: &str, value: &str) {
        self.vars.retain(|(n, _)| n != name);
        self.vars.push((name.to_string(), value.to_string()));
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Whether an env line's value must not be echoed.
pub fn is_secret(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let named = ["PASS", "SECRET", "TOKEN", "KEY", "CRED", "AUTH", "PRIVATE", "PWD"]
        .iter()
        .any(|w| upper.contains(w) && upper != "PWD");
    let userinfo = value
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .is_some_and(|a| a.contains(':') && a.contains('@'));
    named || userinfo
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Import {
    pub fn new(options: ImportOptions) -> Self {
        Self {
            options,
            flows: Vec::new(),
            jobs: BTreeMap::new(),
            crontabs: Vec::new(),
            notes: Vec::new(),
            names: HashSet::new(),
            planned: Vec::new(),
            overrides: Default::default(),
        }
    }

    pub(super) fn note(&mut self, file: &Path, line: usize, level: &'static str, message: impl Into<String>) {
        self.notes.push(Note { file: file.display().to_string(), line, level, message: message.into() });
    }

    pub fn note_file(&mut self, file: &Path, message: &str) {
        self.note(file, 1, "warning", message);
    }

    /// Lines reported as not translated.
    pub fn untranslated(&self) -> usize {
        self.notes.iter().filter(|n| n.level == "error").count()
    }

    /// The default user of a user crontab: its file name under `…/crontabs/` or `…/cron/`.
    fn owner(file: &Path) -> Option<String> {
        let parent = file.parent()?.file_name()?.to_str()?;
        matches!(parent, "crontabs" | "cron" | "tabs")
            .then(|| file.file_name()?.to_str().map(str::to_string))?
    }

    pub fn add_file(&mut self, file: &Path, text: &str, system: bool) {
        let mut env = Env::new();
        let owner = if system { None } else { Self::owner(file) };
        let mut redacted = format!(
            "# Rewritten by `madeira crontab import` from {}: each job reports through the local sidecar.\nMADEIRA_SIDECAR={}\n",
            file.display(),
            self.options.sidecar
        );
        let mut with_secrets = redacted.clone();
        for (i, raw) in text.lines().enumerate() {
            let no = i + 1;
            let (printed, real) = match parse::line(raw, system) {
                Line::Blank | Line::Comment(_) => (raw.to_string(), raw.to_string()),
                Line::Env { name, value } => self.env_line(file, no, raw, &name, &value, &mut env),
                Line::Job(mut entry) => {
                    if let Some(new) = self.overrides.get(&(file.to_path_buf(), no)) {
                        entry.schedule = new.clone();
                    }
                    match self.job(file, no, &entry, &env, owner.as_deref()) {
                        Ok(line) => (line.clone(), line),
                        Err(why) => {
                            self.note(file, no, "error", format!("not translated, kept as it was: {why}"));
                            let kept = format!("# madeira: line {no} not translated: {why}\n{raw}");
                            (kept.clone(), kept)
                        }
                    }
                }
                Line::Disabled(entry) => {
                    let line = format!("# {}", self.wrap(&entry, &self.job_name_preview(&entry), &env));
                    self.note(
                        file,
                        no,
                        "info",
                        "commented-out job: kept commented (wrapped), no flow or job made",
                    );
                    (line.clone(), line)
                }
                Line::Bad(why) => {
                    self.note(file, no, "error", format!("not translated, kept as it was: {why}"));
                    (raw.to_string(), raw.to_string())
                }
            };
            redacted.push_str(&printed);
            redacted.push('\n');
            with_secrets.push_str(&real);
            with_secrets.push('\n');
        }
        self.crontabs.push(Rewritten { source: file.to_path_buf(), redacted, with_secrets });
    }

    fn env_line(
        &mut self,
        file: &Path,
        no: usize,
        raw: &str,
        name: &str,
        value: &str,
        env: &mut Env,
    ) -> (String, String) {
        env.set(name, value);
        match name {
            "MAILTO" => self.note(
                file,
                no,
                "info",
                format!(
                    "MAILTO={value}: cron still mails the output; the sidecar keeps it in `madeira logs`"
                ),
            ),
            "CRON_TZ" | "TZ" if madeira_core::spec::parse_timezone(value).is_err() => self.note(
                file,
                no,
                "warning",
                format!("{name}={value} is not an IANA timezone; schedules use {}", self.options.timezone),
            ),
            _ => {}
        }
        if is_secret(name, value) {
            self.note(
                file,
                no,
                "warning",
                format!(
                    "{name} looks like a secret: its value is not echoed; set it in the sidecar job's env"
                ),
            );
            (format!("{name}=<redacted>"), raw.to_string())
        } else {
            (raw.to_string(), raw.to_string())
        }
    }

    fn job_name_preview(&self, entry: &Entry) -> String {
        derive_name(&entry.command)
    }

    fn unique_name(&mut self, entry: &Entry) -> String {
        let base = derive_name(&entry.command);
        let mut name = base.clone();
        let mut n = 2;
        while !self.names.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        name
    }

    /// The wrapped line: same schedule (and user), `madeira exec` around the shell.
    fn wrap(&self, entry: &Entry, name: &str, env: &Env) -> String {
        let shell = env.get("SHELL").unwrap_or("/bin/sh");
        let user = entry.user.as_deref().map(|u| format!(" {u}")).unwrap_or_default();
        format!(
            "{}{user} {} exec --job {name} -- {shell} -c {}{}",
            entry.schedule,
            self.options.madeira,
            shell_quote(entry.raw_command.trim_end()),
            entry.raw_stdin
        )
    }

    /// Translates one job: its sidecar job, its flow, its wrapped line.
    fn job(
        &mut self,
        file: &Path,
        no: usize,
        entry: &Entry,
        env: &Env,
        owner: Option<&str>,
    ) -> Result<String, String> {
        let timezone = env
            .get("CRON_TZ")
            .or_else(|| env.get("TZ"))
            .filter(|tz| madeira_core::spec::parse_timezone(tz).is_ok())
            .unwrap_or(&self.options.timezone)
            .to_string();
        let cron = (entry.schedule != "@reboot").then(|| entry.schedule.clone());
        if let Some(expr) = &cron {
            madeira_core::spec::parse_cron(expr)?;
        }
        let name = self.unique_name(entry);
        let user = entry.user.as_deref().or(owner);
        let body = job_yaml(file, no, entry, env, user);
        self.jobs.insert(name.clone(), body);
        let flow = flow_name_for(&name);
        let grace = self.options.grace.clone();
        let yaml = observed_flow_yaml(
            &flow,
            &name,
            &self.options.group,
            cron.as_deref().map(|c| (c, timezone.as_str(), grace.as_str())),
        );
        let yaml = format!("# from {}:{no}\n{yaml}", file.display());
        if let Err(e) = madeira_core::spec::parse_flow(&format!("{flow}.yaml"), &yaml) {
            return Err(format!("the generated flow does not validate: {e}"));
        }
        self.flows.push((flow, yaml));
        if let Some(schedule) = &cron {
            self.planned.push(super::stampede::Planned {
                file: file.to_path_buf(),
                line: no,
                name: name.clone(),
                schedule: schedule.clone(),
                timezone: timezone.clone(),
            });
        }
        if cron.is_none() {
            self.note(
                file,
                no,
                "info",
                "@reboot: observed when it runs; there is no schedule to check for missed runs",
            );
        }
        if user.is_none() {
            self.note(file, no, "info", "no user known for this user crontab: the sidecar job runs as the sidecar's user (add `user:`)");
        }
        Ok(self.wrap(entry, &name, env))
    }
}

fn job_yaml(file: &Path, no: usize, entry: &Entry, env: &Env, user: Option<&str>) -> String {
    let shell = env.get("SHELL").unwrap_or("/bin/sh");
    let mut out = format!("    # from {}:{no}\n", file.display());
    out.push_str(&format!("    command: [{}, \"-c\", {}]\n", quote(shell), quote(&entry.command)));
    out.push_str("    clear_env: true\n");
    let vars: Vec<String> = env
        .vars
        .iter()
        .filter(|(n, _)| !matches!(n.as_str(), "MAILTO" | "CRON_TZ" | "MADEIRA_SIDECAR"))
        .map(|(n, v)| {
            let v = if is_secret(n, v) { format!("<secret: set {n} here>") } else { v.clone() };
            format!("{}: {}", quote(n), quote(&v))
        })
        .collect();
    out.push_str(&format!("    env: {{{}}}\n", vars.join(", ")));
    if let Some(user) = user {
        out.push_str(&format!("    user: {}\n", quote(user)));
    }
    if let Some(stdin) = &entry.stdin {
        out.push_str(&format!("    stdin: {}\n", quote(stdin)));
    }
    out
}

impl Import {
    pub fn jobs_yaml(&self) -> String {
        let mut out = format!(
            "# sidecar jobs for group `{}` (the `jobs:` map of the sidecar config)\njobs:\n",
            self.options.group
        );
        for (name, body) in &self.jobs {
            out.push_str(&format!("  {name}:\n{body}"));
        }
        out
    }

    /// Everything as one printable text (secrets redacted).
    pub fn text(&self) -> String {
        let mut out = String::from("# ===== observe-mode flows (madeira apply -f) =====\n");
        for (_, yaml) in &self.flows {
            out.push_str("---\n");
            out.push_str(yaml);
        }
        out.push_str("\n# ===== sidecar jobs =====\n");
        out.push_str(&self.jobs_yaml());
        for c in &self.crontabs {
            out.push_str(&format!("\n# ===== rewritten crontab: {} =====\n", c.source.display()));
            out.push_str(&c.redacted);
        }
        out
    }
}

/// A job name from a command: the script it runs (`./settle.sh`, `php /var/www/cron.php`
/// → `settle`, `cron`), else the program and its first argument (`find /tmp …` →
/// `find-tmp`), skipping `cd DIR &&`, `VAR=value`, `nice`/`ionice`/`env`/`sudo`
/// prefixes, flags and redirections.
pub fn derive_name(command: &str) -> String {
    const SKIP: &[&str] = &[
        "cd", "&&", "||", ";", "nice", "ionice", "env", "sudo", "exec", "timeout", "flock", "test", "[", "-c",
    ];
    const INTERPRETERS: &[&str] =
        &["sh", "bash", "dash", "zsh", "python", "python2", "python3", "perl", "php", "ruby", "node"];
    let mut words = Vec::new();
    let mut tokens = command.split_whitespace().peekable();
    while let Some(w) = tokens.next() {
        if w == "cd" {
            tokens.next();
            continue;
        }
        if ["|", "&&", "||", ";"].contains(&w) && !words.is_empty() {
            break;
        }
        let skip = SKIP.contains(&w)
            || w.contains('=')
            || w.starts_with('-')
            || w.contains(['>', '<', '$', '`'])
            || w.chars().all(|c| c.is_ascii_digit());
        if !skip {
            words.push(w.trim_matches(['"', '\'', ';']));
        }
    }
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let script = words.iter().enumerate().find(|(i, w)| is_script(w, *i == 0));
    let picked = match script {
        Some((_, script)) => base(script),
        None => match words.as_slice() {
            [] => "job".to_string(),
            [program, arg, ..] if INTERPRETERS.contains(&base(program).as_str()) => base(arg),
            [program, arg, ..] if base(arg).starts_with(&base(program)) => base(arg),
            [program, arg, ..] => format!("{}-{}", base(program), base(arg)),
            [program, ..] => base(program),
        },
    };
    let stem = SCRIPT_EXTENSIONS
        .iter()
        .find_map(|ext| picked.strip_suffix(ext).and_then(|s| s.strip_suffix('.')))
        .unwrap_or(&picked);
    let mut name = String::new();
    for c in stem.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }) {
        if !(c == '-' && (name.is_empty() || name.ends_with('-'))) && name.len() < 40 {
            name.push(c);
        }
    }
    let name = name.trim_end_matches('-').to_string();
    if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        format!("job-{name}").trim_end_matches('-').to_string()
    } else {
        name
    }
}

const SCRIPT_EXTENSIONS: &[&str] = &["sh", "bash", "py", "pl", "rb", "php", "js"];

/// A word naming a script of the host's own: `./x`, a file with a script
/// extension, or (as the program) a path outside the system's directories.
fn is_script(word: &str, program: bool) -> bool {
    const SYSTEM: &[&str] = &["/bin/", "/sbin/", "/usr/bin/", "/usr/sbin/"];
    let has_ext = SCRIPT_EXTENSIONS.iter().any(|ext| word.rsplit_once('.').is_some_and(|(_, e)| e == *ext));
    word.starts_with("./")
        || has_ext
        || (program
            && word.starts_with('/')
            && !SYSTEM.iter().any(|dir| word.starts_with(dir))
            && !word.starts_with("/etc/"))
}
