//! `madeira_trigger_source_up{source}` (1 while every consumer of the source is
//! connected) and `madeira_trigger_messages_total{source,outcome}` with outcome
//! `run`, `duplicate`, `filtered`, `refused` or `dead_letter`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// What became of a message (the `outcome` label of `madeira_trigger_messages_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Run,
    Duplicate,
    Filtered,
    Refused,
    DeadLetter,
    /// Left for redelivery without counting (store unavailable); not a metric outcome.
    Released,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Run => "run",
            Outcome::Duplicate => "duplicate",
            Outcome::Filtered => "filtered",
            Outcome::Refused => "refused",
            Outcome::DeadLetter => "dead_letter",
            Outcome::Released => "released",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub source: String,
    pub outcome: String,
}

#[derive(Clone, Default)]
pub struct SourceMetrics {
    pub up: Family<SourceLabels, Gauge>,
    pub messages: Family<OutcomeLabels, Counter>,
}

impl SourceMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "madeira_trigger_source_up",
            "1 while every consumer of the message source is connected, else 0",
            m.up.clone(),
        );
        registry.register(
            "madeira_trigger_messages",
            "Messages consumed from a message source, by outcome (run, duplicate, filtered, refused, dead_letter)",
            m.messages.clone(),
        );
        m
    }

    pub fn set_up(&self, source: &str, up: bool) {
        self.up.get_or_create(&SourceLabels { source: source.to_string() }).set(i64::from(up));
    }

    pub fn count(&self, source: &str, outcome: Outcome) {
        let labels = OutcomeLabels { source: source.to_string(), outcome: outcome.name().to_string() };
        self.messages.get_or_create(&labels).inc();
    }
}
