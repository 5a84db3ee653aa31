//! The `alerts:` section of the server config (SPEC §7) as written, and its
//! resolution into `Settings`: durations parsed, routes checked against channels,
//! secrets (robot URLs, signing secrets) read from env or files. Errors name the
//! channel and the field, never a secret's value.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use madeira_core::RetryPolicy;
use madeira_core::spec::parse_duration;
use serde::{Deserialize, Serialize};

use crate::model::Severity;
use crate::secret::{Scrubber, Secret};

/// A channel's `type:`: the receiver a message is shaped for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    Wecom,
    Dingtalk,
    Feishu,
    Webhook,
    Alertmanager,
}

impl ChannelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Wecom => "wecom",
            ChannelKind::Dingtalk => "dingtalk",
            ChannelKind::Feishu => "feishu",
            ChannelKind::Webhook => "webhook",
            ChannelKind::Alertmanager => "alertmanager",
        }
    }

    /// Whether one post carries any number of alerts (no digest text needed).
    pub fn batches(self) -> bool {
        self == ChannelKind::Alertmanager
    }
}

impl fmt::Display for ChannelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// How long an alert gathers related failures before it is sent (default 30s).
    pub group_wait: Option<String>,
    /// A firing alert that grew is announced again at most this often (default 5m;
    /// `0s`: never).
    pub group_interval: Option<String>,
    /// An unresolved critical alert is reminded this long after its last message
    /// (default 4h; `0s`: never).
    pub repeat_interval: Option<String>,
    /// How often firing alerts are sent again to Alertmanager (default 1m).
    pub resend_every: Option<String>,
    /// Base URL of the control plane for run links (default: its HTTP address).
    pub external_url: Option<String>,
    #[serde(default)]
    pub channels: Vec<ChannelConfig>,
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ChannelKind,
    /// The webhook URL inline; its key is a secret: prefer `url_env`/`url_file`.
    pub url: Option<Secret>,
    pub url_env: Option<String>,
    pub url_file: Option<PathBuf>,
    /// Signing secret (DingTalk, Feishu, webhook).
    pub secret_env: Option<String>,
    pub secret_file: Option<PathBuf>,
    /// Who to @mention on every message of this channel (user ids, mobiles, `@all`).
    #[serde(default)]
    pub mentions: Vec<String>,
    /// Posts allowed per window (default 20 per 1m, the robots' own limit).
    pub rate_limit: Option<RateLimitConfig>,
    /// Per-request timeout (default 10s).
    pub timeout: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    pub count: u32,
    pub per: String,
    /// Once only one post is left in the window, how long waiting messages gather
    /// into the digest that post carries (default 10s, at most `per`).
    pub digest_wait: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Flow labels that must all be equal (`flow` matches the flow name).
    #[serde(default, rename = "match")]
    pub matchers: BTreeMap<String, String>,
    /// Only alerts of these severities.
    pub severity: Option<OneOrMany<Severity>>,
    pub channels: Vec<String>,
    /// @mentions added for alerts taking this route.
    #[serde(default)]
    pub mentions: Vec<String>,
    /// Keep evaluating later routes after this one matched.
    #[serde(default, rename = "continue")]
    pub continue_matching: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

/// Default `rate_limit.digest_wait`.
const DEFAULT_DIGEST_WAIT: Duration = Duration::from_secs(10);

/// A resolved channel, ready to deliver to.
#[derive(Debug, Clone)]
pub struct ChannelSpec {
    pub name: String,
    pub kind: ChannelKind,
    pub url: Secret,
    pub secret: Option<Secret>,
    pub mentions: Vec<String>,
    pub rate_count: u32,
    pub rate_per: Duration,
    /// Once one post is left in the window: how long messages gather into its digest.
    pub digest_wait: Duration,
    pub timeout: Duration,
    pub scrubber: Scrubber,
}

/// A resolved route.
#[derive(Debug, Clone)]
pub struct Route {
    pub matchers: BTreeMap<String, String>,
    pub severities: Option<Vec<Severity>>,
    pub channels: Vec<String>,
    pub mentions: Vec<String>,
    pub continue_matching: bool,
}

/// Everything the alert component needs, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub group_wait: Duration,
    /// Updates of a firing alert that grew, at most this often (zero: none).
    pub group_interval: Duration,
    /// Reminders of an unresolved critical alert (zero: none).
    pub repeat_interval: Duration,
    pub resend_every: Duration,
    pub external_url: Option<String>,
    pub channels: Vec<ChannelSpec>,
    pub routes: Vec<Route>,
    /// Backoff between delivery attempts while a receiver fails.
    pub retry: RetryPolicy,
    /// A delivery still failing this long after it was created is given up.
    pub give_up_after: Duration,
    /// Resolved alerts older than this are pruned.
    pub retention: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            group_wait: Duration::from_secs(30),
            group_interval: Duration::from_secs(5 * 60),
            repeat_interval: Duration::from_secs(4 * 3600),
            resend_every: Duration::from_secs(60),
            external_url: None,
            channels: Vec::new(),
            routes: Vec::new(),
            retry: RetryPolicy {
                attempts: u32::MAX,
                backoff: Duration::from_secs(2),
                factor: 2.0,
                max_backoff: Duration::from_secs(60),
                jitter: Duration::from_secs(1),
                no_retry_exit_codes: Vec::new(),
            },
            give_up_after: Duration::from_secs(24 * 3600),
            retention: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// A problem in the `alerts:` section; the message never holds a secret.
