//! Trace context through environment variables (`TRACEPARENT`, `TRACESTATE`; the
//! OTel "environment variables as context carriers" convention) for job processes
//! and `madeira exec`. The Rust SDK has no such carrier, so here is the small one,
//! over the W3C `TraceContextPropagator`.

use std::collections::HashMap;

use madeira_engine::TraceContext;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;

pub const TRACEPARENT: &str = "TRACEPARENT";
pub const TRACESTATE: &str = "TRACESTATE";

/// Installs the W3C propagator as the process's text-map propagator (the SDK
/// does not read `OTEL_PROPAGATORS`).
pub fn install_w3c_propagator() {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
}

/// The variables to give a job process so it joins the trace: `TRACEPARENT`, and
/// `TRACESTATE` only when it is not empty.
pub fn job_env(traceparent: Option<&str>, tracestate: Option<&str>) -> Vec<(&'static str, String)> {
    let Some(parent) = traceparent.filter(|p| TraceContext::parse(p).is_some()) else {
        return Vec::new();
    };
    let mut vars = vec![(TRACEPARENT, parent.to_string())];
    if let Some(state) = tracestate.map(str::trim).filter(|s| !s.is_empty()) {
        vars.push((TRACESTATE, state.to_string()));
    }
    vars
}

/// Environment variables read as a W3C carrier (keys upper-cased).
struct EnvCarrier<'a>(&'a HashMap<String, String>);

impl Extractor for EnvCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(&key.to_ascii_uppercase()).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct EnvInjector(Vec<(&'static str, String)>);

impl Injector for EnvInjector {
    fn set(&mut self, key: &str, value: String) {
        let name = match key {
            "traceparent" => TRACEPARENT,
            "tracestate" => TRACESTATE,
            _ => return,
        };
        if !value.is_empty() {
            self.0.push((name, value));
        }
    }
}

/// For `madeira exec` and job runners: the trace context a process was given in
/// `vars` (its environment), continued by a new child span whose context is
/// returned with the variables to hand on to the wrapped command. `None` when
/// `vars` carries no valid `TRACEPARENT`.
pub fn continue_from_env(
    vars: &HashMap<String, String>,
) -> Option<(TraceContext, Vec<(&'static str, String)>)> {
    let propagator = TraceContextPropagator::new();
    let cx = propagator.extract(&EnvCarrier(vars));
    let parent = cx.span().span_context().clone();
    if !parent.is_valid() {
        return None;
    }
    let child = TraceContext {
        trace_id: parent.trace_id().to_bytes(),
        span_id: rand::random::<[u8; 8]>(),
        flags: parent.trace_flags().to_u8(),
    };
    let child_cx =
        opentelemetry::Context::new().with_remote_span_context(opentelemetry::trace::SpanContext::new(
            parent.trace_id(),
            opentelemetry::trace::SpanId::from_bytes(child.span_id),
            parent.trace_flags(),
            true,
            parent.trace_state().clone(),
        ));
    let mut injector = EnvInjector(Vec::new());
    propagator.inject_context(&child_cx, &mut injector);
    Some((child, injector.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_tracestate_is_not_passed() {
        let p = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(job_env(Some(p), Some("")), vec![(TRACEPARENT, p.to_string())]);
        assert_eq!(job_env(Some(p), Some("k=v")).len(), 2);
        assert!(job_env(Some("garbage"), None).is_empty());
        assert!(job_env(None, None).is_empty());
    }

    #[test]
    fn exec_continues_the_trace_with_a_child_span() {
        let vars = HashMap::from([
            (TRACEPARENT.to_string(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string()),
            (TRACESTATE.to_string(), "vendor=x".to_string()),
        ]);
        let (child, env) = continue_from_env(&vars).expect("continued");
        assert_eq!(child.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(child.span_id_hex(), "00f067aa0ba902b7");
        let traceparent = &env.iter().find(|(k, _)| *k == TRACEPARENT).expect("traceparent").1;
        assert_eq!(TraceContext::parse(traceparent), Some(child));
        assert!(env.iter().any(|(k, v)| *k == TRACESTATE && v == "vendor=x"));
        assert!(continue_from_env(&HashMap::new()).is_none());
    }
}
