//! The flow file as written: serde structs that mirror the YAML (unknown fields denied),
//! with `Spanned` values so the validator can name the line of every mistake. Numbers
//! are read as `i64`/`f64` and enumerations as strings, so a negative limit or a typo
//! in `on_overlap` becomes a validation error that says how to fix it, not a serde one.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_saphyr::Spanned;

pub(crate) type Span<T> = Spanned<T>;
pub(crate) type Json = serde_json::Value;

/// Top level of a flow file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFlow {
    pub flow: Option<Span<String>>,
    pub description: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub triggers: Option<Vec<Span<RawTrigger>>>,
    pub concurrency: Option<Span<RawConcurrency>>,
    pub rate_limit: Option<Span<String>>,
    pub routing: Option<Span<RawRouting>>,
    pub observe: Option<bool>,
    pub timezone: Option<Span<String>>,
    pub biz_date: Option<Span<super::bizdate::RawBizDate>>,
    pub deadline: Option<Span<super::bizdate::RawDeadline>>,
    pub defaults: Option<Span<RawDefaults>>,
    pub nodes: Option<Span<RawNodes>>,
    pub after: Option<Vec<Span<RawAfter>>>,
    pub after_policy: Option<Span<RawAfterPolicy>>,
    pub max_duration: Option<Span<String>>,
}

/// `after:` entry: `{flow, node, date: same | -N, calendar}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAfter {
    pub flow: Option<Span<String>>,
    pub node: Option<Span<String>>,
    pub date: Option<Span<RawDate>>,
    pub calendar: Option<Span<String>>,
}

/// `date: same` or a whole number of days (`-1`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawDate {
    Offset(i64),
    Word(String),
}

/// `after_policy: {wait: 4h, then: fail|skip|run}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAfterPolicy {
    pub wait: Option<Span<String>>,
    pub then: Option<Span<String>>,
}

/// `nodes:` in file order; a node written as `x:` with no body is `None`.
pub(crate) type RawNodes = Ordered<Span<String>, Span<Option<RawNode>>>;

/// `{cron, timezone, misfire, jitter, grace, catchup_window, calendar, calendar_mode}` or `{event, on_paused, max_queued}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTrigger {
    pub cron: Option<Span<String>>,
    pub timezone: Option<Span<String>>,
    pub misfire: Option<Span<String>>,
    pub jitter: Option<Span<String>>,
    pub grace: Option<Span<String>>,
    pub catchup_window: Option<Span<String>>,
    pub calendar: Option<Span<String>>,
    pub calendar_mode: Option<Span<String>>,
    pub event: Option<Span<String>>,
    pub on_paused: Option<Span<String>>,
    pub max_queued: Option<Span<i64>>,
    pub message: Option<Span<RawMessageTrigger>>,
    pub flow_succeeded: Option<Span<String>>,
}

/// `message: {source, queue, …, key, params, when, max_in_flight, max_deliveries, on_paused}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMessageTrigger {
    pub source: Option<Span<String>>,
    pub queue: Option<Span<String>>,
    pub exchange: Option<Span<String>>,
    pub binding_key: Option<Span<String>>,
    pub stream: Option<Span<String>>,
    pub consumer: Option<Span<String>>,
    pub subject: Option<Span<String>>,
    pub group: Option<Span<String>>,
    pub key: Option<Span<String>>,
    pub params: Option<Span<BTreeMap<String, Span<String>>>>,
    pub when: Option<Span<String>>,
    pub biz_date: Option<Span<String>>,
    pub max_in_flight: Option<Span<i64>>,
    pub max_deliveries: Option<Span<i64>>,
    pub on_paused: Option<Span<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConcurrency {
    pub max_active_runs: Option<Span<i64>>,
    pub on_overlap: Option<Span<String>>,
    pub depends_on_past: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRouting {
    pub default: Option<Span<i64>>,
    pub rules: Option<Vec<Span<RawRoutingRule>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRoutingRule {
    pub when: Option<Span<String>>,
    pub version: Option<Span<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefaults {
    pub timeout: Option<Span<String>>,
    pub retry: Option<Span<RawRetry>>,
    pub stall_after: Option<Span<String>>,
    pub warn_after: Option<Span<String>>,
}

/// `foreach:`: CEL text, or a literal list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawForeach {
    Expr(String),
    List(Vec<Json>),
}

/// Every field optional: node retry overrides `defaults.retry` field by field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetry {
    pub attempts: Option<Span<i64>>,
    pub backoff: Option<Span<String>>,
    pub factor: Option<Span<f64>>,
    pub max_backoff: Option<Span<String>>,
    pub jitter: Option<Span<String>>,
    pub no_retry_exit_codes: Option<Vec<Span<i64>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNode {
    pub needs: Option<Vec<Span<RawNeed>>>,
    pub when: Option<Span<String>>,
    pub run: Option<Span<RawExecutor>>,
    pub manual: Option<Span<RawManual>>,
    pub timeout: Option<Span<String>>,
    pub retry: Option<Span<RawRetry>>,
    pub throttle: Option<Span<RawThrottle>>,
    pub stall_after: Option<Span<String>>,
    pub warn_after: Option<Span<String>>,
    /// A CEL expression giving a list, or a list written here.
    pub foreach: Option<Span<RawForeach>>,
    pub max_parallel: Option<Span<i64>>,
    pub max_duration: Option<Span<String>>,
    /// Node-level `after:`: this node alone waits for other flows' runs (or nodes).
    pub after: Option<Vec<Span<RawAfter>>>,
}

/// One executor: exactly one of `builtin`, `http`, `sidecar`, `sql`, `xxl`; the other fields
/// belong to `builtin`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExecutor {
    pub builtin: Option<Span<String>>,
    #[serde(rename = "for")]
    pub for_: Option<Span<String>>,
    pub message: Option<String>,
    pub times: Option<Span<i64>>,
    pub outputs: Option<serde_json::Map<String, Json>>,
    pub http: Option<Span<RawHttp>>,
    pub sidecar: Option<Span<RawSidecar>>,
    pub sql: Option<Span<RawSql>>,
    pub xxl: Option<Span<RawXxl>>,
    /// `run: {flow, params}`: a child run of another flow.
    pub flow: Option<Span<String>>,
    pub params: Option<Ordered<Span<String>, Json>>,
    /// `manual.fallback` only: `skip` or `success`, how the node ends once it succeeded.
    pub then: Option<Span<String>>,
}

/// `xxl: {app, handler, params, route, block, timeout, grace}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawXxl {
    pub app: Option<Span<String>>,
    pub handler: Option<Span<String>>,
    pub params: Option<String>,
    pub route: Option<Span<String>>,
    pub block: Option<Span<String>>,
    pub timeout: Option<Span<String>>,
    pub grace: Option<Span<String>>,
    /// XXL-JOB's GLUE mode: only `BEAN` is accepted (the control plane ships no code).
    pub glue_type: Option<Span<String>>,
}

