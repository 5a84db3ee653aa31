//! Run idempotency keys (SPEC §6): `RunKey` builds and parses every key a run may
//! carry, the namespaces Madeira makes itself (`cron:<flow>:<instant>`,
//! `event:<type>:<id>`, `message:<source>:<key>`, `exec:<exec id>`,
//! `after:<upstream flow>:<biz date>`, `backfill:<backfill id>:<flow>:<biz date>`,
//! `subflow:<parent run>:<node>:<attempt>`) and a caller's own key, which may
//! never take one of those namespaces: a forged `cron:` key would swallow that
//! cron tick, a forged `event:` key would capture the real event.
//!
//! The text is what stores hold (`runs.idempotency_key`) and compare: it never
//! changes for a kind that exists, so runs made before stay deduplicated.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};

/// Prefixes of the keys Madeira makes; a caller's key may start with none of them.
pub const RESERVED_PREFIXES: &[&str] =
    &["cron:", "event:", "message:", "exec:", "after:", "backfill:", "subflow:"];

/// The prefix of a scheduled run's key (the store finds a flow's last tick by it).
pub const CRON_PREFIX: &str = "cron:";

/// One run idempotency key, by the trigger that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunKey {
    /// A cron tick, on time or caught up after downtime (trigger `cron` or
    /// `cron_catchup`: one run per (flow, scheduled instant) either way).
    Cron { flow: String, tick: DateTime<Utc> },
    /// An event posted to the API (or kept while its flow was paused).
    Event { kind: String, id: String },
    /// A broker message: the source's name and the key the trigger's `key` gave.
    Message { source: String, key: String },
    /// A `madeira exec` report observed from a sidecar host.
    Exec { exec_id: String },
    /// A `flow_succeeded` trigger: the upstream flow's success for a business date.
    After { upstream: String, biz_date: String },
    /// One business date of `flow` in backfill `backfill` (its id: a later backfill
    /// asked to rerun existing dates makes new runs).
    Backfill { backfill: String, flow: String, biz_date: String },
    /// The child run a sub-flow node's attempt starts.
    Subflow { parent_run: String, node: String, attempt: u32 },
    /// A caller's key (`Idempotency-Key`, `madeira run --idempotency-key`).
    Caller(String),
}

/// Why a caller's key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    #[error("must be 1 to 256 characters")]
    Length,
    #[error(
        "starts with `{0}`, which Madeira reserves for its own triggers ({list}); choose a key \
         without these prefixes",
        list = RESERVED_PREFIXES.join(" ")
    )]
    Reserved(&'static str),
}

impl RunKey {
    /// A caller's key, refused when it is empty, too long or takes a reserved namespace.
    pub fn caller(key: &str) -> Result<RunKey, KeyProblem> {
        if key.is_empty() || key.len() > 256 {
            return Err(KeyProblem::Length);
        }
        match reserved_prefix(key) {
            Some(prefix) => Err(KeyProblem::Reserved(prefix)),
            None => Ok(RunKey::Caller(key.to_string())),
        }
    }

    /// The key `text` is, by its namespace; a reserved prefix whose rest does not
    /// parse (a `cron:` key without an instant) and any other text is `Caller`.
    /// Fields are split at the first `:` after the prefix, the last field takes
    /// the rest (an event id or a message key may hold `:`).
    pub fn parse(text: &str) -> RunKey {
        Self::parse_reserved(text).unwrap_or_else(|| RunKey::Caller(text.to_string()))
    }

    fn parse_reserved(text: &str) -> Option<RunKey> {
        let (prefix, rest) = text.split_once(':')?;
        let two = || rest.split_once(':').map(|(a, b)| (a.to_string(), b.to_string()));
        Some(match prefix {
            "cron" => {
                let (flow, tick) = rest.split_once(':')?;
                let tick = DateTime::parse_from_rfc3339(tick).ok()?.with_timezone(&Utc);
                RunKey::Cron { flow: flow.to_string(), tick }
            }
            "event" => two().map(|(kind, id)| RunKey::Event { kind, id })?,
            "message" => two().map(|(source, key)| RunKey::Message { source, key })?,
            "exec" => RunKey::Exec { exec_id: rest.to_string() },
            "after" => two().map(|(upstream, biz_date)| RunKey::After { upstream, biz_date })?,
            "backfill" => {
                let (backfill, rest) = rest.split_once(':')?;
                let (flow, biz_date) = rest.rsplit_once(':')?;
                let [backfill, flow, biz_date] = [backfill, flow, biz_date].map(str::to_string);
                RunKey::Backfill { backfill, flow, biz_date }
            }
            "subflow" => {
                let (rest, attempt) = rest.rsplit_once(':')?;
                let (parent_run, node) = rest.rsplit_once(':')?;
                let attempt = attempt.parse().ok()?;
                RunKey::Subflow { parent_run: parent_run.to_string(), node: node.to_string(), attempt }
            }
            _ => return None,
        })
    }

    /// The scheduled instant of a cron key.
    pub fn cron_tick(&self) -> Option<DateTime<Utc>> {
        match self {
            RunKey::Cron { tick, .. } => Some(*tick),
            _ => None,
        }
    }
}

impl fmt::Display for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunKey::Cron { flow, tick } => {
                write!(f, "cron:{flow}:{}", tick.to_rfc3339_opts(SecondsFormat::Millis, true))
            }
            RunKey::Event { kind, id } => write!(f, "event:{kind}:{id}"),
            RunKey::Message { source, key } => write!(f, "message:{source}:{key}"),
            RunKey::Exec { exec_id } => write!(f, "exec:{exec_id}"),
            RunKey::After { upstream, biz_date } => write!(f, "after:{upstream}:{biz_date}"),
            RunKey::Backfill { backfill, flow, biz_date } => {
                write!(f, "backfill:{backfill}:{flow}:{biz_date}")
            }
            RunKey::Subflow { parent_run, node, attempt } => {
                write!(f, "subflow:{parent_run}:{node}:{attempt}")
            }
            RunKey::Caller(key) => f.write_str(key),
        }
    }
}

impl From<RunKey> for String {
    fn from(key: RunKey) -> String {
        key.to_string()
    }
}

/// The reserved prefix `key` starts with, if any (case-insensitive).
pub fn reserved_prefix(key: &str) -> Option<&'static str> {
    RESERVED_PREFIXES
        .iter()
        .copied()
        .find(|prefix| key.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix)))
}

#[cfg(test)]
mod tests;
