//! Madeira's alerting (SPEC §7). A failed run produces one alert naming its root
//! cause (the first FAILED nodes, with the error, the attempts and the nodes
//! skipped because of them); related failures are grouped for `group_wait`; a run
//! that later succeeds resolves it. Alerts are routed by flow labels and severity
//! to WeCom, DingTalk, Feishu, signed webhooks and Alertmanager, within each
//! channel's rate limit (overflow merged into a digest), retried with jittered
//! backoff, and kept in the store so a restart delivers what was pending.
//!
//! Anatomy: `AlertsConfig` (serde) → `resolve()` → `Settings` → `build()` →
//! `AlertTask::run(cancel)` owns the loop; `AlertHandle` is the cheap handle and
//! `AlertHandle::observer()` the engine hook. `AlertTask::clustered` shares the
//! work among replicas of one store (see `cluster`).

mod aggregate;
pub mod channel;
mod clock;
mod cluster;
mod config;
mod handle;
mod metrics;
mod model;
mod observer;
mod probe;
mod recover;
mod render;
mod route;
mod secret;
pub mod sign;
mod task;
mod view;
mod window;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;

use madeira_store::AlertStore;
use tokio::sync::mpsc;

pub use aggregate::{Aggregator, Changes, Intervals, MarkKind, error_class};
pub use channel::ChannelKind;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{AlertConfigError, AlertsConfig, ChannelConfig, ChannelSpec, Route, RouteConfig, Settings};
pub use handle::AlertHandle;
pub use metrics::AlertMetrics;
pub use model::{Alert, AlertStatus, Cause, Failure, Mark, Raise, Severity};
pub use observer::{AlertObserver, confirm_key, failure_of, missed_key, slow_key, stall_key};
pub use probe::StoreProbe;
pub use secret::Secret;
pub use task::AlertTask;
pub use task::NodeProbe;
pub use worker::TestOutcome;

#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error(transparent)]
    Store(#[from] madeira_store::StoreError),
    #[error("alert {id}: unreadable stored details: {detail}")]
    Corrupt { id: String, detail: String },
    #[error("no alert channel named `{name}`; configured channels: {known}")]
    UnknownChannel { name: String, known: String },
    #[error("channel {0}: no answer to the test message within 60 s")]
    TestTimedOut(String),
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
    #[error("the alert task is shutting down")]
    ShuttingDown,
    #[error("alert {0} not found")]
    NotFound(String),
    #[error(
        "alert {0} is not open (unknown, or resolved already): only a pending or firing alert can be acknowledged or silenced"
    )]
    NotOpen(String),
}

/// Builds the alert task and its handle. Run the task with `AlertTask::run`.
pub fn build(
    settings: Settings,
    store: Arc<dyn AlertStore>,
    metrics: AlertMetrics,
    clock: Arc<dyn Clock>,
) -> Result<(AlertTask, AlertHandle), AlertError> {
    // Building the client loads the system's CA certificates (a fifth of a
    // `madeira bench` process's instructions, and memory held for good): only
    // when some channel will send.
    let http = if settings.channels.is_empty() {
        None
    } else {
        let client = reqwest::Client::builder()
            .user_agent(concat!("madeira/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| AlertError::Http(e.to_string()))?;
        Some(client)
    };
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4);
    let shared = Arc::new(worker::Shared {
        store: store.clone(),
        clock,
        metrics,
        base: settings.external_url.clone(),
        retry: settings.retry.clone(),
        give_up_after_ms: ms(settings.give_up_after),
        resend_every_ms: ms(settings.resend_every),
    });
    let mut workers = HashMap::new();
    let mut idle_workers = Vec::new();
    for (spec, http) in settings.channels.iter().zip(http.iter().cycle()) {
        let (worker, tx) = worker::Worker::new(spec.clone(), shared.clone(), http.clone());
        workers.insert(spec.name.clone(), tx);
        idle_workers.push(worker);
    }
    let intervals = aggregate::Intervals {
        group_wait_ms: ms(settings.group_wait),
        group_interval_ms: ms(settings.group_interval),
        repeat_interval_ms: ms(settings.repeat_interval),
    };
    let channels = Arc::new(settings.channels.iter().map(|c| (c.name.clone(), c.kind)).collect());
    let (tx, rx) = mpsc::unbounded_channel();
    let task = AlertTask {
        shared,
        rx,
        agg: aggregate::Aggregator::with_intervals(intervals),
        router: route::Router::new(settings.routes.clone(), &settings.channels),
        workers,
        idle_workers,
        retention_ms: ms(settings.retention),
        intervals,
        cluster: None,
        probe: None,
    };
    Ok((task, AlertHandle { tx, store, channels }))
}
