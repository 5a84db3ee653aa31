//! The JSON shapes of `/api/v1` as OpenAPI schemas (`utoipa::ToSchema`): the
//! error body every handler answers with, and the responses that `views` and
//! the handlers build. Request bodies and query parameters are the handlers' own
//! types (in `routes`); these are the answers' shapes, checked against real
//! answers by the OpenAPI tests.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Every error: `{"error": {"code", "message", "details"}}`.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

/// What went wrong, for a program (`code`) and for a person (`message`).
#[derive(Serialize, ToSchema)]
pub struct ErrorObject {
    pub code: ErrorCode,
    /// Names the place and the fix.
    pub message: String,
    /// Code-specific facts (`retry_after_seconds`, `state`, `errors`, `known_types`, ...), or null.
    pub details: Value,
}

/// The `{action}` of `POST /flows/{name}/{action}` (the handler answers 404 to any other).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FlowAction {
    Pause,
    Resume,
}

/// The `{action}` of `POST /backfills/{id}/{action}` (the handler answers 404 to any other).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackfillAction {
    Pause,
    Resume,
    Cancel,
}

/// The `{action}` of `POST /runs/{id}/nodes/{node}/{action}` (the handler answers 404 to any other).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NodeAction {
    Confirm,
    Reject,
    Rerun,
    MarkSuccess,
    Skip,
}

/// One Server-Sent Event of `GET .../logs?follow=true` (`text/event-stream`), as
/// its fields: `event: log` carries output, one `event: end` closes the stream.
#[derive(Serialize, ToSchema)]
pub struct LogStreamEvent {
    pub event: LogStreamEventKind,
    /// The byte offset after this event's output: send it back as `Last-Event-ID`
    /// (or `offset`) to resume.
    pub id: String,
    /// JSON text: `log` → `{"attempt", "offset", "text"}`; `end` → `{"attempt",
    /// "offset", "stored"}` (`stored`: the attempt's log is kept in the store).
    pub data: String,
}

/// The `event:` field of a log stream event.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogStreamEventKind {
    Log,
    End,
}

/// Every `code` an error answer can carry.
#[derive(Serialize, ToSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadRequest,
    BadText,
    BadBizDate,
    /// A backfill request that cannot be made (the message names the field).
    BadBackfill,
    BadIdempotencyKey,
    InvalidFlow,
    Unauthorized,
    Forbidden,
    /// `madeira dev`: a browser page of another origin (403).
    CrossOrigin,
    /// `madeira dev`: a `Host` that is not loopback (421, DNS rebinding).
    ForeignHost,
    BadHost,
    NotFound,
    NoListener,
    MethodNotAllowed,
    Refused,
    OverlapSkipped,
    ObserveOnly,
    NotOpen,
    HeldElsewhere,
    IdempotencyKeyReused,
    BodyTooLarge,
    UnsupportedMediaType,
    Unprocessable,
    RateLimited,
    /// Too many failed authentication attempts from the client's address (429).
    TooManyAuthFailures,
    QueueFull,
    Rejected,
    Internal,
    NotImplemented,
    AlertsOff,
    ShuttingDown,
    StoreUnavailable,
    HolderSilent,
    Timeout,
    PausedQueueFull,
    FlowActive,
    ScheduleMismatch,
    NoSchedule,
    CannotEdit,
}

/// One run in a list.
#[derive(Serialize, ToSchema)]
pub struct RunSummary {
    pub run_id: String,
    pub flow: String,
    pub version: u32,
    /// QUEUED, RUNNING, SUCCESS, FAILED or CANCELLED.
    pub status: String,
    /// manual, cron, event:TYPE, rerun, ...
    pub trigger: String,
    /// Who started the run: the token's name (API, console, CLI, events),
    /// `scheduler` (cron), `message:<source>`, `exec@<host>`, `demo`.
    pub actor: String,
    /// The business date, `YYYY-MM-DD` in the flow's timezone (null for runs
    /// older than business dates).
    pub biz_date: Option<String>,
    /// Why a QUEUED run is not started yet (`concurrency.depends_on_past`).
    pub waiting_reason: Option<String>,
    /// RFC 3339, UTC, milliseconds.
    pub created_at: String,
    pub finished_at: Option<String>,
}

/// `GET /runs`: newest first; pass `next` as `cursor` for the following page.
#[derive(Serialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunSummary>,
    pub next: Option<String>,
}

