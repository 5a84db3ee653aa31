//! Traces over OTLP/gRPC: a small collector (tonic) inside the test receives the
//! spans of `madeira dev`; the job reached over http receives `traceparent`. The
//! trace id the job got is the run's trace id, the span id it got is its attempt's
//! span, and every node attempt has a span under the run span.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;

use crate::support::{Dev, wait_until};

#[derive(Default, Clone)]
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for rs in request.into_inner().resource_spans {
            let service =
                rs.resource.iter().flat_map(|r| r.attributes.iter()).find(|kv| kv.key == "service.name");
            if let Some(name) = service.and_then(|kv| string_value(kv.value.as_ref()?.value.as_ref()?)) {
                self.services.lock().expect("lock").push(name);
            }
            let spans = rs.scope_spans.into_iter().flat_map(|s| s.spans);
            self.spans.lock().expect("lock").extend(spans);
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

fn string_value(v: &Any) -> Option<String> {
    match v {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(i) => Some(i.to_string()),
        _ => None,
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| string_value(kv.value.as_ref()?.value.as_ref()?))
}

async fn collector() -> (String, Collector) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let service = TraceServiceServer::new(collector.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
    });
    (format!("http://{addr}"), collector)
}

/// An http job that records the `traceparent` header it is called with.
async fn job() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let app = Router::new().route(
        "/job",
        post(move |headers: HeaderMap| {
            let log = log.clone();
            async move {
                let parent = headers.get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or("");
                log.lock().expect("lock").push(parent.to_string());
                axum::Json(json!({"rows": 3}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/job"), seen)
}

#[tokio::test]
async fn the_job_joins_the_run_trace_and_every_attempt_has_a_span() {
    let (endpoint, collector) = collector().await;
    let (url, seen) = job().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_with_env(
        dir.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "madeira-e2e"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    dev.put_flow(&format!(
        "flow: traced
nodes:
  call: {{run: {{http: {{url: '{url}', method: POST}}}}}}
  flaky: {{needs: [call], run: {{builtin: fail, message: boom}}, retry: {{attempts: 2, backoff: 10ms}}}}
  after: {{needs: [{{node: flaky, kind: weak}}], run: {{builtin: noop}}}}
"
    ))
    .await;
    let run_id = dev.trigger("traced", json!({})).await;
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    let attempts: HashMap<String, u64> = ["call", "flaky", "after"]
        .iter()
        .map(|n| (n.to_string(), run["nodes"][n]["attempts"].as_u64().expect("attempts")))
        .collect();
    assert_eq!(attempts["flaky"], 2, "{run}");
    let expected_spans = 1 + attempts.values().sum::<u64>() as usize;

    let what = format!("{expected_spans} spans");
    let spans = wait_until(Duration::from_secs(30), &what, async || {
        let spans: Vec<Span> = collector
            .spans
            .lock()
            .expect("lock")
            .iter()
            .filter(|s| attr(s, "madeira.run_id").as_deref() == Some(run_id.as_str()))
            .cloned()
            .collect();
        if spans.len() >= expected_spans { Ok(spans) } else { Err(format!("{} spans", spans.len())) }
    })
    .await;
    assert_eq!(spans.len(), expected_spans, "one run span and one per attempt");
    assert!(collector.services.lock().expect("lock").iter().all(|s| s == "madeira-e2e"));

    let run_span = spans.iter().find(|s| s.parent_span_id.is_empty()).expect("a root run span");
    assert_eq!(run_span.name, "run traced");
    assert_eq!(attr(run_span, "cicd.pipeline.name").as_deref(), Some("traced"));
    assert_eq!(attr(run_span, "cicd.pipeline.result").as_deref(), Some("success"));
    assert_eq!(attr(run_span, "madeira.trigger").as_deref(), Some("manual"));
    let trace_id = hex(&run_span.trace_id);

    let received = seen.lock().expect("lock").clone();
    assert_eq!(received.len(), 1, "{received:?}");
    let parts: Vec<&str> = received[0].split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent {}", received[0]);
    assert_eq!(parts[1], trace_id, "the job's TRACEPARENT names the run's trace");

    let mut per_node: HashMap<String, u64> = HashMap::new();
    for span in spans.iter().filter(|s| !s.parent_span_id.is_empty()) {
        assert_eq!(hex(&span.trace_id), trace_id, "{}", span.name);
        assert_eq!(span.parent_span_id, run_span.span_id, "{} is a child of the run span", span.name);
        let node = attr(span, "madeira.node").expect("madeira.node");
        assert_eq!(span.name, format!("attempt {node}"));
        assert_eq!(attr(span, "cicd.pipeline.task.name").as_deref(), Some(node.as_str()));
        assert!(attr(span, "madeira.attempt").is_some());
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
        if node == "call" {
            assert_eq!(parts[2], hex(&span.span_id), "the job's parent span is its attempt span");
        }
        if node == "flaky" {
            assert_eq!(attr(span, "cicd.pipeline.task.run.result").as_deref(), Some("error"));
        }
        *per_node.entry(node).or_default() += 1;
    }
    assert_eq!(per_node, attempts, "a span for every attempt");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
