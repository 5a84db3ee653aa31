//! `sources:` in the server config: a name, a type and where the URL comes from
//! (`url_env` or `url_file`; never the config text, never logged).

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    Rabbitmq,
    Nats,
    RedisStreams,
}

impl SourceKind {
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Rabbitmq => "rabbitmq",
            SourceKind::Nats => "nats",
            SourceKind::RedisStreams => "redis_streams",
        }
    }
}

/// One `sources:` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: SourceKind,
    pub url_env: Option<String>,
    pub url_file: Option<PathBuf>,
}

/// A source with its URL resolved. `Debug` hides the URL (it may hold a password).
#[derive(Clone)]
pub struct SourceConfig {
    pub name: String,
    pub kind: SourceKind,
    pub url: String,
}

impl fmt::Debug for SourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceConfig")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Why a `sources:` entry cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("sources: {0}")]
pub struct ConfigProblem(pub String);

impl SourceSpec {
    /// Resolves the URL from the environment or the file (at most 4 KiB), checking its scheme.
    pub fn resolve(&self) -> Result<SourceConfig, ConfigProblem> {
        let name = self.name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(ConfigProblem(format!(
                "source name `{}` must be letters, digits, `-`, `_` or `.`",
                self.name
            )));
        }
        let url = match (&self.url_env, &self.url_file) {
            (Some(var), None) => std::env::var(var).map_err(|_| {
                ConfigProblem(format!("source {name}: environment variable {var} is not set"))
            })?,
            (None, Some(path)) => read_small(path)
                .map_err(|e| ConfigProblem(format!("source {name}: url_file {}: {e}", path.display())))?,
            _ => {
                return Err(ConfigProblem(format!("source {name}: give exactly one of url_env or url_file")));
            }
        };
        let url = url.trim().to_string();
        let schemes: &[&str] = match self.kind {
            SourceKind::Rabbitmq => &["amqp://", "amqps://"],
            SourceKind::Nats => &["nats://", "tls://"],
            SourceKind::RedisStreams => &["redis://", "rediss://"],
        };
        if !schemes.iter().any(|s| url.starts_with(s)) {
            return Err(ConfigProblem(format!(
                "source {name}: a {} URL starts with {}",
                self.kind.name(),
                schemes.join(" or ")
            )));
        }
        Ok(SourceConfig { name: name.to_string(), kind: self.kind, url })
    }
}

fn read_small(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?.take(4096).read_to_string(&mut text)?;
    Ok(text)
}

/// Resolves every entry; names must be distinct.
pub fn resolve_all(specs: &[SourceSpec]) -> Result<Vec<SourceConfig>, ConfigProblem> {
    let mut out: Vec<SourceConfig> = Vec::new();
    for spec in specs {
        let config = spec.resolve()?;
        if out.iter().any(|c| c.name == config.name) {
            return Err(ConfigProblem(format!("source {} is named twice", config.name)));
        }
        out.push(config);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_comes_from_a_file_and_is_never_printed() {
        let dir = std::env::temp_dir().join(format!("madeira-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("url");
        std::fs::write(&file, "amqp://user:secret@host:5672/%2f\n").expect("write");
        let spec = SourceSpec {
            name: "payments".into(),
            kind: SourceKind::Rabbitmq,
            url_env: None,
            url_file: Some(file),
        };
        let config = spec.resolve().expect("resolves");
        assert_eq!(config.url, "amqp://user:secret@host:5672/%2f");
        assert!(!format!("{config:?}").contains("secret"));
        let wrong = SourceSpec { kind: SourceKind::Nats, ..spec.clone() };
        assert!(wrong.resolve().expect_err("scheme").0.contains("nats://"));
        let both = SourceSpec { url_env: Some("X".into()), ..spec.clone() };
        assert!(both.resolve().is_err());
        assert!(resolve_all(&[spec.clone(), spec]).expect_err("twice").0.contains("twice"));
    }
}