/// `GET /runs/{id}`.
#[derive(Serialize, ToSchema)]
pub struct RunDetail {
    pub run_id: String,
    pub flow: String,
    pub version: u32,
    pub status: String,
    pub params: Value,
    pub trigger: String,
    /// Who started the run (as in `RunSummary`).
    pub actor: String,
    pub idempotency_key: Option<String>,
    /// The business date, `YYYY-MM-DD` (as in `RunSummary`).
    pub biz_date: Option<String>,
    /// Why a QUEUED run is not started yet (as in `RunSummary`).
    pub waiting_reason: Option<String>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// Node ids in topological order.
    pub order: Vec<String>,
    /// Node id → its state: status, reason, attempts, attempt_history (each
    /// `{attempt, started_at, finished_at, outcome, error, host}`; `host` is the
    /// replica id for an in-process attempt, the sidecar name(s) for a sidecar
    /// one; a sub-flow node's attempts also have `child_run`, the child run's id), outputs, data_version, stale, started_at, finished_at, needs; `prompt` (rendered) on
    /// manual nodes, `throttle` on throttled ones, `waiting` while no executor has it.
    pub nodes: std::collections::BTreeMap<String, Value>,
    /// What happened instead of a failure, e.g. a routing rule that could not be
    /// evaluated and sent the run to the default version.
    pub warnings: Vec<String>,
}

/// `POST /flows/{name}/runs`: 201 for a new run, 200 for an `Idempotency-Key` seen before.
#[derive(Serialize, ToSchema)]
pub struct TriggerAnswer {
    pub run_id: String,
    pub flow: String,
    pub version: u32,
}

/// `POST /runs/{id}/cancel` and `POST /runs/{id}/nodes/{node}/{action}`.
#[derive(Serialize, ToSchema)]
pub struct ActionAnswer {
    pub run_id: String,
    /// Absent for a run cancel.
    pub node: Option<String>,
    pub action: String,
}

/// One transition of the run's state machine log.
#[derive(Serialize, ToSchema)]
pub struct Transition {
    /// Null for a run-level transition.
    pub node: Option<String>,
    pub from: String,
    pub to: String,
    pub cause: String,
    pub actor: String,
    pub attempt: u32,
    pub reason: Option<String>,
    pub at: String,
}

#[derive(Serialize, ToSchema)]
pub struct TransitionList {
    pub run_id: String,
    pub transitions: Vec<Transition>,
}

#[derive(Serialize, ToSchema)]
pub struct LogChunk {
    pub attempt: u32,
    pub content: String,
}

#[derive(Serialize, ToSchema)]
pub struct NodeLogs {
    pub run_id: String,
    pub node: String,
    pub logs: Vec<LogChunk>,
}

/// `GET /flows/{name}`.
#[derive(Serialize, ToSchema)]
pub struct FlowDetail {
    pub flow: String,
    pub version: u32,
    pub description: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub paused: bool,
    pub observe: bool,
    /// `{cron, timezone, next_run, calendar, calendar_mode, skipped_days}` or `{event}` per trigger.
    pub triggers: Vec<Value>,
    pub nodes: Vec<String>,
    pub updated_at: String,
    /// Events kept for the paused flow, started on `resume`.
    pub queued_events: u64,
}

#[derive(Serialize, ToSchema)]
pub struct FlowList {
    pub flows: Vec<FlowDetail>,
}

/// `PUT /flows/{name}`: 201 for a new flow, 200 for a new version or an unchanged body.
#[derive(Serialize, ToSchema)]
pub struct ApplyAnswer {
    pub flow: String,
    pub version: u32,
    pub created: bool,
}

#[derive(Serialize, ToSchema)]
pub struct FlowVersion {
    pub version: u32,
    pub content_hash: String,
    pub created_at: String,
}

#[derive(Serialize, ToSchema)]
pub struct FlowVersions {
    pub flow: String,
    pub versions: Vec<FlowVersion>,
}

/// `GET /flows/{name}/versions/{version}`: the YAML as applied.
#[derive(Serialize, ToSchema)]
pub struct FlowSource {
    pub flow: String,
    pub version: u32,
    pub source: String,
    pub created_at: String,
}

/// `POST /flows/{name}/pause|resume`.
#[derive(Serialize, ToSchema)]
pub struct PauseAnswer {
    pub flow: String,
    pub paused: bool,
    /// Resume: the runs of the events kept while paused, oldest first (pause: empty).
    pub started: Vec<String>,
    /// Events still waiting for the flow (while paused, or left by an error that
    /// the server retries within seconds).
    pub queued_events: u64,
}

/// `POST /events`: the runs the event started (the same ones for a redelivered
/// id), the paused flows that keep it until `resume` (answered 202), and the
/// paused flows that dropped it (`on_paused: drop`).
#[derive(Serialize, ToSchema)]
pub struct EventAnswer {
    pub runs: Vec<String>,
    pub queued: Vec<QueuedEvent>,
    pub dropped: Vec<String>,
}

