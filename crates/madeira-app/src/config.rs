//! Server config (SPEC §10): defaults, then the YAML file, then `MADEIRA_*` env,
//! then flags; `validate` before any port is bound. Secrets come from env or files
//! named in the config, never from the config text itself.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use madeira_engine::HttpPolicy;
use madeira_server::{AuthConfig, Role, TokenEntry};
use serde::Deserialize;

pub use crate::error::ConfigError;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub http: Option<String>,
    pub grpc: Option<String>,
    pub store: Option<String>,
    pub redis: Option<String>,
    pub flows: Option<PathBuf>,
    /// How long finished runs are kept (default 30d).
    pub retention: Option<String>,
    /// How long after a run finishes its nodes, attempts, outputs and transitions
    /// are folded into one compressed archive row (default 5m; `off`: never).
    pub archive_after: Option<String>,
    /// This replica's name (env `MADEIRA_REPLICA_ID`; default: the host name).
    /// Replicas sharing a store need distinct names.
    pub replica_id: Option<String>,
    /// How long a replica's hold on its runs lasts without renewal (default 15s):
    /// a killed replica's runs are taken over after this.
    pub lease: Option<String>,
    #[serde(default)]
    pub auth: AuthSection,
    #[serde(default)]
    pub http_executor: HttpPolicy,
    /// Alert channels and routes (SPEC §7).
    #[serde(default)]
    pub alerts: madeira_alert::AlertsConfig,
    /// A sidecar silent this long is lost and its attempts move (default 30s).
    pub sidecar_lost_after: Option<String>,
    /// Most distinct observe flows the `madeira exec` reports of one sidecar
    /// group may create or record into (default 100); a sidecar's own
    /// `observe_max_flows` may only lower it.
    pub observe_max_flows: Option<usize>,
    /// On SIGTERM, how long in-process (http, builtin) attempts may still finish
    /// (default 30s); sidecar attempts are never cancelled by a shutdown.
    pub shutdown_grace: Option<String>,
    /// Live output kept per running sidecar attempt, in bytes (default 1 MiB).
    pub live_log_bytes: Option<usize>,
    /// HTTPS on the `http:` listener.
    pub tls: Option<crate::tls::HttpTls>,
    /// TLS on the sidecar link; `client_ca_file` makes it mTLS.
    pub grpc_tls: Option<crate::tls::GrpcTls>,
    /// Message brokers flows' `message:` triggers consume (SPEC §6.1).
    #[serde(default)]
    pub sources: Vec<madeira_sources::config::SourceSpec>,
    /// SQL datasources for `run: {sql: …}` nodes (SPEC §4.2).
    #[serde(default)]
    pub datasources: Vec<DatasourceSpec>,
    /// Business-day calendars cron triggers and CEL date functions may name, added
    /// to the built-in ones (`docs/business-dates.md`).
    #[serde(default)]
    pub calendars: Vec<madeira_calendar::CalendarDef>,
    /// XXL-JOB executors: admin prefix and per-app tokens (SPEC §14).
    pub xxl_job: Option<crate::xxl::XxlJobSection>,
}

/// One `datasources:` entry; the URL comes from env or a file, never the config text.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasourceSpec {
    pub name: String,
    pub url_env: Option<String>,
    pub url_file: Option<PathBuf>,
    /// Pool size, and so the limit of concurrent statements (default 4).
    pub max_connections: Option<u32>,
    /// Statements run in read-only transactions.
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    #[serde(default)]
    pub tokens: Vec<TokenSpec>,
    /// One token per sidecar group (SPEC §10).
    #[serde(default)]
    pub sidecar_tokens: Vec<SidecarTokenSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarTokenSpec {
    pub group: String,
    pub token_env: Option<String>,
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    pub name: String,
    pub role: Role,
    pub token_env: Option<String>,
    pub token_file: Option<PathBuf>,
    /// Flow labels this token is limited to (`scope: {team: finance}`); ignored for admin.
    #[serde(default)]
    pub scope: Option<std::collections::BTreeMap<String, String>>,
}

