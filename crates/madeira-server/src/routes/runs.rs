//! Runs: trigger (with `Idempotency-Key`), list with a cursor, show, cancel, node
//! actions, logs and the transition log.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use madeira_engine::{ActionRequest, NodeActionKind, TriggerRequest};
use madeira_store::RunQuery;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{follow, json_body, sidecars};
use crate::{ApiError, AppState, Role, views};

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct TriggerBody {
    #[serde(default)]
    #[schema(value_type = Object)]
    params: serde_json::Map<String, Value>,
    #[serde(default)]
    version: Option<u32>,
    /// The run's business date, `YYYY-MM-DD`; by default the flow's `biz_date`
    /// rule applied to now.
    #[serde(default)]
    biz_date: Option<String>,
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    /// Why (required, not blank): kept in the audit trail with the actor.
    #[serde(default)]
    #[schema(required = true, min_length = 1, value_type = String)]
    reason: Option<String>,
    #[serde(default)]
    downstream: bool,
}

#[utoipa::path(
    post,
    path = "/api/v1/flows/{name}/runs",
    tag = "runs",
    params(("name" = String, Path, description = "flow name"), ("Idempotency-Key" = Option<String>, Header, description = "a retry with the same key returns the same run")),
    request_body(content = TriggerBody, content_type = "application/json"),
    responses(
        (status = 200, description = "the run this Idempotency-Key made before", body = crate::schema::TriggerAnswer),
        (status = 201, description = "a new run", body = crate::schema::TriggerAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 409, description = "refused in this state", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 422, description = "unprocessable", body = crate::schema::ErrorBody),
        (status = 429, description = "rate limited; see Retry-After", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn trigger(
    State(state): State<AppState>,
    Path(flow): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let caller = state.auth.caller(&headers, Role::Operator)?;
    state.check_flow(&caller, &flow).await?;
    let actor = caller.name;
    let body: TriggerBody = json_body(&body)?;
    let def = state.engine.flow(&flow, None).await?;
    state.check_rate(&flow, def.rate_limit).await?;
    let biz_date = body.biz_date.as_deref().map(biz_date_param).transpose()?;
    let key = match headers.get("idempotency-key") {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::bad_request("Idempotency-Key must be visible ASCII"))?
                .to_string(),
        ),
        None => None,
    };
    let outcome = state
        .engine
        .trigger(TriggerRequest {
            flow,
            params: Value::Object(body.params),
            idempotency_key: key,
            trigger: "manual".into(),
            actor,
            version: body.version,
            biz_date,
            at_ms: None,
        })
        .await?;
    let status = if outcome.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(json!({"run_id": outcome.run_id, "flow": outcome.flow, "version": outcome.version}))))
}

/// `GET /runs` filters; all optional.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunListQuery {
    /// Only this flow's runs.
    flow: Option<String>,
    /// QUEUED, RUNNING, SUCCESS, FAILED or CANCELLED.
    status: Option<String>,
    /// Only runs this actor started (a token's name, `scheduler`, `message:<source>`, …).
    actor: Option<String>,
    /// Only runs of this business date, `YYYY-MM-DD`.
    biz_date: Option<String>,
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1 to 1000, default 50.
    #[param(value_type = Option<u32>)]
    limit: Option<String>,
    /// Only runs created at or after this time: RFC 3339, `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM` (UTC).
    since: Option<String>,
    /// Only runs created before this time (same forms as `since`).
    until: Option<String>,
}

/// A `biz_date` given by a caller, checked (`YYYY-MM-DD`).
fn biz_date_param(raw: &str) -> Result<chrono::NaiveDate, ApiError> {
    madeira_core::bizdate::parse_date(raw).map_err(|e| ApiError::bad_request(format!("biz_date: {e}")))
}

/// A `since`/`until` bound as the smallest run id created at that time.
fn time_bound(name: &str, raw: Option<&String>) -> Result<Option<String>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    let ms = madeira_core::timebound::parse_time(raw).ok_or_else(|| {
        ApiError::bad_request(format!(
            "{name} `{raw}`: give RFC 3339 (2026-12-01T09:30:00Z), YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC)"
        ))
    })?;
    Ok(Some(madeira_core::timebound::id_bound(ms)))
}