/// An event kept for a paused flow.
#[derive(Serialize, ToSchema)]
pub struct QueuedEvent {
    pub flow: String,
    /// 1 for the oldest event waiting for the flow.
    pub position: u64,
    /// RFC 3339, UTC, milliseconds.
    pub queued_at: String,
    pub max_queued: u32,
    /// False when this (type, id) was already waiting.
    pub created: bool,
}

/// `DELETE /flows/{name}`.
#[derive(Serialize, ToSchema)]
pub struct DeleteAnswer {
    pub flow: String,
    pub deleted: bool,
    /// True with `purge`: versions and runs deleted; else they stay readable.
    pub purged: bool,
    /// Runs of the flow kept (or, purged, deleted).
    pub runs: u64,
    /// Runs cancelled first (`cancel`).
    pub cancelled: Vec<String>,
    /// Events that waited for the paused flow, dropped with it.
    pub events_dropped: u64,
}

/// `POST /flows/{name}/promote|demote`.
#[derive(Serialize, ToSchema)]
pub struct PromoteAnswer {
    pub flow: String,
    pub version: u32,
    pub observe: bool,
    /// False when the flow already was as asked (nothing applied or audited).
    pub changed: bool,
    /// `{cron, timezone}` per cron trigger.
    pub cron: Vec<Value>,
    /// `{group, job}` per sidecar node: what runs the flow once governed.
    pub jobs: Vec<Value>,
    pub warnings: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub struct AuditEntry {
    pub at: String,
    pub actor: String,
    pub action: String,
    pub run_id: Option<String>,
    pub node: Option<String>,
    pub reason: Option<String>,
    pub details: Value,
}

#[derive(Serialize, ToSchema)]
pub struct AuditList {
    pub entries: Vec<AuditEntry>,
}

/// `GET /alerts`: open and recent alerts.
#[derive(Serialize, ToSchema)]
pub struct AlertList {
    /// Each alert: its rule, key, status (pending, firing, resolved), runs and times;
    /// a failure alert's `holds`: `[{flow, biz_date, run_id, root_run, deadline_missed?}]`,
    /// the runs of other flows held (`after`) behind its failed runs.
    pub alerts: Vec<Value>,
    /// Configured channels: `{name, type}` (never their URLs).
    pub channels: Vec<Value>,
}

/// `POST /alerts/test`.
#[derive(Serialize, ToSchema)]
pub struct AlertTestAnswer {
    pub channel: String,
    pub delivered: bool,
    pub error: Option<String>,
}

/// `POST /alerts/{id}/acknowledge|silence`.
#[derive(Serialize, ToSchema)]
pub struct AlertMarkAnswer {
    pub alert: String,
    /// `alert_acknowledge` or `alert_silence`, as audited.
    pub action: String,
    pub by: String,
    /// A silence's end (RFC 3339); null for an acknowledgement or a lifted silence.
    pub until: Option<String>,
}

/// `GET /datasources`: the SQL datasources of the server config and their pools
/// (never their URLs).
#[derive(Serialize, ToSchema)]
pub struct DatasourcesView {
    /// `{name, kind, max_connections, read_only, in_use, waiting, open, idle}` per datasource.
    pub datasources: Vec<Value>,
}

/// One calendar: `GET /calendars` item.
#[derive(Serialize, ToSchema)]
pub struct CalendarSummary {
    pub name: String,
    pub description: Option<String>,
    /// The calendar it is built on (`null` for `weekdays` and `all_days`).
    pub base: Option<String>,
    /// First and last day it has data for (`YYYY-MM-DD`; `null`: unbounded).
    pub first_known_day: Option<String>,
    pub last_known_day: Option<String>,
    /// `builtin`, `config` (server config or flows directory) or `applied` (through the API).
    pub origin: String,
    /// The applied version (`applied` calendars only).
    pub version: Option<u32>,
}

/// `PUT /calendars/{name}`: the version the calendar file is now.
#[derive(Serialize, ToSchema)]
pub struct CalendarApplyAnswer {
    pub calendar: String,
    pub version: u32,
    /// False when the content equalled the latest version.
    pub created: bool,
}

/// `GET /calendars`.
#[derive(Serialize, ToSchema)]
pub struct CalendarList {
    pub calendars: Vec<CalendarSummary>,
}

/// `GET /calendars/{name}?year=`: one year of a calendar.
#[derive(Serialize, ToSchema)]
pub struct CalendarYear {
    pub name: String,
    pub description: Option<String>,
    pub base: Option<String>,
    pub first_known_day: Option<String>,
    pub last_known_day: Option<String>,
    pub origin: String,
    pub version: Option<u32>,
    pub year: i32,
    /// Monday-to-Friday days that are not business days (holidays), `YYYY-MM-DD`.
    pub off_days: Vec<String>,
    /// Saturdays and Sundays that are business days (make-up workdays), `YYYY-MM-DD`.
    pub make_up_days: Vec<String>,
    pub business_days: u32,
}

/// `GET /estate`: the estate map for one business date.
#[derive(Serialize, ToSchema)]
pub struct EstateView {
    /// The business date, `YYYY-MM-DD`.
    pub date: String,
    /// `{flow, after: [flow], state: done|running|held|queued|failed|cancelled|none, run_id?,
    /// waiting_for?, root_cause?: {flow, node?}, holds?: [flow], deadline?, late}` per flow,
    /// upstream flows first (`holds`: a failed flow's held flows; `deadline`: RFC 3339;
    /// `late`: the deadline passed and the flow is not done). A scoped token sees its flows and the
    /// edges between them only (`root_hidden: true` for a root cause outside its scope).
    pub flows: Vec<Value>,
}

/// `GET /sources`: the message sources of the server config and their consumers
/// (never a URL or a credential).
#[derive(Serialize, ToSchema)]
pub struct SourcesList {
    /// `{name, type, state, consumers: [{flow, consumes, state, lag, last_error, counts}]}` per source.
    pub sources: Vec<Value>,
}

/// `GET /sidecars`: the fleet this replica sees.
#[derive(Serialize, ToSchema)]
pub struct SidecarsView {
    pub replica: String,
    /// Sidecars connected to this replica.
    pub sidecars: Vec<Value>,
    /// `{replica, group, jobs, seen_at}` per replica with fresh presence.
    pub replicas: Vec<Value>,
    /// `{run_id, node, reason}` per node waiting for an executor.
    pub waiting: Vec<Value>,
    /// `{kind: xxl, name (address), group (app), live, connected_at_ms, last_seen_ms}`
    /// per XXL-JOB executor registered here.
    pub xxl: Vec<Value>,
}

/// `POST /flows/{name}/backfills`: the backfill made.
#[derive(Serialize, ToSchema)]
pub struct BackfillCreated {
    pub id: String,
    pub flow: String,
    /// Its business dates, in the order taken.
    pub dates: Vec<String>,
    /// The flows it runs (the flow, and its dependents with `with_dependents`).
    pub flows: Vec<String>,
    /// How many runs it makes at most: one per (flow, date).
    pub runs: usize,
    pub state: String,
}

/// How many of a backfill's runs are where.
#[derive(Serialize, ToSchema)]
pub struct BackfillProgress {
    pub total: u32,
    pub pending: u32,
    pub queued: u32,
    pub running: u32,
    pub success: u32,
    pub failed: u32,
    pub cancelled: u32,
    /// Dates that already had a SUCCESS run (`rerun: skip-existing`).
    pub skipped: u32,
    /// Never started: a run they wait for did not succeed, or the run was refused.
    pub blocked: u32,
}

/// A backfill.
#[derive(Serialize, ToSchema)]
pub struct Backfill {
    pub id: String,
    pub flow: String,
    pub date_from: Option<String>,
    pub date_to: Option<String>,
    pub calendar: Option<String>,
    pub dates: Vec<String>,
    /// `asc` or `desc`.
    pub order: String,
    pub parallel: u32,
    pub with_dependents: bool,
    /// `existing` or `skip-existing`.
    pub rerun: String,
    pub reason: String,
    pub actor: String,
    /// `running`, `paused`, `cancelled` or `done`.
    pub state: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub progress: BackfillProgress,
    /// Paused flows whose dates wait for the flow's resume (a paused flow is not backfilled).
    pub paused_flows: Vec<String>,
}

/// One (flow, business date) of a backfill and its run.
#[derive(Serialize, ToSchema)]
pub struct BackfillStep {
    pub seq: u32,
    pub flow: String,
    pub biz_date: String,
    pub run_id: Option<String>,
    /// QUEUED, RUNNING, SUCCESS, FAILED or CANCELLED.
    pub run_state: Option<String>,
    /// Why it has no run of its own: `skipped`, `blocked`, `cancelled` or `refused`.
    pub outcome: Option<String>,
    pub note: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

/// `GET /backfills/{id}`: the backfill and its runs in start order.
#[derive(Serialize, ToSchema)]
pub struct BackfillDetail {
    #[serde(flatten)]
    pub backfill: Backfill,
    pub steps: Vec<BackfillStep>,
}

/// `GET /backfills`: the latest backfills first.
#[derive(Serialize, ToSchema)]
pub struct BackfillList {
    pub backfills: Vec<Backfill>,
}
