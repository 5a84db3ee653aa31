//! The metrics observer against a real registry: counters and histograms per
//! event, gauges that survive duplicate announcements and a restart.

use std::sync::Arc;
use std::time::Duration;

use madeira_core::{NodeState, RunSnapshot, RunState};
use madeira_engine::{AttemptOutcome, EngineObserver, RunEvent};

use crate::{Telemetry, TelemetryOptions};

fn event(run: &str, node: Option<&str>, from: &str, to: &str) -> RunEvent {
    RunEvent {
        run_id: run.into(),
        flow: "settle".into(),
        node: node.map(str::to_string),
        from: from.into(),
        to: to.into(),
        cause: "test".into(),
        attempt: 1,
        reason: None,
        at_ms: 1_700_000_000_000,
    }
}

fn snapshot(run: &str) -> RunSnapshot {
    let flow = madeira_core::spec::parse_flow(
        "t.yaml",
        "flow: settle\nnodes:\n  a: {run: {builtin: noop}}\n  ok: {needs: [a], manual: {prompt: sure?}}\n",
    )
    .expect("flow");
    let mut snap = RunSnapshot::new(run.into(), Arc::new(flow), serde_json::json!({}));
    snap.state = RunState::Running;
    snap.nodes[1].state = NodeState::ManualConfirm;
    snap
}

fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn observer_feeds_every_family() {
    let telemetry = Telemetry::new(&TelemetryOptions::default()).expect("telemetry");
    let o = telemetry.metrics_observer().clone();
    // A run resumed twice (restart, then a failed commit) counts once.
    o.run_resumed(&snapshot("r1"));
    o.run_resumed(&snapshot("r1"));
    o.dispatched("settle", "a", Duration::from_micros(300));
    o.attempt_finished(&AttemptOutcome {
        run_id: "r1",
        flow: "settle",
        node: "a",
        attempt: 1,
        outcome: "RETRYABLE",
        error: Some("boom"),
        duration: Duration::from_secs(90),
    });
    o.transitions(&[event("r1", Some("a"), "RUNNING", "RETRYING")]);
    o.throttle("settle", "a", 2, 5);
    o.cron_fired("settle", Duration::from_secs(3));
    o.cron_clock_jump(7_200_000);
    o.next_run("settle", Some(1_700_000_600.0));
    o.next_deadline("settle", Some(1_700_021_600.0));
    let text = telemetry.finish().exposition.render_text();
    assert_eq!(sample(&text, "madeira_runs_active{flow=\"settle\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "madeira_manual_confirm_pending{flow=\"settle\",node=\"ok\"}"), Some(1.0));
    assert_eq!(sample(&text, "madeira_node_retries_total{flow=\"settle\",node=\"a\"}"), Some(1.0));
    assert_eq!(
        sample(&text, "madeira_node_attempts_total{flow=\"settle\",node=\"a\",status=\"RETRYABLE\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "madeira_node_duration_seconds_bucket{le=\"60.0\",flow=\"settle\",node=\"a\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "madeira_node_duration_seconds_bucket{le=\"120.0\",flow=\"settle\",node=\"a\"}"),
        Some(1.0)
    );
    assert_eq!(sample(&text, "madeira_dispatch_latency_seconds_bucket{le=\"0.0005\"}"), Some(1.0));
    assert_eq!(sample(&text, "madeira_node_queue_depth{flow=\"settle\",node=\"a\"}"), Some(5.0));
    assert_eq!(sample(&text, "madeira_node_permits_in_use{flow=\"settle\",node=\"a\"}"), Some(2.0));
    assert_eq!(sample(&text, "madeira_cron_lateness_seconds_count{flow=\"settle\"}"), Some(1.0));
    assert_eq!(sample(&text, "madeira_cron_clock_jumps_total"), Some(1.0), "{text}");
    assert_eq!(
        sample(&text, "madeira_flow_next_run_timestamp_seconds{flow=\"settle\"}"),
        Some(1_700_000_600.0)
    );
    assert_eq!(
        sample(&text, "madeira_flow_deadline_seconds{flow=\"settle\"}"),
        Some(1_700_021_600.0),
        "{text}"
    );
    assert!(text.contains("madeira_build_info{"), "{text}");
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
}

#[test]
fn finished_runs_leave_the_gauges_and_count_once() {
    let telemetry = Telemetry::new(&TelemetryOptions::default()).expect("telemetry");
    let o = telemetry.metrics_observer().clone();
    o.run_resumed(&snapshot("r1"));
    o.transitions(&[
        event("r1", Some("ok"), "MANUAL_CONFIRM", "SUCCESS"),
        event("r1", None, "RUNNING", "SUCCESS"),
    ]);
    o.run_finished(&snapshot("r1"));
    // A finished snapshot announced after its end is not active.
    let mut done = snapshot("r2");
    done.state = RunState::Success;
    o.run_resumed(&done);
    let text = telemetry.finish().exposition.render_text();
    assert_eq!(sample(&text, "madeira_runs_active{flow=\"settle\"}"), Some(0.0), "{text}");
    assert_eq!(sample(&text, "madeira_manual_confirm_pending{flow=\"settle\",node=\"ok\"}"), Some(0.0));
    assert_eq!(sample(&text, "madeira_runs_total{flow=\"settle\",status=\"SUCCESS\"}"), Some(1.0));
    assert_eq!(
        sample(&text, "madeira_flow_last_success_timestamp_seconds{flow=\"settle\"}"),
        Some(1_700_000_000.0)
    );
}

#[test]
fn metrics_off_means_no_metrics_observer() {
    let options = TelemetryOptions { metrics: false, ..Default::default() };
    let telemetry = Telemetry::new(&options).expect("telemetry");
    assert!(telemetry.observers().is_empty());
    assert!(!telemetry.tracing());
}