pub(crate) fn parse_limit(raw: Option<&String>) -> Result<u32, ApiError> {
    match raw {
        None => Ok(50),
        Some(s) => match s.parse::<u32>() {
            Ok(n @ 1..=1000) => Ok(n),
            _ => Err(ApiError::bad_request(format!("limit `{s}`: give a number from 1 to 1000"))),
        },
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/runs",
    operation_id = "list_runs",
    tag = "runs",
    params(RunListQuery),
    responses(
        (status = 200, description = "one page of runs, newest first", body = crate::schema::RunList),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Query(q): Query<RunListQuery>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let visible = state.visible_flows(&caller).await?;
    if let (Some(flow), Some(visible)) = (&q.flow, &visible)
        && !visible.contains(flow)
    {
        return Ok(Json(json!({"runs": [], "next": null})));
    }
    let limit = parse_limit(q.limit.as_ref())?;
    if let Some(status) = &q.status
        && !madeira_core::RunState::SHOWN.iter().any(|s| s.as_str().eq_ignore_ascii_case(status))
    {
        return Err(ApiError::bad_request(format!(
            "status `{status}`: use QUEUED, RUNNING, SUCCESS, FAILED or CANCELLED"
        )));
    }
    let since = time_bound("since", q.since.as_ref())?;
    let until = time_bound("until", q.until.as_ref())?;
    if let (Some(s), Some(u)) = (&since, &until)
        && s >= u
    {
        return Err(ApiError::bad_request("`since` must be earlier than `until`"));
    }
    // Run ids are UUIDv7: `until` is an upper id bound like the cursor, `since` a lower one.
    let before = match (q.cursor, until) {
        (Some(c), Some(u)) => Some(c.min(u)),
        (c, u) => c.or(u),
    };
    let actor = q.actor.filter(|a| !a.is_empty());
    let biz_date =
        q.biz_date.as_deref().map(biz_date_param).transpose()?.map(madeira_core::bizdate::format_date);
    let mut query = RunQuery { flow: q.flow, state: q.status, actor, biz_date, before, limit: limit + 1 };
    let mut rows = Vec::new();
    // A scoped caller's page skips other teams' runs: read on until it is full.
    loop {
        let page = state.engine.store().list_runs(&query).await?;
        let exhausted = page.len() < query.limit as usize;
        let reached_since = since.as_ref().is_some_and(|b| page.last().is_some_and(|r| r.id < *b));
        query.before = page.last().map(|r| r.id.clone());
        rows.extend(page.into_iter().filter(|r| visible.as_ref().is_none_or(|v| v.contains(&r.flow))));
        if exhausted || reached_since || rows.len() > limit as usize {
            break;
        }
    }
    if let Some(bound) = &since {
        rows.retain(|r| r.id >= *bound);
    }
    let next = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|r| Value::from(r.id.clone()))
    } else {
        None
    };
    let runs: Vec<Value> = rows.iter().map(views::run_summary).collect();
    Ok(Json(json!({"runs": runs, "next": next})))
}

