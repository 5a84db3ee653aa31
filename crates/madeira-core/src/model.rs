//! The validated flow model: what a flow YAML becomes once `spec` accepted it.
//! Nodes are addressed by index (`usize`) in `FlowDef::nodes`; edges are resolved,
//! the DAG is known to be acyclic and `topo` holds a topological order.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::expr::Condition;
use crate::retry::RetryPolicy;

/// A validated flow definition (one version of it).
#[derive(Debug, Clone)]
pub struct FlowDef {
    pub name: String,
    pub description: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub triggers: Vec<TriggerDef>,
    pub concurrency: ConcurrencyDef,
    /// Manual/event trigger rate limit: at most `count` per `per`.
    pub rate_limit: Option<RateLimitDef>,
    pub routing: Option<RoutingDef>,
    /// Observe-only flow (wrapped crontab line): never dispatched, only recorded.
    pub observe: bool,
    /// Business dates and deadlines (`timezone`, `biz_date`, `deadline`).
    pub business: crate::bizdate::BusinessDef,
    pub nodes: Vec<NodeDef>,
    /// Downstream edges per node: `(downstream index, kind)`.
    pub downstream: Vec<Vec<(usize, DepKind)>>,
    /// A topological order of node indexes.
    pub topo: Vec<usize>,
    /// Runs of other flows this flow's run waits for, by business date (`after:`).
    pub after: Vec<AfterDef>,
    /// How long a run waits for its `after` and what it does then.
    pub after_policy: AfterPolicy,
    /// A run of this flow unfinished this long after it started raises one
    /// `MadeiraMaxDuration` warning naming its running nodes; nothing is stopped.
    pub max_duration: Option<Duration>,
}

impl FlowDef {
    /// Whether the flow or one of its nodes has `after:` entries.
    pub fn has_after(&self) -> bool {
        !self.after.is_empty() || self.nodes.iter().any(|n| !n.after.is_empty())
    }

    /// Index of the node named `id`.
    pub fn node_index(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }
}

#[derive(Debug, Clone)]
pub enum TriggerDef {
    Cron(CronTriggerDef),
    Event {
        event: String,
        /// An event arriving while the flow is paused: kept and started on
        /// `resume` (`queue`, the default) or dropped.
        on_paused: OnPaused,
        /// With `on_paused: queue`: at most this many events of this type wait
        /// (default 1000); more are refused (429 `paused_queue_full`).
        max_queued: u32,
    },
    /// Consume a broker (SPEC §6.1); one message makes at most one run.
    Message(Box<MessageTriggerDef>),
    /// `flow_succeeded: F`: a run of `flow` ending SUCCESS starts this flow for
    /// the same business date.
    FlowSucceeded {
        flow: String,
        /// Line of `flow_succeeded:` in the flow file (for estate errors).
        line: Option<usize>,
    },
}

/// One `after:` entry: the run of `flow` (or one of its nodes) for a business date
/// relative to this run's must be SUCCESS before this run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterDef {
    pub flow: String,
    /// A node of `flow` whose SUCCESS is enough; `None`: the whole run.
    pub node: Option<String>,
    /// `date: same` is 0; `date: -N` is N (business) days earlier.
    pub offset: i32,
    /// The calendar counting `offset` in business days; `None`: calendar days.
    pub calendar: Option<String>,
    /// Line of the entry in the flow file.
    pub line: Option<usize>,
}

/// `after_policy: {wait, then}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AfterPolicy {
    /// How long a held run waits; `None`: until its upstream succeeds.
    pub wait: Option<Duration>,
    pub then: AfterThen,
}

/// What a held run does once `after_policy.wait` is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AfterThen {
    /// The run ends FAILED (reason `after_timeout`).
    #[default]
    Fail,
    /// The run ends SKIPPED.
    Skip,
    /// The run starts anyway, marked `after_unmet`.
    Run,
}

impl AfterThen {
    pub const NAMES: &'static [&'static str] = &["fail", "skip", "run"];

    pub fn as_str(self) -> &'static str {
        match self {
            AfterThen::Fail => "fail",
            AfterThen::Skip => "skip",
            AfterThen::Run => "run",
        }
    }
}

