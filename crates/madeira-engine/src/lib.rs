//! Madeira's engine: the one writer of run state. Triggers go to the run creator
//! (`creator.rs`), which has the store admit and create runs in one transaction:
//! the store gathers the flow's facts under its lock and writes what
//! `madeira_core::admit` decides (idempotency, overlap, throttle queues): the run
//! ADMITTED when it may start, else QUEUED, with its creation edge (promotion of
//! QUEUED runs, QUEUED -> ADMITTED, likewise through `admit::promote`). An
//! ADMITTED run enters the planner as `Command::Start` (ADMITTED -> RUNNING),
//! the only way a run starts; `Command::Recover` is for recovery only
//! (`engine_loop/starts.rs`). Every other command (executor results, timers,
//! operator actions) arrives on a channel; the loop applies each to the run's
//! snapshot with the core planner, group-commits every resulting transition in
//! one store transaction, and only then acts (starts attempts, arms timers,
//! answers callers); a failed commit answers `StoreError::Unavailable`/`Refused`
//! and drops the touched runs from memory (`health.rs` tracks whether the store
//! takes writes). Recovery on start resumes every unfinished run: RUNNING ones
//! are recovered, ADMITTED ones started, QUEUED ones promoted.

mod after_policy;
pub mod archiver;
pub mod backfill;
mod bizdates;
mod calendar_apply;
mod calendars;
mod clock;
mod creator;
mod deadlines;
mod durations;
mod engine_loop;
mod envelope;
pub mod estate;
pub mod estate_map;
pub mod events;
pub mod executor;
pub mod fallbacks;
mod flows;
mod forward;
mod gate;
mod handle;
mod health;
pub mod holds;
mod lease;
pub mod lifecycle;
pub mod livelog;
mod missed;
pub mod node_after;
pub mod observed;
mod observer;
mod partitions;
pub mod promote;
mod record;
mod retention;
mod scheduler;
mod snapshot;
mod stats;
mod subflow;
mod throttle;
mod timers;
mod trace;
mod waited;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use madeira_store::Store;
use tokio::sync::{broadcast, mpsc};

pub use backfill::{BackfillCreated, BackfillRequest};
pub use calendars::CalendarOrigin;
pub use clock::now_ms;
pub use deadlines::DeadlineWatcher;
pub use durations::DurationWatcher;
pub use engine_loop::Engine;
pub use events::{DrainReport, EventDrainer, EventOutcome, Listener, QueuedAnswer};
pub use executor::{AttemptResult, Executor, Executors, HttpPolicy, Job};
pub use flows::{ApplyOutcome, FlowCache};
pub use gate::WaitingNodes;
pub use handle::{ActionRequest, EngineHandle, NodeActionKind, TriggerOutcome, TriggerRequest};
pub use lifecycle::{DeleteReport, DeleteRequest, PromoteReport, PromoteRequest};
pub use livelog::{LiveLogs, LogSlice};
pub use observed::ObservedReport;
pub use observer::{AlertSource, AttemptOutcome, BusinessAlert, EngineObserver, HeldRun, NodeWatch};
pub use scheduler::{Scheduler, WallClock};
pub use stats::{EngineStats, StatsSnapshot};
pub use throttle::{ThrottleState, ThrottleView};
pub use trace::{SpanEnded, SpanKind, TraceContext};

