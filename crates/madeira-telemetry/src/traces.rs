//! OTLP/gRPC export of the engine's spans. The engine names every span itself
//! (trace id and run-span id stored with the run, attempt span ids derived from
//! it), so spans are built here as finished `SpanData` with those ids and handed to
//! a batch processor: batched, with a bounded queue that drops rather than waits,
//! exporting from its own thread — the engine never blocks on a collector.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use madeira_engine::{EngineObserver, SpanEnded, SpanKind};
use opentelemetry::trace::{SpanContext, SpanId, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};

use crate::TelemetryError;

/// Where and as whom spans are exported.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    /// OTLP/gRPC endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`), e.g. `http://collector:4317`;
    /// empty: build every span and discard it (benchmarks).
    pub endpoint: String,
    /// `service.name` of the resource (`OTEL_SERVICE_NAME`, default `madeira`).
    pub service_name: String,
    pub service_version: String,
    /// Largest number of spans waiting for export; more are dropped.
    pub max_queue: usize,
}

impl TraceOptions {
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            service_name: "madeira".into(),
            service_version: env!("CARGO_PKG_VERSION").into(),
            max_queue: 8192,
        }
    }
}

/// The span pipeline: a batch processor over the OTLP exporter.
pub struct Traces {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces").finish_non_exhaustive()
    }
}

impl Traces {
    /// Builds the exporter; must run inside the tokio runtime (the gRPC channel's
    /// connection task lives there). Connecting is lazy: a collector that is down
    /// only costs dropped spans.
    pub fn start(options: &TraceOptions) -> Result<Self, TelemetryError> {
        let config = BatchConfigBuilder::default().with_max_queue_size(options.max_queue).build();
        let mut processor = if options.endpoint.is_empty() {
            BatchSpanProcessor::new(Discard, config)
        } else {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(options.endpoint.clone())
                .with_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
            BatchSpanProcessor::new(exporter, config)
        };
        let resource = Resource::builder_empty()
            .with_service_name(options.service_name.clone())
            .with_attribute(KeyValue::new("service.version", options.service_version.clone()))
            .build();
        processor.set_resource(&resource);
        let scope =
            InstrumentationScope::builder("madeira").with_version(options.service_version.clone()).build();
        Ok(Self { processor, scope })
    }

    /// Queues a finished span (dropped when the queue is full).
    pub fn record(&self, span: SpanData) {
        self.processor.on_end(span);
    }

    /// Exports what is queued and stops; call last at shutdown.
    pub fn shutdown(&self) {
        if let Err(e) = self.processor.force_flush() {
            tracing::warn!(error = %e, "flushing spans failed");
        }
        if let Err(e) = self.processor.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "stopping the span exporter failed");
        }
    }

    pub fn scope(&self) -> &InstrumentationScope {
        &self.scope
    }
}

/// An exporter that drops every batch: the span pipeline without a network.
#[derive(Debug)]
struct Discard;

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(&self, _batch: Vec<SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

/// Exports the engine's run and attempt spans.
pub struct TraceObserver {
    traces: std::sync::Arc<Traces>,
}

impl TraceObserver {
    pub fn new(traces: std::sync::Arc<Traces>) -> Self {
        Self { traces }
    }
}

impl EngineObserver for TraceObserver {
    fn span_ended(&self, span: &SpanEnded<'_>) {
        self.traces.record(span_data(span, self.traces.scope().clone()));
    }
}

fn at(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// CICD semantic-convention result of a run or attempt outcome.
fn cicd_result(result: &str) -> &'static str {
    match result {
        "SUCCESS" => "success",
        "CANCELLED" => "cancellation",
        "RETRYABLE" => "error",
        _ => "failure",
    }
}

/// The OTel span for an engine span, with the engine's ids and times.
pub fn span_data(s: &SpanEnded<'_>, scope: InstrumentationScope) -> SpanData {
    let context = SpanContext::new(
        TraceId::from_bytes(s.context.trace_id),
        SpanId::from_bytes(s.context.span_id),
        TraceFlags::new(s.context.flags),
        false,
        TraceState::default(),
    );
    let mut attributes = vec![
        KeyValue::new("madeira.run_id", s.run_id.to_string()),
        KeyValue::new("madeira.flow", s.flow.to_string()),
        KeyValue::new("madeira.trigger", s.trigger.to_string()),
        KeyValue::new("cicd.pipeline.name", s.flow.to_string()),
        KeyValue::new("cicd.pipeline.run.id", s.run_id.to_string()),
    ];
    let name: Cow<'static, str> = match (s.kind, s.node) {
        (SpanKind::Attempt, Some(node)) => {
            attributes.extend([
                KeyValue::new("madeira.node", node.to_string()),
                KeyValue::new("madeira.attempt", i64::from(s.attempt)),
                KeyValue::new("madeira.result", s.result.to_string()),
                KeyValue::new("cicd.pipeline.task.name", node.to_string()),
                KeyValue::new("cicd.pipeline.task.run.id", format!("{}/{node}/{}", s.run_id, s.attempt)),
                KeyValue::new("cicd.pipeline.task.run.result", cicd_result(s.result)),
            ]);
            format!("attempt {node}").into()
        }
        _ => {
            attributes.extend([
                KeyValue::new("madeira.result", s.result.to_string()),
                KeyValue::new("cicd.pipeline.result", cicd_result(s.result)),
            ]);
            format!("run {}", s.flow).into()
        }
    };
    if let Some(error) = s.error {
        attributes
            .push(KeyValue::new("error.type", if s.result == "RETRYABLE" { "retryable" } else { "failed" }));
        attributes.push(KeyValue::new("error.message", error.to_string()));
    }
    let status = match s.result {
        "SUCCESS" => Status::Ok,
        "FAILED" | "RETRYABLE" => Status::error(s.error.unwrap_or(s.result).to_string()),
        _ => Status::Unset,
    };
    SpanData {
        span_context: context,
        parent_span_id: s.parent_span_id.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: false,
        span_kind: opentelemetry::trace::SpanKind::Internal,
        name,
        start_time: at(s.start_ms),
        end_time: at(s.end_ms.max(s.start_ms)),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope,
    }
}