/// A message trigger: which configured source to consume, what, and how each
/// message maps to a run. Which of `queue`/`stream`/… a source needs depends on
/// its type, checked when the flow is applied against the server's `sources:`.
#[derive(Debug, Clone)]
pub struct MessageTriggerDef {
    /// Name of a `sources:` entry of the server config.
    pub source: String,
    /// Line of `source:` in the flow file (for errors found at apply time).
    pub line: Option<usize>,
    /// RabbitMQ queue.
    pub queue: Option<String>,
    /// RabbitMQ exchange the queue is bound to, with `binding_key`.
    pub exchange: Option<String>,
    pub binding_key: Option<String>,
    /// NATS JetStream stream or Redis stream.
    pub stream: Option<String>,
    /// NATS JetStream durable consumer.
    pub consumer: Option<String>,
    /// NATS JetStream subject filter.
    pub subject: Option<String>,
    /// Redis Streams consumer group.
    pub group: Option<String>,
    /// The run key (default: the broker's message id).
    pub key: Option<crate::expr::MessageExpr>,
    /// Run params, each CEL over the message (default: the payload itself).
    pub params: Vec<(String, crate::expr::MessageExpr)>,
    /// The run's business date (`YYYY-MM-DD`), CEL over the message; default:
    /// the flow's `biz_date` rule applied to the time it is consumed.
    pub biz_date: Option<crate::expr::MessageExpr>,
    /// Only messages for which this holds make runs; others are acked as `filtered`.
    pub when: Option<crate::expr::MessageExpr>,
    /// At most this many unacknowledged messages at once (default 64).
    pub max_in_flight: u32,
    /// A refused message is dead-lettered on this delivery (default 5).
    pub max_deliveries: u32,
    pub on_paused: OnPaused,
}

/// What an event or message trigger does while its flow is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnPaused {
    /// Keep them (events in the store, messages in the broker); they make runs
    /// after `resume` (default).
    Queue,
    /// Acknowledge and drop them.
    Drop,
}

impl OnPaused {
    pub fn as_str(self) -> &'static str {
        match self {
            OnPaused::Queue => "queue",
            OnPaused::Drop => "drop",
        }
    }
}

#[derive(Debug, Clone)]
pub struct CronTriggerDef {
    /// The expression as written (5 or 6 fields, or an `@daily`-style alias).
    pub expr: String,
    /// IANA timezone name; `UTC` when not given.
    pub timezone: String,
    pub misfire: Misfire,
    pub jitter: Duration,
    /// How late a run of an observed job may start before it counts as missed.
    pub grace: Option<Duration>,
    /// How far back `run_all` catches up after downtime.
    pub catchup_window: Duration,
    /// `calendar:` — ticks only on that calendar's business days.
    pub calendar: Option<TriggerCalendar>,
}

/// A cron trigger's `calendar:` and `calendar_mode:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerCalendar {
    /// A calendar name, checked against the server's calendars on apply.
    pub name: String,
    pub mode: madeira_calendar::CalendarMode,
    /// Line of `calendar:` in the flow file (for errors found at apply time).
    pub line: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misfire {
    Skip,
    RunOnce,
    RunAll,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcurrencyDef {
    pub max_active_runs: u32,
    pub on_overlap: OnOverlap,
    /// The run for business date D starts only once the run for the previous
    /// business date is SUCCESS (`crate::bizdate::previous_date`).
    pub depends_on_past: bool,
}

impl Default for ConcurrencyDef {
    fn default() -> Self {
        Self { max_active_runs: 0, on_overlap: OnOverlap::Queue, depends_on_past: false }
    }
}

/// What a trigger does when `max_active_runs` runs are already active.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOverlap {
    Queue,
    Skip,
    CancelPrevious,
}