/// `sql: {datasource, statement | script, params, outputs, max_rows, grace}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSql {
    pub datasource: Option<Span<String>>,
    pub statement: Option<Span<String>>,
    pub script: Option<Span<String>>,
    pub params: Option<Ordered<Span<String>, Span<String>>>,
    pub outputs: Option<Span<String>>,
    pub max_rows: Option<Span<i64>>,
    pub grace: Option<Span<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp {
    pub url: Option<Span<String>>,
    pub method: Option<Span<String>>,
    pub headers: Option<BTreeMap<String, String>>,
    pub body: Option<Json>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawShards {
    Count(i64),
    Word(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSidecar {
    pub group: Option<Span<String>>,
    pub job: Option<Span<String>>,
    /// A number, or `all` (one per live sidecar).
    pub shards: Option<Span<RawShards>>,
    /// `round_robin` (default) or `least_busy`.
    pub route: Option<Span<String>>,
    /// CEL over `params`/`nodes`: consistent hashing on its value.
    pub hash_key: Option<Span<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawManual {
    pub prompt: Option<String>,
    pub alert_after: Option<Span<String>>,
    pub fallback_after: Option<Span<String>>,
    pub fallback: Option<Span<RawExecutor>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawThrottle {
    pub max_permits: Option<Span<i64>>,
    pub queue_size: Option<Span<i64>>,
}

/// A `needs` entry: a node name (strong), or `{node, kind}`.
#[derive(Debug)]
pub(crate) enum RawNeed {
    Name(String),
    Full { node: Option<String>, kind: Option<String> },
}

impl<'de> Deserialize<'de> for RawNeed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NeedVisitor)
    }
}

struct NeedVisitor;

impl<'de> Visitor<'de> for NeedVisitor {
    type Value = RawNeed;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a node name or {node: NAME, kind: strong|weak}")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawNeed, E> {
        Ok(RawNeed::Name(v.to_string()))
    }

    // A plain scalar that YAML reads as a number or boolean is still a (bad) name.
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawNeed, E> {
        Ok(RawNeed::Name(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawNeed, E> {
        Ok(RawNeed::Name(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawNeed, E> {
        Ok(RawNeed::Name(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawNeed, E> {
        Ok(RawNeed::Name(v.to_string()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawNeed, A::Error> {
        const FIELDS: &[&str] = &["node", "kind"];
        let (mut node, mut kind) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "node" => node = Some(map.next_value()?),
                "kind" => kind = Some(map.next_value()?),
                other => return Err(de::Error::unknown_field(other, FIELDS)),
            }
        }
        Ok(RawNeed::Full { node, kind })
    }
}

/// A YAML mapping read in file order (a `BTreeMap` would sort the nodes).
#[derive(Debug)]
pub(crate) struct Ordered<K, V>(pub Vec<(K, V)>);

impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for Ordered<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(OrderedVisitor(PhantomData))
    }
}

struct OrderedVisitor<K, V>(PhantomData<(K, V)>);

impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Visitor<'de> for OrderedVisitor<K, V> {
    type Value = Ordered<K, V>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Ordered(entries))
    }
}
