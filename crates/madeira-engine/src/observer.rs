//! Hooks for the components that watch the engine (metrics, alerts). The engine
//! calls every observer synchronously after a commit is durable, in commit order;
//! observers must be cheap and must not block (hand work to their own task).

use std::time::Duration;

use madeira_core::RunSnapshot;

use crate::{RunEvent, SpanEnded};

/// How one attempt ended, as observers see it.
#[derive(Debug, Clone)]
pub struct AttemptOutcome<'a> {
    pub run_id: &'a str,
    pub flow: &'a str,
    pub node: &'a str,
    pub attempt: u32,
    /// `SUCCESS`, `FAILED` or `RETRYABLE` (a failure that may be retried).
    pub outcome: &'a str,
    pub error: Option<&'a str>,
    pub duration: Duration,
}

/// A node past its `stall_after` (waiting in INIT for its executor) or its
/// `warn_after` (RUNNING), or — `active: false` — such a node that moved on.
#[derive(Debug, Clone, Copy)]
pub struct NodeWatch<'a> {
    pub run_id: &'a str,
    pub flow: &'a str,
    pub node: &'a str,
    pub labels: &'a std::collections::BTreeMap<String, String>,
    /// The node's `stall_after` or `warn_after`.
    pub after: Duration,
    /// Why it waits (stalls only).
    pub reason: Option<&'a str>,
    pub attempt: u32,
    /// `true` when the threshold passed, `false` when the node moved on.
    pub active: bool,
}

/// An alert about a flow's business date or a run's duration (issue #35): a
/// `depends_on_past` run held by a FAILED previous date, a missed or at-risk
/// deadline, a run or node past its `max_duration`. `key` deduplicates it.
#[derive(Debug, Clone, Copy)]
pub struct BusinessAlert<'a> {
    pub key: &'a str,
    pub alertname: &'a str,
    pub critical: bool,
    pub flow: &'a str,
    /// The node it is about, if one (`max_duration` of a node).
    pub node: Option<&'a str>,
    /// `""` when the run has no business date.
    pub biz_date: &'a str,
    pub summary: &'a str,
    pub run_id: Option<&'a str>,
    /// The FAILED upstream run that holds this flow's run (`after`), when that is
    /// the root cause: the alert joins that run's failure alert instead of paging
    /// on its own.
    pub held_by: Option<&'a str>,
}

/// A run held by `after` behind a FAILED upstream run (`root_run`, directly or
/// through other held runs): the upstream's failure alert lists it, and it does
/// not page on its own (`crate::holds`).
#[derive(Debug, Clone, Copy)]
pub struct HeldRun<'a> {
    pub run_id: &'a str,
    pub flow: &'a str,
    pub biz_date: &'a str,
    pub root_run: &'a str,
    pub root_flow: &'a str,
    /// The upstream's failed node, when known.
    pub root_node: Option<&'a str>,
}

