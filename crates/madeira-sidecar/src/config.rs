//! The sidecar's config (SPEC §4): who it is, where the control plane is, and the
//! `jobs:` map — the only commands this sidecar will ever run. The same map is what
//! `madeira dev --jobs FILE` reads. Read once, validated, then passed explicitly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::access::{self, ExecPolicy, ObserveRule};
use crate::template::Template;
use crate::tls::{LinkTls, TlsSection};

/// Default `grace` between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// A config problem, naming the file and the field.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

/// The file as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SidecarConfig {
    /// Default: the host name.
    pub name: Option<String>,
    pub group: Option<String>,
    /// gRPC endpoint of the control plane, e.g. `http://madeira.internal:7071`.
    pub control_plane: Option<String>,
    pub token_file: Option<PathBuf>,
    pub token_env: Option<String>,
    /// Serve `/metrics` here.
    pub metrics: Option<String>,
    /// Undelivered reports are kept here.
    pub spool_dir: Option<PathBuf>,
    /// Unix socket `madeira exec` reports through (default `SPOOL_DIR/sidecar.sock`).
    pub socket: Option<PathBuf>,
    /// How long running jobs may finish on shutdown before they get SIGTERM.
    pub shutdown_grace: Option<String>,
    /// Group given to the exec socket (0660); its members may report through it.
    pub exec_group: Option<String>,
    /// Users (names or uids) that may report besides root and the sidecar's own.
    #[serde(default)]
    pub exec_users: Vec<String>,
    /// Flows `madeira exec` may report to: names, or prefixes ending in `*`
    /// (default: the flows named after the declared jobs).
    pub observe: Option<Vec<String>>,
    /// Most distinct observe flows this sidecar reports to (default 100).
    pub observe_max_flows: Option<usize>,
    /// TLS for an `https://` control plane: the CA to trust, and a client
    /// certificate for mTLS.
    pub tls: Option<TlsSection>,
    #[serde(default)]
    pub jobs: BTreeMap<String, JobConfig>,
}

/// One declared job as written.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// argv; `{{ params.x }}` placeholders become single arguments.
    pub command: Vec<String>,
    pub workdir: Option<PathBuf>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Start from an empty environment (crontab semantics) instead of the sidecar's.
    #[serde(default)]
    pub clear_env: bool,
    /// Run as this user (the sidecar must be root to switch).
    pub user: Option<String>,
    /// Text fed to the job's stdin (a crontab line's `%` part); default: none.
    pub stdin: Option<String>,
    pub timeout: Option<String>,
    pub grace: Option<String>,
    pub max_concurrency: Option<u32>,
}

/// A validated job.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub name: String,
    pub command: Vec<Template>,
    pub workdir: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    pub clear_env: bool,
    pub user: Option<String>,
    pub stdin: Option<String>,
    pub timeout: Option<Duration>,
    pub grace: Duration,
    /// 0 = unlimited.
    pub max_concurrency: u32,
}