#[derive(Debug, thiserror::Error)]
#[error("alerts: {0}")]
pub struct AlertConfigError(pub String);

impl AlertsConfig {
    /// Checks the section and reads its secrets through `env` (a variable's value
    /// by name) and the files it names.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, AlertConfigError> {
        let err = |m: String| AlertConfigError(m);
        let duration = |field: &str, text: &Option<String>, default: Duration| match text {
            None => Ok(default),
            Some(t) => parse_duration(t).map_err(|m| err(format!("{field}: {m}"))),
        };
        let defaults = Settings::default();
        let mut names = HashSet::new();
        let mut channels = Vec::new();
        for c in &self.channels {
            if !names.insert(c.name.clone()) {
                return Err(err(format!("channel `{}` is defined twice", c.name)));
            }
            channels.push(c.resolve(env)?);
        }
        let mut routes = Vec::new();
        for (i, r) in self.routes.iter().enumerate() {
            if let Some(unknown) = r.channels.iter().find(|c| !names.contains(*c)) {
                let known: Vec<_> = self.channels.iter().map(|c| c.name.as_str()).collect();
                return Err(err(format!(
                    "routes[{i}]: unknown channel `{unknown}`; channels are: {}",
                    known.join(", ")
                )));
            }
            routes.push(Route {
                matchers: r.matchers.clone(),
                severities: r.severity.clone().map(|s| match s {
                    OneOrMany::One(s) => vec![s],
                    OneOrMany::Many(v) => v,
                }),
                channels: r.channels.clone(),
                mentions: r.mentions.clone(),
                continue_matching: r.continue_matching,
            });
        }
        if let Some(url) = &self.external_url
            && reqwest::Url::parse(url).is_err()
        {
            return Err(err(format!("external_url `{url}` is not a URL like http://madeira.internal:7070")));
        }
        Ok(Settings {
            group_wait: duration("group_wait", &self.group_wait, defaults.group_wait)?,
            group_interval: duration("group_interval", &self.group_interval, defaults.group_interval)?,
            repeat_interval: duration("repeat_interval", &self.repeat_interval, defaults.repeat_interval)?,
            resend_every: duration("resend_every", &self.resend_every, defaults.resend_every)?,
            external_url: self.external_url.as_ref().map(|u| u.trim_end_matches('/').to_string()),
            channels,
            routes,
            ..defaults
        })
    }
}