#[utoipa::path(
    get,
    path = "/api/v1/runs/{id}",
    tag = "runs",
    params(("id" = String, Path, description = "run id (UUIDv7)")),
    responses(
        (status = 200, description = "the run and every node", body = crate::schema::RunDetail),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    state.check_run(&caller, &id).await?;
    let stored = state
        .engine
        .store()
        .load_run(&id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("run {id} not found")))?;
    let def = state.engine.flow(&stored.run.flow, Some(stored.run.version)).await?;
    let mut view = views::run_detail(&stored, &def);
    let audit = madeira_store::AuditQuery { run_id: Some(id.clone()), limit: 100, ..Default::default() };
    view.warnings = state
        .engine
        .store()
        .audit(&audit)
        .await?
        .into_iter()
        .filter(|a| a.action == madeira_engine::fallbacks::ROUTING_FALLBACK)
        .filter_map(|a| a.reason)
        .collect();
    for node in def.nodes.iter().filter(|n| n.throttle.is_some()) {
        let (Some(throttle), Some(entry)) = (node.throttle, view.nodes.get_mut(node.id.as_str())) else {
            continue;
        };
        let live = state.engine.throttle_state(&def.name, &node.id);
        let position = live.waiting.iter().position(|r| *r == id).map(|p| p + 1);
        entry.throttle = Some(json!({
            "max_permits": throttle.max_permits,
            "queue_size": throttle.queue_size,
            "permits_in_use": live.in_use,
            "queue_depth": live.waiting.len(),
            "queue_position": position,
        }));
    }
    for node in &def.nodes {
        let madeira_core::NodeAction::Run(madeira_core::ExecutorDef::Subflow(sub)) = &node.action else {
            continue;
        };
        let Some(entry) = view.nodes.get_mut(node.id.as_str()) else { continue };
        let query = madeira_store::RunQuery {
            flow: Some(sub.flow.clone()),
            actor: Some(madeira_core::subflow::child_actor(&id, &node.id)),
            limit: 1000,
            ..Default::default()
        };
        let children: std::collections::HashMap<u32, String> = state
            .engine
            .store()
            .list_runs(&query)
            .await?
            .into_iter()
            .filter_map(|r| {
                let key = r.idempotency_key.as_deref()?;
                let (_, _, attempt) = madeira_core::subflow::parse_child_key(key)?;
                Some((attempt, r.id))
            })
            .collect();
        entry.set_child_runs(&children);
    }
    sidecars::show_waiting(&mut view, &id, state.engine.waiting());
    Ok(Json(view).into_response())
}

#[utoipa::path(
    post,
    path = "/api/v1/runs/{id}/cancel",
    tag = "runs",
    params(("id" = String, Path, description = "run id (UUIDv7)")),
    request_body(content = ActionBody, content_type = "application/json"),
    responses(
        (status = 200, description = "the run is cancelling", body = crate::schema::ActionAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 409, description = "refused in this state", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Operator)?;
    state.check_run(&caller, &id).await?;
    let actor = caller.name;
    let body: ActionBody = json_body(&body)?;
    let reason = required_reason(body.reason, "cancel")?;
    state
        .engine
        .act(ActionRequest { run_id: id.clone(), node: None, kind: None, actor, reason: Some(reason) })
        .await?;
    Ok(Json(json!({"run_id": id, "action": "cancel"})))
}