impl OnOverlap {
    pub fn as_str(self) -> &'static str {
        match self {
            OnOverlap::Queue => "queue",
            OnOverlap::Skip => "skip",
            OnOverlap::CancelPrevious => "cancel_previous",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitDef {
    pub count: u32,
    pub per: Duration,
}

#[derive(Debug, Clone)]
pub struct RoutingDef {
    pub default: u32,
    pub rules: Vec<RoutingRule>,
}

#[derive(Debug, Clone)]
pub struct RoutingRule {
    pub when: Condition,
    pub version: u32,
}

#[derive(Debug, Clone)]
pub struct NodeDef {
    pub id: String,
    pub needs: Vec<Need>,
    pub when: Option<Condition>,
    pub action: NodeAction,
    pub timeout: Duration,
    pub retry: RetryPolicy,
    pub throttle: Option<ThrottleDef>,
    /// Waiting in INIT for its executor (no live sidecar of its group) longer than
    /// this raises a `MadeiraNodeStalled` warning (default 10m).
    pub stall_after: Duration,
    /// RUNNING longer than this raises a `MadeiraNodeSlow` warning; nothing is stopped.
    pub warn_after: Option<Duration>,
    /// `foreach:` — the node runs once per item of a list (`crate::foreach`).
    pub foreach: Option<crate::foreach::ForeachDef>,
    /// Unfinished this long after its first attempt of the series started (its
    /// retries, their backoff and a manual wait included) raises one
    /// `MadeiraMaxDuration` warning per run and node; nothing is stopped.
    pub max_duration: Option<Duration>,
    /// Node-level `after:`: this node stays INIT until these upstream runs (or
    /// nodes) for its run's business date are SUCCESS; the run's other nodes go on.
    pub after: Vec<AfterDef>,
}

impl NodeDef {
    pub fn is_manual(&self) -> bool {
        matches!(self.action, NodeAction::Manual(_))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub upstream: usize,
    pub kind: DepKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DepKind {
    /// Runs only if the upstream ended SUCCESS.
    Strong,
    /// Runs once the upstream is terminal, whatever its outcome.
    Weak,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleDef {
    pub max_permits: u32,
    pub queue_size: u32,
}

#[derive(Debug, Clone)]
pub enum NodeAction {
    Run(ExecutorDef),
    Manual(ManualDef),
}

#[derive(Debug, Clone)]
pub struct ManualDef {
    pub prompt: String,
    pub alert_after: Option<Duration>,
    pub fallback_after: Option<Duration>,
    pub fallback: Option<ExecutorDef>,
    /// How the node ends when its fallback succeeds (`fallback: {…, then: skip|success}`).
    pub fallback_then: FallbackThen,
}

/// A manual node's outcome once its fallback executor succeeded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FallbackThen {
    /// SUCCESS, with the fallback's outputs (the default).
    #[default]
    Success,
    /// SKIPPED (reason `fallback_skip`): strong downstream nodes are skipped too.
    Skip,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ExecutorDef {
    Builtin(BuiltinDef),
    Http(HttpDef),
    Sidecar(SidecarDef),
    Sql(SqlDef),
    /// `run: {xxl: …}`: a handler of an XXL-JOB executor registered with this control plane.
    Xxl(XxlDef),
    /// `run: {flow: …, params: …}`: a child run of another flow (`crate::subflow`).
    Subflow(SubflowDef),
}

/// `run: {flow, params}`.
#[derive(Debug, Clone, PartialEq)]
pub struct SubflowDef {
    /// The child flow's name (checked to exist, and not to run this flow back, on apply).
    pub flow: String,
    /// Line of `flow:` in the flow file (for errors found at apply time).
    pub line: Option<usize>,
    /// The child run's params, in file order.
    pub params: Vec<(String, SubflowParam)>,
}

/// One child param: a CEL expression over the parent's `params`, `nodes` and
/// `biz_date` (a YAML string), or a literal (any other YAML value).
#[derive(Debug, Clone, PartialEq)]
pub enum SubflowParam {
    Expr(crate::keyexpr::ValueExpr),
    Literal(serde_json::Value),
}

/// `run: {xxl: {app, handler, params, route, block, timeout, grace}}` (SPEC §14).
#[derive(Debug, Clone, PartialEq)]
pub struct XxlDef {
    /// The executor app (`xxl.job.executor.appname`), one of the server config's `xxl_job.apps`.
    pub app: String,
    /// The `@XxlJob` handler name (`executorHandler`).
    pub handler: String,
    /// `executorParams`: a template; `${run_id}`, `${node}`, `${attempt}`, `${flow}`,
    /// `${traceparent}` and `${params.NAME}` are replaced, anything else is sent as is.
    pub params: String,
    pub route: XxlRoute,
    pub block: XxlBlock,
    /// `executorTimeout` sent to the executor (`None`: the node's timeout).
    pub timeout: Option<Duration>,
    /// How long after `/kill` the node waits for the executor's callback.
    pub grace: Duration,
}

impl XxlDef {
    /// Default `grace` after `/kill`.
    pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);
}

/// XXL-JOB's `ExecutorRouteStrategyEnum`, by Madeira's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XxlRoute {
    First,
    Last,
    Round,
    Random,
    ConsistentHash,
    LeastFrequentlyUsed,
    LeastRecentlyUsed,
    Failover,
    Busyover,
    ShardingBroadcast,
}

impl XxlRoute {
    /// Every route, with its flow-file name and XXL-JOB's enum name.
    pub const ALL: [(XxlRoute, &'static str, &'static str); 10] = [
        (XxlRoute::First, "first", "FIRST"),
        (XxlRoute::Last, "last", "LAST"),
        (XxlRoute::Round, "round", "ROUND"),
        (XxlRoute::Random, "random", "RANDOM"),
        (XxlRoute::ConsistentHash, "consistent_hash", "CONSISTENT_HASH"),
        (XxlRoute::LeastFrequentlyUsed, "least_frequently_used", "LEAST_FREQUENTLY_USED"),
        (XxlRoute::LeastRecentlyUsed, "least_recently_used", "LEAST_RECENTLY_USED"),
        (XxlRoute::Failover, "failover", "FAILOVER"),
        (XxlRoute::Busyover, "busyover", "BUSYOVER"),
        (XxlRoute::ShardingBroadcast, "sharding_broadcast", "SHARDING_BROADCAST"),
    ];

    /// The flow-file name (`first`, `sharding_broadcast`, …).
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(r, _, _)| *r == self).map_or("first", |(_, n, _)| n)
    }
}

/// XXL-JOB's `ExecutorBlockStrategyEnum`: what the executor does with a trigger
/// while the job still runs there (passed through as `executorBlockStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XxlBlock {
    #[default]
    Serial,
    DiscardLater,
    CoverEarly,
}

