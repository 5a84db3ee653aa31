//! The control plane's metric families (SPEC §8), registered on the registry they
//! are given. Labels are bounded: flow, node and status names only, never run ids.
//! Buckets: node durations span sub-second builtins to multi-hour batch jobs;
//! dispatch latency spans 100 µs to 10 s; cron lateness 100 ms to an hour.

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Upper bounds (seconds) for node durations: 10 ms .. 24 h.
pub const NODE_DURATION_BUCKETS: [f64; 20] = [
    0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
    7200.0, 14400.0, 28800.0, 86400.0,
];

/// Upper bounds (seconds) for ready -> running: 100 µs .. 10 s.
pub const DISPATCH_LATENCY_BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Upper bounds (seconds) for scheduled -> started of cron runs: 100 ms .. 1 h.
pub const CRON_LATENESS_BUCKETS: [f64; 12] =
    [0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlowLabels {
    pub flow: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlowStatusLabels {
    pub flow: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub flow: String,
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeStatusLabels {
    pub flow: String,
    pub node: String,
    pub status: String,
}

/// A metric whose `# HELP`/`# TYPE` lines are served even before it has a series,
/// so dashboards, alert rules and `promtool` see every family from the start.
#[derive(Debug, Clone)]
pub struct Declared<M>(pub M);

impl<M: EncodeMetric + std::fmt::Debug + Send + Sync + 'static> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, AtomicU64>;

fn node_duration() -> Histogram {
    Histogram::new(NODE_DURATION_BUCKETS)
}

fn cron_lateness() -> Histogram {
    Histogram::new(CRON_LATENESS_BUCKETS)
}

/// Every control-plane metric of SPEC §8 (alert and sidecar families are
/// registered by their own components on the same registry).
#[derive(Debug, Clone)]
pub struct Metrics {
    pub runs: Family<FlowStatusLabels, Counter>,
    pub runs_active: Family<FlowLabels, Gauge>,
    pub node_attempts: Family<NodeStatusLabels, Counter>,
    pub node_duration: HistogramFamily<NodeLabels>,
    pub node_retries: Family<NodeLabels, Counter>,
    pub node_queue_depth: Family<NodeLabels, Gauge>,
    pub node_permits_in_use: Family<NodeLabels, Gauge>,
    pub dispatch_latency: Histogram,
    pub cron_lateness: HistogramFamily<FlowLabels>,
    pub flow_next_run: Family<FlowLabels, FloatGauge>,
    /// `deadline:` of the flow: the next instant a business date's run must be SUCCESS by.
    pub flow_deadline: Family<FlowLabels, FloatGauge>,
    pub flow_last_success: Family<FlowLabels, FloatGauge>,
    /// Not in SPEC §8's fixed list: the scheduled instant of the latest cron fire,
    /// which the "flow has not succeeded since it was due" alert compares with
    /// the last success.
    pub flow_last_scheduled: Family<FlowLabels, FloatGauge>,
    pub manual_confirm_pending: Family<NodeLabels, Gauge>,
    /// Nodes waiting in INIT for their executor longer than their `stall_after`.
    pub nodes_stalled: Family<NodeLabels, Gauge>,
    /// Nodes RUNNING longer than their `warn_after`.
    pub nodes_slow: Family<NodeLabels, Gauge>,
    /// Not in SPEC §8's fixed list: 1 while the store takes writes, 0 while
    /// commits fail (disk full, I/O error, lost connection, deleted file).
    pub store_up: Gauge,
    /// Times the store stopped taking writes.
    pub store_outages: Counter,
    /// Wall-clock jumps (either way) the cron scheduler saw.
    pub cron_clock_jumps: Counter,
}

impl Metrics {
    /// Creates the families and registers them on `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            runs: Family::default(),
            runs_active: Family::default(),
            node_attempts: Family::default(),
            node_duration: Family::new_with_constructor(node_duration),
            node_retries: Family::default(),
            node_queue_depth: Family::default(),
            node_permits_in_use: Family::default(),
            dispatch_latency: Histogram::new(DISPATCH_LATENCY_BUCKETS),
            cron_lateness: Family::new_with_constructor(cron_lateness),
            flow_next_run: Family::default(),
            flow_deadline: Family::default(),
            flow_last_success: Family::default(),
            flow_last_scheduled: Family::default(),
            manual_confirm_pending: Family::default(),
            nodes_stalled: Family::default(),
            nodes_slow: Family::default(),
            store_up: Gauge::default(),
            store_outages: Counter::default(),
            cron_clock_jumps: Counter::default(),
        };
        m.store_up.set(1);
        let r = registry;
        r.register("madeira_runs", "Finished runs by final status", Declared(m.runs.clone()));
        r.register("madeira_runs_active", "Runs RUNNING now", Declared(m.runs_active.clone()));
        r.register(
            "madeira_node_attempts",
            "Finished node attempts by outcome (SUCCESS, FAILED, RETRYABLE)",
            Declared(m.node_attempts.clone()),
        );
        r.register(
            "madeira_node_duration_seconds",
            "Duration of node attempts",
            Declared(m.node_duration.clone()),
        );
        r.register(
            "madeira_node_retries",
            "Failed attempts that will be retried",
            Declared(m.node_retries.clone()),
        );
        r.register(
            "madeira_node_queue_depth",
            "Ready attempts waiting for a throttle permit",
            Declared(m.node_queue_depth.clone()),
        );
        r.register(
            "madeira_node_permits_in_use",
            "Throttle permits held by running attempts",
            Declared(m.node_permits_in_use.clone()),
        );
        r.register(
            "madeira_dispatch_latency_seconds",
            "Time from a node being ready to its attempt running",
            Declared(m.dispatch_latency.clone()),
        );
        r.register(
            "madeira_cron_lateness_seconds",
            "Time from a cron run's scheduled instant to its start",
            Declared(m.cron_lateness.clone()),
        );
        r.register(
            "madeira_flow_next_run_timestamp_seconds",
            "Next scheduled fire instant of the flow (Unix seconds)",
            Declared(m.flow_next_run.clone()),
        );
        r.register(
            "madeira_flow_deadline_seconds",
            "Next deadline of the flow: when the run of its business date must be SUCCESS by (Unix seconds)",
            Declared(m.flow_deadline.clone()),
        );
        r.register(
            "madeira_flow_last_success_timestamp_seconds",
            "When the flow's latest successful run finished (Unix seconds)",
            Declared(m.flow_last_success.clone()),
        );
        r.register(
            "madeira_flow_last_scheduled_timestamp_seconds",
            "Scheduled instant of the flow's latest cron fire (Unix seconds)",
            Declared(m.flow_last_scheduled.clone()),
        );
        r.register(
            "madeira_manual_confirm_pending",
            "Nodes waiting in MANUAL_CONFIRM",
            Declared(m.manual_confirm_pending.clone()),
        );
        r.register(
            "madeira_nodes_stalled",
            "Nodes waiting in INIT for their executor (e.g. no live sidecar of the group) longer than their stall_after",
            Declared(m.nodes_stalled.clone()),
        );
        r.register(
            "madeira_nodes_slow",
            "Nodes RUNNING longer than their warn_after",
            Declared(m.nodes_slow.clone()),
        );
        r.register(
            "madeira_store_up",
            "1 while the store takes writes, 0 while they fail",
            m.store_up.clone(),
        );
        r.register("madeira_store_outages", "Times the store stopped taking writes", m.store_outages.clone());
        r.register(
            "madeira_cron_clock_jumps",
            "Wall-clock jumps (forward or back, against the monotonic clock) the cron scheduler saw",
            m.cron_clock_jumps.clone(),
        );
        m
    }
}

pub(crate) fn flow(flow: &str) -> FlowLabels {
    FlowLabels { flow: flow.to_string() }
}

pub(crate) fn node(flow: &str, node: &str) -> NodeLabels {
    NodeLabels { flow: flow.to_string(), node: node.to_string() }
}