#[utoipa::path(
    post,
    path = "/api/v1/runs/{id}/nodes/{node}/{action}",
    tag = "runs",
    params(("id" = String, Path, description = "run id (UUIDv7)"), ("node" = String, Path, description = "node id"), ("action" = crate::schema::NodeAction, Path, description = "confirm, reject, rerun, mark-success or skip")),
    request_body(content = ActionBody, content_type = "application/json"),
    responses(
        (status = 200, description = "the action was taken", body = crate::schema::ActionAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 409, description = "refused in this state", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn node_action(
    State(state): State<AppState>,
    Path((id, node, action)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Operator)?;
    state.check_run(&caller, &id).await?;
    let actor = caller.name;
    let body: ActionBody = json_body(&body)?;
    let kind = match action.as_str() {
        "confirm" => NodeActionKind::Confirm,
        "reject" => NodeActionKind::Reject,
        "rerun" => NodeActionKind::Rerun { downstream: body.downstream },
        "mark-success" => NodeActionKind::MarkSuccess,
        "skip" => NodeActionKind::Skip,
        other => {
            return Err(ApiError::not_found(format!(
                "unknown node action `{other}`: use confirm, reject, rerun, mark-success or skip"
            )));
        }
    };
    let reason = required_reason(body.reason, &action)?;
    state
        .engine
        .act(ActionRequest {
            run_id: id.clone(),
            node: Some(node.clone()),
            kind: Some(kind),
            actor,
            reason: Some(reason),
        })
        .await?;
    Ok(Json(json!({"run_id": id, "node": node, "action": action})))
}

/// The reason every operator action must carry (SPEC §3: audited with actor and
/// reason), trimmed: a missing or blank one is a 400 naming the field.
pub(crate) fn required_reason(reason: Option<String>, action: &str) -> Result<String, ApiError> {
    let trimmed = reason.as_deref().map(str::trim).unwrap_or_default();
    if trimmed.is_empty() {
        let what = if reason.is_some() { "blank" } else { "missing" };
        let message = format!(
            "`reason` is {what}: {action} needs a reason, kept in the audit trail (e.g. {{\"reason\": \"diff checked\"}})"
        );
        return Err(ApiError::bad_request(message).with_details(json!({"field": "reason"})));
    }
    Ok(trimmed.to_string())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Stream the output as Server-Sent Events until the attempt ends.
    #[serde(default)]
    follow: bool,
    /// Byte offset to stream from (`Last-Event-ID` wins when both are given).
    #[serde(default)]
    offset: Option<u64>,
    /// The attempt to follow (default: the latest with live output).
    #[serde(default)]
    attempt: Option<u32>,
}

/// A node's logs: the stored tail of each ended attempt, plus the live output of
/// one still running (`"live": true`); with `follow=true`, an SSE stream
/// (`follow.rs`).
#[utoipa::path(
    get,
    path = "/api/v1/runs/{id}/nodes/{node}/logs",
    tag = "runs",
    params(
        ("id" = String, Path, description = "run id (UUIDv7)"),
        ("node" = String, Path, description = "node id"),
        ("follow" = Option<bool>, Query, description = "stream the output as Server-Sent Events (`text/event-stream`: `log` events `{attempt, offset, text}` with the byte offset after them as id, then one `end`) until the attempt ends"),
        ("offset" = Option<u64>, Query, description = "with follow: the byte offset to stream from (`Last-Event-ID` wins)"),
        ("attempt" = Option<u32>, Query, description = "one attempt only (default: every stored one, plus the live one)")
    ),
    responses(
        (status = 200, description = "the node's log, per attempt; with follow=true an SSE stream (`text/event-stream`)", content(
            (crate::schema::NodeLogs = "application/json"),
            (crate::schema::LogStreamEvent = "text/event-stream")
        )),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn logs(
    State(state): State<AppState>,
    Path((id, node)): Path<(String, String)>,
    Query(query): Query<LogsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    state.check_run(&caller, &id).await?;
    if query.follow {
        let offset = follow::resume_offset(&headers, query.offset)?;
        let req = follow::FollowRequest { run_id: id, node, attempt: query.attempt, offset };
        return follow::follow_node(&state.engine, req, state.shutdown.clone()).await;
    }
    let store = state.engine.store();
    let stored =
        store.load_run(&id).await?.ok_or_else(|| ApiError::not_found(format!("run {id} not found")))?;
    if !stored.nodes.iter().any(|n| n.node == node) {
        return Err(ApiError::not_found(format!("run {id}: node {node} not found")));
    }
    let mut logs: Vec<Value> = store
        .logs(&id, &node)
        .await?
        .into_iter()
        .filter(|l| query.attempt.is_none_or(|a| a == l.attempt))
        .map(|l| json!({"attempt": l.attempt, "content": l.content}))
        .collect();
    let live_attempt = query.attempt.or_else(|| state.engine.live_logs().latest_attempt(&id, &node));
    if let Some(attempt) = live_attempt
        && !logs.iter().any(|l| l["attempt"] == attempt)
        && let Some(slice) = state.engine.attempt_log(&id, &node, Some(attempt), 0)
    {
        let content = String::from_utf8_lossy(&slice.data);
        logs.push(json!({"attempt": attempt, "content": content, "live": !slice.finished}));
    }
    Ok(Json(json!({"run_id": id, "node": node, "logs": logs})).into_response())
}

#[utoipa::path(
    get,
    path = "/api/v1/runs/{id}/transitions",
    tag = "runs",
    params(("id" = String, Path, description = "run id (UUIDv7)")),
    responses(
        (status = 200, description = "every state change of the run", body = crate::schema::TransitionList),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn transitions(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    state.check_run(&caller, &id).await?;
    let records = state.engine.store().transitions(&id).await?;
    if records.is_empty() {
        return Err(ApiError::not_found(format!("run {id} not found")));
    }
    let out: Vec<Value> = records
        .into_iter()
        .map(|t| {
            json!({"node": t.node, "from": t.edge.from_name(), "to": t.edge.to_name(),
                   "cause": t.edge.cause_name(), "actor": t.actor,
                   "attempt": t.attempt, "reason": t.reason, "at": views::time(Some(t.at))})
        })
        .collect();
    Ok(Json(json!({"run_id": id, "transitions": out})))
}
