//! Madeira's telemetry: Prometheus metrics on an explicit registry (no global),
//! the engine observers that feed them, OTLP trace export of run and attempt
//! spans, trace-context carriers for job processes, and the run-time log filter.
//!
//! `Telemetry` is built first; components register their own families on
//! `registry_mut()` while the app is assembled; `finish()` freezes the registry
//! into the `Exposition` that `/metrics` renders.

mod exposition;
mod logs;
mod metrics;
mod observer;
mod process;
pub mod propagation;
mod traces;

use std::sync::Arc;

use madeira_engine::EngineObserver;
pub use prometheus_client;
use prometheus_client::registry::Registry;

pub use exposition::{Exposition, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, openmetrics_to_text};
pub use logs::LogControl;
pub use metrics::{
    CRON_LATENESS_BUCKETS, DISPATCH_LATENCY_BUCKETS, Declared, FlowLabels, FlowStatusLabels, Metrics,
    NODE_DURATION_BUCKETS, NodeLabels, NodeStatusLabels,
};
pub use observer::MetricsObserver;
pub use process::{ProcessCollector, register_build_info};
pub use traces::{TraceObserver, TraceOptions, Traces, span_data};

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTLP span exporter: {0}")]
    Exporter(String),
}

/// What to turn on.
#[derive(Debug, Clone)]
pub struct TelemetryOptions {
    /// Feed the engine metrics (the registry, build info and process metrics exist
    /// either way).
    pub metrics: bool,
    /// Export spans over OTLP (set when `OTEL_EXPORTER_OTLP_ENDPOINT` is).
    pub traces: Option<TraceOptions>,
    /// `component` label of `madeira_build_info` (`control-plane`, `sidecar`).
    pub component: String,
    /// The process's log filter, served by `PUT /admin/log-level`.
    pub log_control: Option<LogControl>,
}

impl Default for TelemetryOptions {
    fn default() -> Self {
        Self { metrics: true, traces: None, component: "control-plane".into(), log_control: None }
    }
}

/// Telemetry while the app is being assembled.
pub struct Telemetry {
    registry: Registry,
    metrics: Metrics,
    observer: Arc<MetricsObserver>,
    feed_metrics: bool,
    traces: Option<Arc<Traces>>,
}

impl Telemetry {
    /// Creates the registry with the engine families, build info and process
    /// metrics, and starts the span exporter when asked (inside the runtime).
    pub fn new(options: &TelemetryOptions) -> Result<Self, TelemetryError> {
        let mut registry = Registry::default();
        register_build_info(&mut registry, env!("CARGO_PKG_VERSION"), &options.component);
        registry.register_collector(Box::new(ProcessCollector));
        let metrics = Metrics::register(&mut registry);
        let observer = MetricsObserver::new(metrics.clone());
        let traces = match &options.traces {
            Some(trace_options) => {
                propagation::install_w3c_propagator();
                Some(Arc::new(Traces::start(trace_options)?))
            }
            None => None,
        };
        Ok(Self { registry, metrics, observer, feed_metrics: options.metrics, traces })
    }

    /// Where other components register their metric families.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn metrics_observer(&self) -> &Arc<MetricsObserver> {
        &self.observer
    }

    /// True when spans are exported (the engine should then trace attempts).
    pub fn tracing(&self) -> bool {
        self.traces.is_some()
    }

    /// The engine observers: metrics (when on) and span export (when on).
    pub fn observers(&self) -> Vec<Arc<dyn EngineObserver>> {
        let mut observers: Vec<Arc<dyn EngineObserver>> = Vec::new();
        if self.feed_metrics {
            observers.push(self.observer.clone());
        }
        if let Some(traces) = &self.traces {
            observers.push(Arc::new(TraceObserver::new(traces.clone())));
        }
        observers
    }

    /// Freezes the registry for `/metrics`.
    pub fn finish(self) -> Running {
        Running { exposition: Exposition::new(self.registry), traces: self.traces }
    }
}

/// Telemetry of a running app.
#[derive(Clone, Debug)]
pub struct Running {
    pub exposition: Exposition,
    traces: Option<Arc<Traces>>,
}

impl Running {
    /// Flushes queued spans; call last at shutdown.
    pub fn shutdown(&self) {
        if let Some(traces) = &self.traces {
            traces.shutdown();
        }
    }
}

#[cfg(test)]
mod tests;