impl ServerConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = crate::files::read_text(path, crate::files::Confine::Anywhere)
            .map_err(|e| ConfigError { file: file.clone(), message: e.problem.to_string() })?;
        let mut config: ServerConfig = serde_saphyr::from_str(&text)
            .map_err(|e| ConfigError { file: file.clone(), message: e.to_string() })?;
        if let Ok(store) = std::env::var("MADEIRA_STORE") {
            config.store = Some(store);
        }
        if let Ok(redis) = std::env::var("MADEIRA_REDIS") {
            config.redis = Some(redis);
        }
        if let Ok(id) = std::env::var("MADEIRA_REPLICA_ID") {
            config.replica_id = Some(id);
        }
        Ok(config)
    }

    /// The message sources with their URLs resolved from env or file.
    pub fn sources(&self, file: &str) -> Result<Vec<madeira_sources::SourceConfig>, ConfigError> {
        madeira_sources::config::resolve_all(&self.sources)
            .map_err(|e| ConfigError { file: file.to_string(), message: e.to_string() })
    }

    pub fn retention(&self, file: &str) -> Result<Duration, ConfigError> {
        match &self.retention {
            None => Ok(Duration::from_secs(30 * 24 * 3600)),
            Some(text) => madeira_core::spec::parse_duration(text).map_err(|message| ConfigError {
                file: file.to_string(),
                message: format!("retention: {message}"),
            }),
        }
    }

    /// `archive_after`: `None` for `off`.
    pub fn archive_after(&self, file: &str) -> Result<Option<Duration>, ConfigError> {
        match self.archive_after.as_deref().map(str::trim) {
            None => Ok(Some(Duration::from_secs(300))),
            Some("off") => Ok(None),
            Some(text) => madeira_core::spec::parse_duration(text).map(Some).map_err(|message| ConfigError {
                file: file.to_string(),
                message: format!("archive_after: {message}"),
            }),
        }
    }

    /// The replica's name: configured, else the host name.
    pub fn replica_id(&self) -> String {
        if let Some(id) = self.replica_id.as_deref().map(str::trim).filter(|id| !id.is_empty()) {
            return id.to_string();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "madeira".to_string())
    }

    /// The Redis URL for cross-replica wake-ups, checked (`redis://` or `rediss://`).
    pub fn redis_url(&self, file: &str) -> Result<Option<String>, ConfigError> {
        match self.redis.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
            None => Ok(None),
            Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => {
                Ok(Some(url.to_string()))
            }
            Some(_) => Err(ConfigError {
                file: file.to_string(),
                message: "redis: give a URL like redis://cache.internal:6379/0 (or MADEIRA_REDIS)".into(),
            }),
        }
    }

    pub fn lease(&self, file: &str) -> Result<Duration, ConfigError> {
        let err =
            |message: String| ConfigError { file: file.to_string(), message: format!("lease: {message}") };
        let lease = match &self.lease {
            None => return Ok(Duration::from_secs(15)),
            Some(text) => madeira_core::spec::parse_duration(text).map_err(err)?,
        };
        if lease < Duration::from_millis(300) {
            return Err(err(format!("{lease:?} is too short; use at least 300ms (default 15s)")));
        }
        Ok(lease)
    }

    /// The `alerts:` section, with its secrets read from env and files.
    pub fn alerts(&self, file: &str) -> Result<madeira_alert::Settings, ConfigError> {
        self.alerts
            .resolve(&|name| std::env::var(name).ok())
            .map_err(|e| ConfigError { file: file.to_string(), message: e.to_string() })
    }

    /// The HTTP listen address, checked.
    pub fn http_addr(&self, file: &str, default: &str) -> Result<SocketAddr, ConfigError> {
        let text = self.http.as_deref().unwrap_or(default);
        text.parse().map_err(|e| ConfigError {
            file: file.to_string(),
            message: format!("http: `{text}` is not an address like 0.0.0.0:7070 ({e})"),
        })
    }

    /// `sidecar_lost_after`, default 30s.
    pub fn sidecar_lost_after(&self, file: &str) -> Result<Duration, ConfigError> {
        match &self.sidecar_lost_after {
            None => Ok(Duration::from_secs(30)),
            Some(text) => madeira_core::spec::parse_duration(text).map_err(|message| ConfigError {
                file: file.to_string(),
                message: format!("sidecar_lost_after: {message}"),
            }),
        }
    }

    /// `shutdown_grace`, default 30s.
    pub fn shutdown_grace(&self, file: &str) -> Result<Duration, ConfigError> {
        match &self.shutdown_grace {
            None => Ok(Duration::from_secs(30)),
            Some(text) => madeira_core::spec::parse_duration(text).map_err(|message| ConfigError {
                file: file.to_string(),
                message: format!("shutdown_grace: {message}"),
            }),
        }
    }

    /// The gRPC listen address for sidecars, checked.
    pub fn grpc_addr(&self, file: &str, default: &str) -> Result<SocketAddr, ConfigError> {
        let text = self.grpc.as_deref().unwrap_or(default);
        text.parse().map_err(|e| ConfigError {
            file: file.to_string(),
            message: format!("grpc: `{text}` is not an address like 0.0.0.0:7071 ({e})"),
        })
    }

    /// The API's TLS config from `tls:`, files read and checked (`None`: plain HTTP).
    pub fn http_tls(&self, file: &str) -> Result<Option<Arc<rustls::ServerConfig>>, ConfigError> {
        let err = |message| ConfigError { file: file.to_string(), message };
        self.tls.as_ref().map(crate::tls::http_config).transpose().map_err(err)
    }

    /// The sidecar link's TLS config from `grpc_tls:` (`None`: plain gRPC).
    pub fn grpc_tls(&self, file: &str) -> Result<Option<Arc<rustls::ServerConfig>>, ConfigError> {
        let err = |message| ConfigError { file: file.to_string(), message };
        self.grpc_tls.as_ref().map(crate::tls::grpc_config).transpose().map_err(err)
    }

    /// The `datasources:` with their URLs read from env or files; errors name the
    /// entry and the variable or file, never the URL.
    pub fn datasources(&self, file: &str) -> Result<Vec<madeira_sql::DatasourceConfig>, ConfigError> {
        let err = |message: String| ConfigError { file: file.to_string(), message };
        let mut out: Vec<madeira_sql::DatasourceConfig> = Vec::new();
        for spec in &self.datasources {
            let name = spec.name.trim();
            let valid = !name.is_empty()
                && name.len() <= 63
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid {
                return Err(err(format!(
                    "datasources: name `{name}` must be 1 to 63 characters of letters, digits, `_` and `-`"
                )));
            }
            if out.iter().any(|d| d.name == name) {
                return Err(err(format!("datasources: `{name}` is listed twice")));
            }
            let url = match (&spec.url_env, &spec.url_file) {
                (Some(var), None) => std::env::var(var)
                    .map_err(|_| err(format!("datasources `{name}`: env variable {var} is not set")))?,
                (None, Some(path)) => crate::files::read_text(path, crate::files::Confine::Anywhere)
                    .map_err(|e| err(format!("datasources `{name}`: {}: {}", path.display(), e.problem)))?,
                _ => {
                    return Err(err(format!(
                        "datasources `{name}`: give exactly one of url_env or url_file (the URL is a secret)"
                    )));
                }
            };
            let max_connections = spec.max_connections.unwrap_or(4);
            if max_connections == 0 {
                return Err(err(format!("datasources `{name}`: max_connections must be at least 1")));
            }
            out.push(madeira_sql::DatasourceConfig {
                name: name.to_string(),
                url: url.trim().to_string(),
                max_connections,
                read_only: spec.read_only,
            });
        }
        Ok(out)
    }

    /// The datasource names only (no URL is read): what `validate --config` checks.
    pub fn datasource_names(&self) -> Vec<String> {
        self.datasources.iter().map(|d| d.name.trim().to_string()).collect()
    }

    /// `(name, type)` of each message source, no URL read: what `validate --config`
    /// checks message triggers against.
    pub fn source_names(&self) -> Vec<(String, String)> {
        self.sources.iter().map(|s| (s.name.trim().to_string(), s.kind.name().to_string())).collect()
    }

    /// Sidecar group tokens, read from their env variables or files.
    pub fn sidecar_tokens(&self, file: &str) -> Result<Vec<madeira_fleet::GroupToken>, ConfigError> {
        let err = |message: String| ConfigError { file: file.to_string(), message };
        let mut out = Vec::new();
        for spec in &self.auth.sidecar_tokens {
            let token = match (&spec.token_env, &spec.token_file) {
                (Some(var), None) => std::env::var(var).map_err(|_| {
                    err(format!("auth.sidecar_tokens `{}`: env variable {var} is not set", spec.group))
                })?,
                (None, Some(path)) => crate::files::read_text(path, crate::files::Confine::Anywhere)
                    .map_err(|e| err(format!("auth.sidecar_tokens `{}`: {e}", spec.group)))?,
                _ => {
                    return Err(err(format!(
                        "auth.sidecar_tokens `{}`: give exactly one of token_env or token_file",
                        spec.group
                    )));
                }
            };
            let token = token.trim().to_string();
            if token.len() < 16 {
                return Err(err(format!(
                    "auth.sidecar_tokens `{}`: the token is shorter than 16 characters; use a random one",
                    spec.group
                )));
            }
            out.push(madeira_fleet::GroupToken { group: spec.group.clone(), token });
        }
        Ok(out)
    }

    /// Refuses a secret used by two entries of `auth.tokens` and
    /// `auth.sidecar_tokens`: the first match would win, so one of them could act
    /// as the other.
    pub fn distinct_secrets(
        file: &str,
        users: &AuthConfig,
        sidecars: &[madeira_fleet::GroupToken],
    ) -> Result<(), ConfigError> {
        let users = users.tokens.iter().flatten().map(|t| (format!("auth.tokens `{}`", t.name), &t.token));
        let groups = sidecars.iter().map(|t| (format!("auth.sidecar_tokens `{}`", t.group), &t.token));
        let mut seen: Vec<(String, &String)> = Vec::new();
        for (entry, secret) in users.chain(groups) {
            if let Some((first, _)) = seen.iter().find(|(_, s)| *s == secret) {
                return Err(ConfigError {
                    file: file.to_string(),
                    message: format!(
                        "{first} and {entry} have the same secret; give each entry its own token \
                         (e.g. `openssl rand -hex 32`)"
                    ),
                });
            }
            seen.push((entry, secret));
        }
        Ok(())
    }

    /// Bearer tokens read from their env variables or files; refuses an empty set.
    pub fn auth(&self, file: &str) -> Result<AuthConfig, ConfigError> {
        let err = |message: String| ConfigError { file: file.to_string(), message };
        if self.auth.tokens.is_empty() {
            return Err(err(
                "auth.tokens is empty: `serve` refuses to start without at least one token; add \
                 `auth: {tokens: [{name: sre, role: admin, token_env: MADEIRA_SRE_TOKEN}]}`"
                    .into(),
            ));
        }
        let mut entries = Vec::new();
        for spec in &self.auth.tokens {
            let token = match (&spec.token_env, &spec.token_file) {
                (Some(var), None) => std::env::var(var).map_err(|_| {
                    err(format!("auth.tokens `{}`: env variable {var} is not set", spec.name))
                })?,
                (None, Some(path)) => crate::files::read_text(path, crate::files::Confine::Anywhere)
                    .map_err(|e| err(format!("auth.tokens `{}`: {e}", spec.name)))?,
                _ => {
                    return Err(err(format!(
                        "auth.tokens `{}`: give exactly one of token_env or token_file",
                        spec.name
                    )));
                }
            };
            let token = token.trim().to_string();
            if token.len() < 16 {
                return Err(err(format!(
                    "auth.tokens `{}`: the token is shorter than 16 characters; use a random one \
                     (e.g. `openssl rand -hex 32`)",
                    spec.name
                )));
            }
            if spec.scope.as_ref().is_some_and(|s| s.is_empty()) {
                return Err(err(format!(
                    "auth.tokens `{}`: `scope` is empty; give flow labels (`scope: {{team: finance}}`) or leave it out",
                    spec.name
                )));
            }
            entries.push(TokenEntry {
                name: spec.name.clone(),
                role: spec.role,
                token,
                scope: spec.scope.clone(),
            });
        }
        Ok(AuthConfig { tokens: Some(entries) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> ServerConfig {
        serde_saphyr::from_str(yaml).expect("config")
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the code under test reads the real environment; this test alone uses the variable"
    )]
    fn datasources_read_their_url_from_env_and_never_echo_it() {
        let var = "MADEIRA_CONFIG_TEST_DS_URL";
        let c = config(&format!("datasources:\n  - {{name: finance, url_env: {var}, max_connections: 3}}\n"));
        let e = c.datasources("server.yaml").expect_err("unset env");
        assert_eq!(
            e.to_string(),
            format!("server.yaml: datasources `finance`: env variable {var} is not set")
        );
        // SAFETY: this test alone uses the variable; the process's other tests never read it.
        unsafe { std::env::set_var(var, " postgres://app:pw-xyz@db/finance\n") };
        let ds = c.datasources("server.yaml").expect("datasources");
        assert_eq!(
            (ds[0].name.as_str(), ds[0].url.as_str(), ds[0].max_connections),
            ("finance", "postgres://app:pw-xyz@db/finance", 3)
        );
        assert!(!format!("{ds:?}").contains("pw-xyz"));
        let both = config("datasources:\n  - {name: x, url_env: A, url_file: /b}\n");
        assert!(
            both.datasources("s")
                .expect_err("both")
                .to_string()
                .contains("exactly one of url_env or url_file")
        );
        let twice = config(&format!(
            "datasources:\n  - {{name: x, url_env: {var}}}\n  - {{name: x, url_env: {var}}}\n"
        ));
        assert!(twice.datasources("s").expect_err("twice").to_string().contains("listed twice"));
        let zero = config(&format!("datasources:\n  - {{name: x, url_env: {var}, max_connections: 0}}\n"));
        assert!(zero.datasources("s").expect_err("zero").to_string().contains("at least 1"));
        let inline: Result<ServerConfig, _> =
            serde_saphyr::from_str("datasources:\n  - {name: x, url: postgres://a}\n");
        assert!(inline.is_err(), "a URL in the config text is refused");
    }
}
