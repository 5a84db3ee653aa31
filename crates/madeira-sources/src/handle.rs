//! One message's fate. Parse (bounded size, JSON) and map it (`when`, `key`,
//! `params` CEL over `payload`, `headers`, `message`), ask for its run, then:
//!
//! | what happened                                   | broker action                          | outcome       |
//! |-------------------------------------------------|----------------------------------------|---------------|
//! | run created                                     | ack                                    | `run`         |
//! | the key already made a run                      | ack                                    | `duplicate`   |
//! | `when` false, or flow paused with `on_paused: drop` | ack                                 | `filtered`    |
//! | refused: rate limit, `queue_full`, `on_overlap: skip` | redeliver after a delay (counted) | `refused`     |
//! | … on delivery `max_deliveries`                  | dead-letter with the reason            | `dead_letter` |
//! | too large, not JSON, `key`/`params`/`when` fails | dead-letter at once + warning alert   | `dead_letter` |
//! | the flow cannot take it (gone, observe-only…)   | dead-letter with the reason            | `dead_letter` |
//! | store unavailable / shutting down, or the flow paused (`queue`) since the consumer read it | redeliver after a delay (not counted) | — |
//!
//! Acknowledging only after the run is committed makes delivery at least once;
//! the run key `message:<source>:<key>` makes the run exactly one.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use madeira_core::keys::RunKey;
use madeira_core::{MessageTriggerDef, OnPaused};
use serde_json::{Value as Json, json};

pub use crate::metrics::Outcome;
use crate::source::Delivery;
use crate::status::Statuses;

#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    pub flow: String,
    /// `message:<source>:<key>`.
    pub idempotency_key: String,
    pub params: Json,
    /// The run's business date (`YYYY-MM-DD`) from the trigger's `biz_date:`.
    pub biz_date: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Made {
    Created(String),
    Existing(String),
}

/// Why the run was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The flow's `rate_limit`: retry after this.
    RateLimited(Duration),
    /// A throttled node's queue is full.
    QueueFull(String),
    /// `on_overlap: skip` with a run active.
    OverlapSkipped(String),
    /// The store cannot commit, or the engine is stopping: not the message's fault.
    Unavailable(String),
    /// The flow can never take it (gone, observe-only, bad params text).
    Rejected(String),
    /// The flow was paused after this consumer last read it: the message stays in
    /// the broker (`on_paused: queue`) or is acked as filtered (`drop`).
    Paused,
}

/// Makes runs; the binary implements it over the engine (and the flow's rate limit).
#[async_trait]
pub trait Runs: Send + Sync {
    /// Answers once the run is committed, or found by its key.
    async fn make(&self, request: RunRequest) -> Result<Made, Refusal>;
}

/// Raises the warning for messages dead-lettered at once (grouped per source).
pub trait Warnings: Send + Sync {
    fn poison(&self, source: &str, flow: &str, reason: &str);
}

/// A message mapped to a run, or why it cannot be.
#[derive(Debug, PartialEq)]
pub(crate) enum Mapped {
    Run { key: String, params: Json, biz_date: Option<String> },
    Filtered,
    Poison(String),
}

/// `message` as CEL sees it.
fn message_json(d: &Delivery) -> Json {
    json!({"id": d.id, "subject": d.subject, "deliveries": d.deliveries})
}

/// Parses and maps one message with the trigger's CEL (pure: no I/O).
pub(crate) fn map(def: &MessageTriggerDef, d: &Delivery) -> Mapped {
    if d.body.len() > crate::MAX_MESSAGE_BYTES {
        return Mapped::Poison(format!(
            "the message is {} bytes; the limit is {}",
            d.body.len(),
            crate::MAX_MESSAGE_BYTES
        ));
    }
    let payload: Json = match serde_json::from_slice(&d.body) {
        Ok(p) => p,
        Err(e) => return Mapped::Poison(format!("the body is not JSON: {e}")),
    };
    let headers = Json::Object(d.headers.iter().map(|(k, v)| (k.clone(), Json::String(v.clone()))).collect());
    let message = message_json(d);
    if let Some(when) = &def.when {
        match when.eval_bool(&payload, &headers, &message) {
            Ok(true) => {}
            Ok(false) => return Mapped::Filtered,
            Err(e) => return Mapped::Poison(format!("when: {e}")),
        }
    }
    let key = match &def.key {
        Some(expr) => match expr.eval_text(&payload, &headers, &message) {
            Ok(k) => k,
            Err(e) => return Mapped::Poison(format!("key: {e}")),
        },
        None => d.id.clone(),
    };
    if key.is_empty() || key.len() > 200 {
        return Mapped::Poison(format!("the key must be 1 to 200 characters, got {}", key.len()));
    }
    let biz_date = match &def.biz_date {
        Some(expr) => match expr.eval_text(&payload, &headers, &message) {
            Ok(text) => match madeira_core::bizdate::parse_date(text.trim()) {
                Ok(date) => Some(madeira_core::bizdate::format_date(date)),
                Err(e) => return Mapped::Poison(format!("biz_date: {e}")),
            },
            Err(e) => return Mapped::Poison(format!("biz_date: {e}")),
        },
        None => None,
    };
    let params = if def.params.is_empty() {
        payload
    } else {
        let mut out = serde_json::Map::new();
        for (name, expr) in &def.params {
            match expr.eval(&payload, &headers, &message) {
                Ok(v) => {
                    out.insert(name.clone(), v);
                }
                Err(e) => return Mapped::Poison(format!("params.{name}: {e}")),
            }
        }
        Json::Object(out)
    };
    Mapped::Run { key, params, biz_date }
}