impl ChannelConfig {
    fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<ChannelSpec, AlertConfigError> {
        let name = &self.name;
        let err = |m: String| AlertConfigError(format!("channel `{name}`: {m}"));
        let read = |what: &str, var: &Option<String>, file: &Option<PathBuf>| -> Result<Option<Secret>, _> {
            match (var, file) {
                (Some(var), None) => env(var)
                    .map(|v| Some(Secret::new(v.trim())))
                    .ok_or_else(|| err(format!("{what}_env: env variable {var} is not set"))),
                (None, Some(path)) => std::fs::read_to_string(path)
                    .map(|v| Some(Secret::new(v.trim())))
                    .map_err(|e| err(format!("{what}_file: cannot read {}: {}", path.display(), e.kind()))),
                (None, None) => Ok(None),
                (Some(_), Some(_)) => Err(err(format!("give one of {what}_env or {what}_file, not both"))),
            }
        };
        let from_env_or_file = read("url", &self.url_env, &self.url_file)?;
        let url = match (&self.url, from_env_or_file) {
            (Some(url), None) => url.clone(),
            (None, Some(url)) => url,
            _ => return Err(err("give exactly one of url, url_env or url_file".into())),
        };
        match reqwest::Url::parse(url.expose()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => return Err(err("the url is not an http(s) URL (value not shown: it is a secret)".into())),
        }
        let secret = read("secret", &self.secret_env, &self.secret_file)?;
        if secret.is_some() && matches!(self.kind, ChannelKind::Wecom | ChannelKind::Alertmanager) {
            return Err(err(format!("{} messages are not signed; remove secret_env/secret_file", self.kind)));
        }
        let (rate_count, rate_per) = match &self.rate_limit {
            None => (20, Duration::from_secs(60)),
            Some(r) if r.count == 0 => return Err(err("rate_limit.count must be at least 1".into())),
            Some(r) => (r.count, parse_duration(&r.per).map_err(|m| err(format!("rate_limit.per: {m}")))?),
        };
        let digest_wait = match self.rate_limit.as_ref().and_then(|r| r.digest_wait.as_ref()) {
            None => DEFAULT_DIGEST_WAIT.min(rate_per),
            Some(d) => {
                let d = parse_duration(d).map_err(|m| err(format!("rate_limit.digest_wait: {m}")))?;
                if d > rate_per {
                    return Err(err(format!(
                        "rate_limit.digest_wait ({}s) is longer than rate_limit.per ({}s): the digest \
                         would leave the window it is meant for",
                        d.as_secs(),
                        rate_per.as_secs()
                    )));
                }
                d
            }
        };
        let timeout = match &self.timeout {
            None => Duration::from_secs(10),
            Some(t) => parse_duration(t).map_err(|m| err(format!("timeout: {m}")))?,
        };
        Ok(ChannelSpec {
            name: name.clone(),
            kind: self.kind,
            scrubber: Scrubber::for_channel(&url, secret.as_ref()),
            url,
            secret,
            mentions: self.mentions.clone(),
            rate_count,
            rate_per,
            digest_wait,
            timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> AlertsConfig {
        serde_json::from_value(serde_json::from_str(yaml).expect("json")).expect("config")
    }

    #[test]
    fn resolves_secrets_from_env_and_checks_routes() {
        let config = parse(
            r#"{"group_wait": "2s", "channels": [
                {"name": "ding", "type": "dingtalk", "url_env": "DING_URL", "secret_env": "DING_SECRET"},
                {"name": "am", "type": "alertmanager", "url": "http://127.0.0.1:9093"}],
               "routes": [{"match": {"team": "fin"}, "severity": "critical", "channels": ["ding"]},
                          {"channels": ["am"]}]}"#,
        );
        let env = |k: &str| match k {
            "DING_URL" => Some("https://ding.example/robot/send?access_token=tok123456".to_string()),
            "DING_SECRET" => Some("SECabc\n".to_string()),
            _ => None,
        };
        let settings = config.resolve(&env).expect("resolve");
        assert_eq!(settings.group_wait, Duration::from_secs(2));
        assert_eq!(settings.channels[0].secret.as_ref().map(Secret::expose), Some("SECabc"));
        assert_eq!(settings.routes[0].severities, Some(vec![Severity::Critical]));
        assert_eq!(settings.channels[1].rate_count, 20);

        let missing = config.resolve(&|_| None).expect_err("env missing");
        assert!(missing.to_string().contains("DING_URL is not set"), "{missing}");
    }

    #[test]
    fn intervals_and_digest_wait_have_defaults_and_limits() {
        let defaults = parse(r#"{"channels": [{"name": "h", "type": "webhook", "url": "http://h/x"}]}"#);
        let settings = defaults.resolve(&|_| None).expect("resolve");
        assert_eq!(settings.group_interval, Duration::from_secs(300));
        assert_eq!(settings.repeat_interval, Duration::from_secs(4 * 3600));
        assert_eq!(settings.channels[0].digest_wait, Duration::from_secs(10));
        let set = parse(
            r#"{"group_interval": "1m", "repeat_interval": "0s", "channels": [{"name": "h",
                "type": "webhook", "url": "http://h/x", "rate_limit": {"count": 5, "per": "5s"}}]}"#,
        );
        let settings = set.resolve(&|_| None).expect("resolve");
        assert_eq!(
            (settings.group_interval, settings.repeat_interval),
            (Duration::from_secs(60), Duration::ZERO)
        );
        assert_eq!(settings.channels[0].digest_wait, Duration::from_secs(5), "never longer than the window");
        let long = parse(
            r#"{"channels": [{"name": "h", "type": "webhook", "url": "http://h/x",
                "rate_limit": {"count": 5, "per": "1m", "digest_wait": "2m"}}]}"#,
        );
        let e = long.resolve(&|_| None).expect_err("digest_wait over per");
        assert!(
            e.to_string()
                .contains("channel `h`: rate_limit.digest_wait (120s) is longer than rate_limit.per (60s)"),
            "{e}"
        );
        let bad = parse(r#"{"group_interval": "soon"}"#);
        assert!(
            bad.resolve(&|_| None).expect_err("bad").to_string().contains("group_interval: bad duration")
        );
    }

    #[test]
    fn errors_never_show_the_url() {
        let config = parse(
            r#"{"channels": [{"name": "w", "type": "wecom", "url": "ftp://x/send?key=verysecretkey"}],
               "routes": [{"channels": ["nope"]}]}"#,
        );
        let e = config.resolve(&|_| None).expect_err("bad url");
        assert!(!e.to_string().contains("verysecretkey"), "{e}");
        let config = parse(
            r#"{"channels": [{"name": "w", "type": "wecom", "url": "https://x/send?key=k"}],
               "routes": [{"channels": ["nope"]}]}"#,
        );
        let e = config.resolve(&|_| None).expect_err("unknown channel");
        assert!(e.to_string().contains("unknown channel `nope`"), "{e}");
        assert!(!format!("{config:?}").contains("key=k"), "Debug hides inline URLs");
    }
}
