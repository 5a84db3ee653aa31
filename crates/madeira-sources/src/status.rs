//! What `GET /api/v1/sources` and `madeira sources` show: each source's type and
//! state, and per consumer (flow trigger) its state, lag, last error and counts
//! by outcome. Never a URL or credential.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::metrics::{Outcome, SourceMetrics};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    Connecting,
    Up,
    Down,
    /// Its flow is paused (`on_paused: queue`): not consuming.
    Paused,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConsumerStatus {
    pub flow: String,
    /// What it consumes, e.g. `queue pay.succeeded`.
    pub consumes: String,
    pub state: SourceState,
    /// Messages waiting in the broker, when known.
    pub lag: Option<u64>,
    pub last_error: Option<String>,
    /// Unix milliseconds of the last error.
    pub last_error_at: Option<i64>,
    pub messages: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SourceStatus {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub state: SourceState,
    pub consumers: Vec<ConsumerStatus>,
}

#[derive(Default)]
struct Inner {
    sources: BTreeMap<String, &'static str>,
    /// By (source, consumer id).
    consumers: BTreeMap<(String, String), ConsumerStatus>,
}

/// Shared, cheap to clone; updates also set `madeira_trigger_source_up`.
#[derive(Clone, Default)]
pub struct Statuses {
    inner: Arc<Mutex<Inner>>,
    metrics: SourceMetrics,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Statuses {
    pub fn new(metrics: SourceMetrics) -> Self {
        Self { inner: Arc::default(), metrics }
    }

    pub fn metrics(&self) -> &SourceMetrics {
        &self.metrics
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Declares a configured source (up until a consumer of it fails).
    pub fn add_source(&self, name: &str, kind: &'static str) {
        self.lock().sources.insert(name.to_string(), kind);
        self.metrics.set_up(name, true);
    }

    pub fn add_consumer(&self, source: &str, id: &str, flow: &str, consumes: String) {
        let status = ConsumerStatus {
            flow: flow.to_string(),
            consumes,
            state: SourceState::Connecting,
            lag: None,
            last_error: None,
            last_error_at: None,
            messages: BTreeMap::new(),
        };
        self.lock().consumers.insert((source.to_string(), id.to_string()), status);
    }

    pub fn remove_consumer(&self, source: &str, id: &str) {
        self.lock().consumers.remove(&(source.to_string(), id.to_string()));
        self.refresh_up(source);
    }

    pub fn set_state(&self, source: &str, id: &str, state: SourceState, error: Option<String>) {
        {
            let mut inner = self.lock();
            if let Some(c) = inner.consumers.get_mut(&(source.to_string(), id.to_string())) {
                c.state = state;
                if let Some(e) = error {
                    c.last_error = Some(e);
                    c.last_error_at = Some(now_ms());
                }
            }
        }
        self.refresh_up(source);
    }

    pub fn set_lag(&self, source: &str, id: &str, lag: Option<u64>) {
        if let Some(c) = self.lock().consumers.get_mut(&(source.to_string(), id.to_string())) {
            c.lag = lag;
        }
    }

    pub fn count(&self, source: &str, id: &str, outcome: Outcome, error: Option<String>) {
        self.metrics.count(source, outcome);
        if let Some(c) = self.lock().consumers.get_mut(&(source.to_string(), id.to_string())) {
            *c.messages.entry(outcome.name()).or_default() += 1;
            if let Some(e) = error {
                c.last_error = Some(e);
                c.last_error_at = Some(now_ms());
            }
        }
    }

    fn refresh_up(&self, source: &str) {
        let up = !self.lock().consumers.iter().any(|((s, _), c)| s == source && c.state == SourceState::Down);
        self.metrics.set_up(source, up);
    }

    /// Every source with its consumers, by name.
    pub fn snapshot(&self) -> Vec<SourceStatus> {
        let inner = self.lock();
        inner
            .sources
            .iter()
            .map(|(name, kind)| {
                let consumers: Vec<ConsumerStatus> =
                    inner.consumers.iter().filter(|((s, _), _)| s == name).map(|(_, c)| c.clone()).collect();
                let state = if consumers.iter().any(|c| c.state == SourceState::Down) {
                    SourceState::Down
                } else if consumers.iter().any(|c| c.state == SourceState::Connecting) {
                    SourceState::Connecting
                } else {
                    SourceState::Up
                };
                SourceStatus { name: name.clone(), kind, state, consumers }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_down_consumer_makes_its_source_down() {
        let s = Statuses::default();
        s.add_source("pay", "rabbitmq");
        s.add_consumer("pay", "f#0", "f", "queue q".into());
        s.set_state("pay", "f#0", SourceState::Up, None);
        assert_eq!(s.snapshot()[0].state, SourceState::Up);
        assert_eq!(
            s.metrics().up.get_or_create(&crate::metrics::SourceLabels { source: "pay".into() }).get(),
            1
        );
        s.set_state("pay", "f#0", SourceState::Down, Some("connection refused".into()));
        let snap = s.snapshot();
        assert_eq!(snap[0].state, SourceState::Down);
        assert_eq!(snap[0].consumers[0].last_error.as_deref(), Some("connection refused"));
        assert_eq!(
            s.metrics().up.get_or_create(&crate::metrics::SourceLabels { source: "pay".into() }).get(),
            0
        );
        s.count("pay", "f#0", Outcome::Run, None);
        assert_eq!(s.snapshot()[0].consumers[0].messages["run"], 1);
    }
}