/// What a commit may report to the alert inbox (`EngineObserver::alert_events`).
#[derive(Clone, Copy)]
pub enum AlertSource<'a> {
    /// The commit ends this run.
    RunFinished(&'a RunSnapshot),
    /// A manual confirmation of `node` is past its `alert_after`.
    ConfirmOverdue(&'a RunSnapshot, &'a str),
    /// Node `node` of run `run_id` left MANUAL_CONFIRM (answered, fallen back, cancelled).
    /// `cause`: the transition's (`fallback` when `fallback_after` ran the fallback).
    ConfirmLeft { run_id: &'a str, node: &'a str, cause: &'a str },
    /// A cron instant of an observe-only flow was missed (see `observed_missed`).
    ObservedMissed { flow: &'a str, scheduled_at_ms: i64, what: &'a str },
    /// A cron tick of `flow` could not create its run (`error` says why).
    CronNotCreated { flow: &'a str, scheduled_at_ms: i64, error: &'a str },
    /// An alert about a business date (`EngineObserver::business_alert`).
    Business(BusinessAlert<'a>),
    /// A run held behind a failed upstream run (`EngineObserver::run_held`).
    Held(HeldRun<'a>),
}

#[allow(unused_variables)]
pub trait EngineObserver: Send + Sync {
    /// Every committed state change, in order.
    fn transitions(&self, events: &[RunEvent]) {}
    /// A node went from ready to running after `latency`.
    fn dispatched(&self, flow: &str, node: &str, latency: Duration) {}
    fn attempt_finished(&self, outcome: &AttemptOutcome<'_>) {}
    /// A run reached SUCCESS, FAILED or CANCELLED (its final snapshot).
    fn run_finished(&self, snap: &RunSnapshot) {}
    /// An alert about a business date, raised directly (stores without an
    /// alert inbox; on shared stores it goes through `alert_events`).
    fn business_alert(&self, alert: &BusinessAlert<'_>) {}
    /// A run is held behind a failed upstream run (created so, or its upstream
    /// failed while it waited); raised directly like `business_alert`.
    fn run_held(&self, held: &HeldRun<'_>) {}
    /// Before a commit: an event to write to the store's alert inbox in that same
    /// commit (a transactional outbox: it cannot be lost to a crash after the
    /// commit). Called only on shared stores.
    fn alert_events(&self, source: AlertSource<'_>) -> Vec<String> {
        Vec::new()
    }
    /// The engine took charge of an unfinished run (start, restart, promotion).
    fn run_resumed(&self, snap: &RunSnapshot) {}
    /// Permits in use and waiters of a throttled node changed.
    fn throttle(&self, flow: &str, node: &str, in_use: u32, waiting: usize) {}
    /// A MANUAL_CONFIRM node passed its `alert_after`.
    fn confirm_overdue(&self, snap: &RunSnapshot, node: &str) {}
    /// A cron trigger fired a run `lateness` after its scheduled instant.
    fn cron_fired(&self, flow: &str, lateness: Duration) {}
    /// The cron scheduler saw the wall clock jump by `by_ms` (negative: back)
    /// against the monotonic clock (a step of the system clock, a resumed VM).
    fn cron_clock_jump(&self, by_ms: i64) {}
    /// The next scheduled fire instant of a flow (Unix seconds), or `None` when paused
    /// or unscheduled.
    fn next_run(&self, flow: &str, at_unix_seconds: Option<f64>) {}
    /// The flow's next deadline (`deadline:`), `None` when it has none.
    fn next_deadline(&self, flow: &str, at_unix_seconds: Option<f64>) {}
    /// A run span (run reached a final state) or an attempt span ended; only when
    /// `EngineOptions::tracing` is on.
    fn span_ended(&self, span: &SpanEnded<'_>) {}
    /// A ready node started (`Some(reason)`) or stopped (`None`) waiting in INIT for
    /// its executor, e.g. because no live sidecar of its group declares its job.
    fn node_waiting(&self, run_id: &str, flow: &str, node: &str, reason: Option<&str>) {}
    /// An observe-only flow's cron instant `scheduled_at_ms` had no run that started
    /// (or finished) within the trigger's `grace` (`what` says which).
    fn observed_missed(&self, flow: &str, scheduled_at_ms: i64, what: &str) {}
    /// A cron tick of `flow` at `scheduled_at_ms` could not create its run.
    fn cron_not_created(&self, flow: &str, scheduled_at_ms: i64, error: &str) {}
    /// A cron tick of `flow` fell on a day that is not a business day of `calendar`.
    fn cron_calendar_skipped(&self, flow: &str, calendar: &str) {}
    /// A node waited in INIT for its executor past its `stall_after`, or stopped
    /// waiting after that (checked about every second; see `NodeWatch`).
    fn node_stalled(&self, watch: &NodeWatch<'_>) {}
    /// A node ran past its `warn_after`, or left RUNNING after that.
    fn node_slow(&self, watch: &NodeWatch<'_>) {}
    /// The store stopped (`false`) or resumed (`true`) taking writes.
    fn store_up(&self, up: bool) {}
}