/// Engine settings (from the server config).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Most commands applied in one group commit.
    pub batch_max: usize,
    /// Finished runs older than this are pruned.
    pub retention: Duration,
    /// A run finished this long ago is folded into one archive row (its nodes,
    /// attempts, outputs and transitions); `None`: never.
    pub archive_after: Option<Duration>,
    /// How often the archiver looks for runs to fold.
    pub archive_every: Duration,
    /// How often the retention sweep and the safety-net reconcile run.
    pub sweep_every: Duration,
    /// Largest outputs object an attempt may produce, in bytes of JSON.
    pub max_output_bytes: usize,
    pub http: HttpPolicy,
    /// This replica's name, written as the owner of the runs it holds. Replicas
    /// sharing a store need distinct ones; a restarted replica with the same name
    /// takes its runs back at once, others after `lease`.
    pub replica_id: String,
    /// How long a replica's hold on a run lasts without renewal (renewed every third).
    pub lease: Duration,
    /// Redis for cross-replica wake-ups (`None`: the store is polled instead).
    pub redis: Option<String>,
    /// How often the inbox of forwarded actions (and waiting global permits) is
    /// polled while wake-ups are down.
    pub inbox_poll: Duration,
    /// Several replicas may share the store (PostgreSQL): `throttle.max_permits`
    /// is counted in the store across replicas (otherwise in this process only),
    /// and a run whose node waits for a sidecar group this replica has no sidecar
    /// of is handed to a replica that has one.
    pub shared_store: bool,
    /// Report run and attempt spans to observers (`EngineObserver::span_ended`).
    /// Every attempt gets its W3C `traceparent` (`Job::traceparent`) either way.
    pub tracing: bool,
    /// Live output kept per attempt, in bytes (older bytes are dropped with a marker).
    pub live_log_bytes: usize,
    /// The server's message sources `(name, type)` that flows' message triggers may name.
    pub message_sources: Vec<(String, String)>,
    /// The server's SQL datasources, which flows' SQL nodes may name (checked on apply).
    pub datasources: Vec<String>,
    /// The server's calendars (built-in ones plus the config's and calendar files'),
    /// which cron triggers and CEL date functions may name (checked on apply).
    pub calendars: madeira_calendar::Calendars,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            batch_max: 128,
            retention: Duration::from_secs(30 * 24 * 3600),
            archive_after: Some(Duration::from_secs(300)),
            archive_every: archiver::EVERY,
            sweep_every: Duration::from_secs(60),
            max_output_bytes: 64 * 1024,
            http: HttpPolicy::default(),
            replica_id: "local".to_string(),
            lease: Duration::from_secs(15),
            redis: None,
            inbox_poll: Duration::from_millis(250),
            shared_store: false,
            tracing: false,
            live_log_bytes: livelog::DEFAULT_MAX_BYTES,
            message_sources: Vec::new(),
            datasources: Vec::new(),
            calendars: madeira_calendar::Calendars::builtin(),
        }
    }
}

/// Errors the engine answers callers with.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] madeira_store::StoreError),
    #[error("flow {0} not found")]
    FlowNotFound(String),
    #[error("flow {flow} version {version} not found")]
    VersionNotFound { flow: String, version: u32 },
    #[error("run {0} not found")]
    RunNotFound(String),
    #[error("run {run}: node {node} not found")]
    NodeNotFound { run: String, node: String },
    #[error("{0}")]
    Invalid(#[from] madeira_core::spec::SpecErrors),
    #[error("flow {flow}: the stored version {version} no longer parses: {message}")]
    BadStoredFlow { flow: String, version: u32, message: String },
    #[error("run {run}: {refusal}")]
    Refused { run: String, refusal: madeira_core::Refusal },
    /// A cron tick, event or message for a paused flow reached the store after
    /// the pause (the store refuses it under the flow's lock).
    #[error("flow {0} is paused: its cron, event and message triggers start no run until it is resumed")]
    Paused(String),
    #[error("flow {flow} already has {active} active run(s) and on_overlap is skip")]
    OverlapSkipped { flow: String, active: usize },
    #[error(
        "flow {flow}: node {node} is full ({claims} runs hold or wait for its {max_permits} permits, queue_size \
         {queue_size}); retry later or raise throttle.queue_size"
    )]
    QueueFull { flow: String, node: String, claims: u32, max_permits: u32, queue_size: u32 },
    #[error(
        "flow {flow} is paused and {queued} `{event_type}` event(s) already wait for it (max_queued {limit}); \
         resume it, raise the trigger's max_queued or set on_paused: drop. Flows listening before it took \
         the event: sending the same id again later makes no second run"
    )]
    PausedQueueFull { flow: String, event_type: String, queued: u64, limit: u32 },
    #[error(
        "flow {flow} has {} active run(s) ({}); wait for them, cancel them, or delete with --cancel",
        runs.len(), runs.join(", ")
    )]
    FlowActive { flow: String, runs: Vec<String> },
    /// Promote/demote refused: `code` for the API, the message names the fix.
    #[error("{message}")]
    Lifecycle { code: &'static str, message: String },
    #[error("flow {0} is observe-only: its runs are reported by `madeira exec`, never dispatched")]
    ObserveOnly(String),
    #[error("run {run} is held by replica {owner}, which has attempts of it in flight; retry once they end")]
    HeldElsewhere { run: String, owner: String },
    #[error("replica {owner} holds the run but did not take the action in time; nothing was done")]
    HolderSilent { owner: String },
    /// The holder of the run refused or failed the forwarded action.
    #[error("{message}")]
    Remote { code: String, message: String, state: Option<String> },
    #[error("the engine is shutting down")]
    ShuttingDown,
    #[error("backfill {0} not found")]
    BackfillNotFound(String),
    /// A backfill request that cannot be made (the message names the field and the fix).
    #[error("{0}")]
    BadBackfill(String),
    #[error("backfill {id} is {state}: cannot {action} it")]
    BackfillRefused { id: String, state: String, action: &'static str },
    /// Text the store cannot keep (NUL), refused before anything is written.
    #[error("{0}")]
    BadText(String),
    /// A business date that cannot be given or derived (bad text, out of range).
    #[error("{0}")]
    BadBizDate(String),
    /// A caller's `Idempotency-Key` that may not be used (reserved namespace, length).
    #[error("Idempotency-Key `{key}` {problem}")]
    BadIdempotencyKey { key: String, problem: String },
    /// The caller's key already made a run with other params (Stripe's rule).
    #[error(
        "Idempotency-Key `{key}` already made run {run_id} of flow {flow} with other params; \
         use a new key for a different request"
    )]
    IdempotencyKeyReused { key: String, flow: String, run_id: String },
}