/// The delay before a refused message is delivered again: the rate limiter's
/// wait, else 1 s doubling per delivery up to 30 s.
pub(crate) fn refusal_delay(refusal: &Refusal, deliveries: u32) -> Duration {
    match refusal {
        Refusal::RateLimited(wait) => (*wait).clamp(Duration::from_millis(50), Duration::from_secs(30)),
        _ => Duration::from_secs(1u64 << deliveries.saturating_sub(1).min(5)).min(Duration::from_secs(30)),
    }
}

/// Everything one consumer needs to handle its messages.
pub struct Handler {
    pub source: String,
    pub consumer_id: String,
    pub flow: String,
    pub def: std::sync::Arc<MessageTriggerDef>,
    pub runs: std::sync::Arc<dyn Runs>,
    pub warnings: std::sync::Arc<dyn Warnings>,
    pub statuses: Statuses,
    /// The flow is paused and the trigger says `on_paused: drop`.
    pub drop_all: bool,
}

impl Handler {
    /// Handles one delivery to the end (acked, redelivered or dead-lettered).
    pub async fn handle(&self, d: Delivery) -> Outcome {
        let (outcome, error) = self.decide(&d).await;
        let acted = match &outcome {
            Decision::Ack(_) => d.acker.ack().await,
            Decision::Retry { delay, reason, counted, .. } => d.acker.retry(*delay, reason, *counted).await,
            Decision::DeadLetter(reason, _) => d.acker.dead_letter(reason).await,
        };
        let outcome = outcome.outcome();
        if let Err(e) = acted {
            // The broker will deliver it again; the key keeps it to one run.
            tracing::warn!(source = %self.source, flow = %self.flow, error = %e, "could not settle a message; it will be redelivered");
        }
        if outcome != Outcome::Released {
            self.statuses.count(&self.source, &self.consumer_id, outcome, error);
        }
        outcome
    }

    async fn decide(&self, d: &Delivery) -> (Decision, Option<String>) {
        if self.drop_all {
            return (Decision::Ack(Outcome::Filtered), None);
        }
        let (key, params, biz_date) = match map(&self.def, d) {
            Mapped::Filtered => return (Decision::Ack(Outcome::Filtered), None),
            Mapped::Poison(reason) => {
                self.warnings.poison(&self.source, &self.flow, &reason);
                return (Decision::DeadLetter(reason.clone(), Outcome::DeadLetter), Some(reason));
            }
            Mapped::Run { key, params, biz_date } => (key, params, biz_date),
        };
        let request = RunRequest {
            flow: self.flow.clone(),
            idempotency_key: RunKey::Message { source: self.source.clone(), key }.into(),
            params,
            biz_date,
        };
        match self.runs.make(request).await {
            Ok(Made::Created(_)) => (Decision::Ack(Outcome::Run), None),
            Ok(Made::Existing(_)) => (Decision::Ack(Outcome::Duplicate), None),
            Err(Refusal::Unavailable(why)) => {
                let delay = Duration::from_secs(1);
                (Decision::Retry { delay, reason: why.clone(), counted: false }, Some(why))
            }
            Err(Refusal::Rejected(why)) => {
                (Decision::DeadLetter(why.clone(), Outcome::DeadLetter), Some(why))
            }
            // The consumer stops within its supervisor's next look at the flows;
            // until then the message goes back uncounted.
            Err(Refusal::Paused) if self.def.on_paused == OnPaused::Drop => {
                (Decision::Ack(Outcome::Filtered), None)
            }
            Err(Refusal::Paused) => {
                let reason = format!("flow {} is paused", self.flow);
                (Decision::Retry { delay: Duration::from_secs(1), reason, counted: false }, None)
            }
            Err(refusal) => {
                let reason = match &refusal {
                    Refusal::RateLimited(wait) => format!("rate_limited: retry after {wait:?}"),
                    Refusal::QueueFull(why) => format!("queue_full: {why}"),
                    Refusal::OverlapSkipped(why) => format!("overlap_skipped: {why}"),
                    Refusal::Unavailable(why) | Refusal::Rejected(why) => why.clone(),
                    Refusal::Paused => "paused".to_string(),
                };
                if d.deliveries >= self.def.max_deliveries {
                    let reason = format!(
                        "{reason} (delivery {} of max_deliveries {})",
                        d.deliveries, self.def.max_deliveries
                    );
                    (Decision::DeadLetter(reason.clone(), Outcome::DeadLetter), Some(reason))
                } else {
                    let delay = refusal_delay(&refusal, d.deliveries);
                    (Decision::Retry { delay, reason: reason.clone(), counted: true }, Some(reason))
                }
            }
        }
    }
}

enum Decision {
    Ack(Outcome),
    Retry { delay: Duration, reason: String, counted: bool },
    DeadLetter(String, Outcome),
}

impl Decision {
    fn outcome(&self) -> Outcome {
        match self {
            Decision::Ack(o) | Decision::DeadLetter(_, o) => *o,
            Decision::Retry { counted: true, .. } => Outcome::Refused,
            Decision::Retry { counted: false, .. } => Outcome::Released,
        }
    }
}

/// Header names as CEL reads them: lower case.
pub(crate) fn header_map(pairs: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    pairs.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect()
}

#[cfg(test)]
#[path = "handle_tests.rs"]
mod tests;