impl SidecarConfig {
    /// Reads and parses `path` (YAML).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError { file: file.clone(), message: format!("cannot read: {e}") })?;
        Self::parse(&file, &text)
    }

    pub fn parse(file: &str, text: &str) -> Result<Self, ConfigError> {
        serde_saphyr::from_str(text)
            .map_err(|e| ConfigError { file: file.to_string(), message: e.to_string() })
    }

    /// The validated jobs, by name.
    pub fn jobs(&self, file: &str) -> Result<BTreeMap<String, JobSpec>, ConfigError> {
        let mut out = BTreeMap::new();
        for (name, job) in &self.jobs {
            let spec = job.validate(name).map_err(|message| ConfigError {
                file: file.to_string(),
                message: format!("jobs.{name}: {message}"),
            })?;
            out.insert(name.clone(), spec);
        }
        Ok(out)
    }

    /// The link's TLS: `None` for `http://`; for `https://` the files of `tls:`
    /// (or the system roots without it).
    pub fn link_tls(&self, file: &str, endpoint: &str) -> Result<Option<LinkTls>, ConfigError> {
        let err = |message: String| ConfigError { file: file.to_string(), message };
        match (endpoint.starts_with("https://"), &self.tls) {
            (true, Some(section)) => LinkTls::load(section).map(Some).map_err(err),
            (true, None) => Ok(Some(LinkTls::system_roots())),
            (false, None) => Ok(None),
            (false, Some(_)) => Err(err(format!(
                "tls: is set but control_plane `{endpoint}` is not https://; use https:// to turn TLS on"
            ))),
        }
    }

    /// The exec socket's policy: users and groups resolved, the observe list.
    pub fn exec_policy(&self, file: &str) -> Result<ExecPolicy, ConfigError> {
        let err = |message: String| ConfigError { file: file.to_string(), message };
        let uids = self
            .exec_users
            .iter()
            .map(|u| access::resolve_user(u).map_err(|e| err(format!("exec_users: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let gid = match &self.exec_group {
            Some(g) => Some(access::resolve_group(g).map_err(|e| err(format!("exec_group: {e}")))?),
            None => None,
        };
        let observe = match &self.observe {
            Some(list) => list.iter().map(|r| ObserveRule::parse(r)).collect(),
            None => self.jobs.keys().map(|j| ObserveRule::Exact(access::flow_name(j))).collect(),
        };
        Ok(ExecPolicy {
            uids,
            gids: gid.into_iter().collect(),
            socket_gid: gid,
            observe,
            max_flows: self.observe_max_flows.unwrap_or(access::DEFAULT_MAX_OBSERVE_FLOWS),
        })
    }

    pub fn shutdown_grace(&self, file: &str) -> Result<Duration, ConfigError> {
        duration(file, "shutdown_grace", self.shutdown_grace.as_deref(), Duration::from_secs(30))
    }
}

fn duration(file: &str, field: &str, text: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
    match text {
        None => Ok(default),
        Some(t) => madeira_core::spec::parse_duration(t)
            .map_err(|e| ConfigError { file: file.to_string(), message: format!("{field}: {e}") }),
    }
}

impl JobConfig {
    fn validate(&self, name: &str) -> Result<JobSpec, String> {
        if !valid_name(name) {
            return Err("job names use letters, digits, `-`, `_` and `.` only".into());
        }
        if self.command.is_empty() || self.command[0].trim().is_empty() {
            return Err("`command` needs at least the program, e.g. `[\"/usr/bin/env\", \"true\"]`".into());
        }
        let command = self
            .command
            .iter()
            .enumerate()
            .map(|(i, arg)| Template::parse(arg).map_err(|e| format!("command[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        if !command[0].is_literal() {
            return Err("command[0] (the program) cannot be templated".into());
        }
        let parse = |field: &str, text: &Option<String>| -> Result<Option<Duration>, String> {
            text.as_deref()
                .map(|t| madeira_core::spec::parse_duration(t).map_err(|e| format!("{field}: {e}")))
                .transpose()
        };
        if let Some(key) = self.env.keys().find(|k| k.is_empty() || k.contains('=') || k.contains('\0')) {
            return Err(format!("env: `{key}` is not a valid variable name"));
        }
        Ok(JobSpec {
            name: name.to_string(),
            command,
            workdir: self.workdir.clone(),
            env: self.env.clone(),
            clear_env: self.clear_env,
            user: self.user.clone(),
            stdin: self.stdin.clone(),
            timeout: parse("timeout", &self.timeout)?,
            grace: parse("grace", &self.grace)?.unwrap_or(DEFAULT_GRACE),
            max_concurrency: self.max_concurrency.unwrap_or(0),
        })
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The host name, for a sidecar without `name`.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "sidecar".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spec_example() {
        let text = r#"
name: billing-01
group: billing
control_plane: http://madeira.internal:7071
token_file: /etc/madeira/billing.token
metrics: 127.0.0.1:9464
spool_dir: /var/lib/madeira/spool
jobs:
  pull-payments:
    command: ["/opt/billing/bin/pull_payments.sh", "--date", "{{ params.date }}"]
    workdir: /opt/billing
    env: {TZ: Asia/Shanghai}
    timeout: 30m
    grace: 30s
    max_concurrency: 2
"#;
        let config = SidecarConfig::parse("s.yaml", text).expect("parses");
        let jobs = config.jobs("s.yaml").expect("valid");
        let job = &jobs["pull-payments"];
        assert_eq!(job.timeout, Some(Duration::from_secs(1800)));
        assert_eq!(job.grace, Duration::from_secs(30));
        assert_eq!(job.max_concurrency, 2);
        assert_eq!(job.command.len(), 3);
    }

    #[test]
    fn rejects_an_empty_command_and_a_templated_program() {
        let bad = SidecarConfig::parse("s.yaml", "jobs:\n  a: {command: []}\n").expect("parses");
        let err = bad.jobs("s.yaml").expect_err("refused").to_string();
        assert!(err.contains("jobs.a: `command` needs"), "{err}");
        let bad =
            SidecarConfig::parse("s.yaml", "jobs:\n  a: {command: [\"{{ params.p }}\"]}\n").expect("parses");
        let err = bad.jobs("s.yaml").expect_err("refused").to_string();
        assert!(err.contains("cannot be templated"), "{err}");
    }
}