/// A state change, broadcast to live viewers (demo, `--wait`, tests).
#[derive(Debug, Clone, PartialEq)]
pub struct RunEvent {
    pub run_id: String,
    pub flow: String,
    /// `None` for a run-level change.
    pub node: Option<String>,
    pub from: String,
    pub to: String,
    pub cause: String,
    pub attempt: u32,
    pub reason: Option<String>,
    pub at_ms: i64,
}

/// Builds the engine and its handle. Run the engine with `Engine::run`.
pub fn build(
    store: Arc<dyn Store>,
    executors: Executors,
    observers: Vec<Arc<dyn EngineObserver>>,
    options: EngineOptions,
) -> (Engine, EngineHandle) {
    let (tx, rx) = mpsc::channel(65_536);
    let (create_tx, create_rx) = mpsc::channel(16_384);
    // Room for a burst (a 500-run settlement commits ~9,000 transitions) before a
    // slow viewer lags; the ring is allocated up front, so its slots hold `Arc`s
    // (tens of bytes each, not the event's ~200).
    let (events, _) = broadcast::channel(16_384);
    // CEL's `cal.*` functions read the server's calendars.
    madeira_core::expr::set_calendars(Arc::new(options.calendars.clone()));
    let flows = FlowCache::with_sources(options.message_sources.clone(), options.datasources.clone())
        .with_calendars(options.calendars.clone());
    let stats = Arc::new(EngineStats::default());
    let health = Arc::new(health::StoreHealth::new(observers.clone()));
    let throttle_view = ThrottleView::default();
    let waiting = WaitingNodes::default();
    let holder = lease::Holder { owner: options.replica_id.clone(), lease: options.lease };
    let (wake, publisher) = wake::Wake::new(options.redis.clone());
    let handle = EngineHandle::new(handle::Shared {
        tx: tx.clone(),
        create: create_tx,
        store: store.clone(),
        flows: flows.clone(),
        events: events.clone(),
        stats: stats.clone(),
        throttle_view: throttle_view.clone(),
        waiting: waiting.clone(),
        holder,
        wake,
        health: health.clone(),
        live_logs: LiveLogs::new(options.live_log_bytes),
    });
    let executors = Arc::new(executors);
    let step = engine_loop::Step::new(engine_loop::StepOptions {
        executors: executors.clone(),
        observers: observers.clone(),
        waiting,
        owner: options.replica_id.clone(),
        shared_store: options.shared_store,
        max_output_bytes: options.max_output_bytes,
        clock: Arc::new(clock::SystemClock),
    });
    let effects = engine_loop::Effects::new(engine_loop::EffectsOptions {
        executors,
        observers,
        events,
        stats,
        throttle_view,
        done: tx.clone(),
    });
    let engine = Engine::new(engine_loop::Wiring {
        handle: handle.clone(),
        store,
        options,
        flows,
        health,
        intake: engine_loop::Intake::new((tx, rx), create_rx, publisher),
        step,
        effects,
    });
    (engine, handle)
}