impl XxlBlock {
    /// Every strategy, with its flow-file name and XXL-JOB's enum name.
    pub const ALL: [(XxlBlock, &'static str, &'static str); 3] = [
        (XxlBlock::Serial, "serial", "SERIAL_EXECUTION"),
        (XxlBlock::DiscardLater, "discard_later", "DISCARD_LATER"),
        (XxlBlock::CoverEarly, "cover_early", "COVER_EARLY"),
    ];

    /// XXL-JOB's name (`SERIAL_EXECUTION`, …).
    pub fn wire(self) -> &'static str {
        Self::ALL.iter().find(|(b, _, _)| *b == self).map_or("SERIAL_EXECUTION", |(_, _, w)| w)
    }
}

/// `run: {sql: …}`: statements against a datasource of the server config.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlDef {
    /// A name in the server config's `datasources:`.
    pub datasource: String,
    /// Line of `datasource` in the flow file, for errors found later (`validate --config`).
    pub datasource_line: Option<usize>,
    /// `statement` (one) or the statements of `script` (run in one transaction).
    pub statements: Vec<String>,
    /// Bind values by name (`:name` in the statements), CEL over `params` and `nodes`.
    pub params: BTreeMap<String, crate::keyexpr::ValueExpr>,
    pub outputs: SqlOutputs,
    /// How long a statement may outlive its cancellation before its session is killed.
    pub grace: Duration,
}

/// What a SQL node's outputs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlOutputs {
    /// The columns of the first row of the last statement (none: no outputs).
    FirstRow,
    /// `{rows: [...], count}`: at most this many rows of the last statement.
    Rows(u32),
    /// `{affected}`: rows changed by all statements.
    Affected,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BuiltinDef {
    pub kind: BuiltinKind,
    /// Become the node's outputs on success.
    pub outputs: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum BuiltinKind {
    Noop,
    Sleep(Duration),
    /// Fails with `message`; when `times` is set, only the first `times` attempts
    /// fail and later ones succeed (for demos and tests of retries).
    Fail {
        message: String,
        times: Option<u32>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpDef {
    pub url: String,
    pub method: String,
    pub headers: BTreeMap<String, String>,
    pub body: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SidecarDef {
    pub group: String,
    pub job: String,
    /// Attempts per node attempt; `SidecarDef::ALL` (`shards: all`): one per live
    /// sidecar of the group (broadcast).
    pub shards: u32,
    /// How an attempt picks a sidecar of the group.
    pub route: SidecarRoute,
}

impl SidecarDef {
    /// `shards: all`.
    pub const ALL: u32 = 0;

    /// One attempt per live sidecar of the group.
    pub fn is_broadcast(&self) -> bool {
        self.shards == Self::ALL
    }
}

/// Routing within a sidecar group.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum SidecarRoute {
    #[default]
    RoundRobin,
    LeastBusy,
    /// Uniformly at random among the live sidecars.
    Random,
    /// Consistent hashing on the value of a CEL expression (`hash_key`).
    Hash(crate::keyexpr::KeyExpr),
}
