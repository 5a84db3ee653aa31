//! `GET /alerts?status=&flow=&limit=` (firing, resolved, each delivery's status)
//! and `POST /alerts/test` `{"channel": "…"}` (send a test message now).

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use madeira_alert::AlertError;
use madeira_store::AlertQuery;
use serde::Deserialize;
use serde_json::{Value, json};

use super::json_body;
use crate::{ApiError, AppState, Role};

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct TestBody {
    #[serde(default)]
    channel: String,
}

/// `POST /alerts/{id}/acknowledge` and `/silence`: why (required), and for a
/// silence how long (`for: "2h"`; `"0s"` lifts it).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MarkBody {
    #[serde(default)]
    reason: Option<String>,
    /// A silence's length, e.g. `30m`, `2h`, at most `7d`; `0s` lifts it.
    #[serde(default, rename = "for")]
    duration: Option<String>,
}

/// Longest silence: a longer one is a config change (routes), not a mute.
const SILENCE_MAX: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

fn not_configured() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "alerts_off",
        "alerting is not running in this control plane",
    )
}

fn alert_error(e: AlertError) -> ApiError {
    match e {
        AlertError::UnknownChannel { .. } => ApiError::not_found(e.to_string()),
        AlertError::TestTimedOut(_) => ApiError::new(StatusCode::GATEWAY_TIMEOUT, "timeout", e.to_string()),
        AlertError::NotFound(_) => ApiError::not_found(e.to_string()),
        AlertError::NotOpen(_) => ApiError::new(StatusCode::CONFLICT, "not_open", e.to_string()),
        AlertError::ShuttingDown => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", e.to_string())
        }
        AlertError::Store(e) => e.into(),
        other => {
            tracing::error!(error = %other, "alerts: internal error");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", other.to_string())
        }
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/alerts",
    operation_id = "list_alerts",
    tag = "alerts",
    params(("status" = Option<String>, Query, description = "pending, firing or resolved"), ("flow" = Option<String>, Query), ("limit" = Option<u32>, Query, description = "1 to 1000, default 50")),
    responses(
        (status = 200, description = "alerts, newest first, with their deliveries", body = crate::schema::AlertList),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let alerts = state.alerts.as_ref().ok_or_else(not_configured)?;
    let visible = state.visible_flows(&caller).await?;
    let status = q.get("status").cloned();
    if let Some(s) = &status
        && !matches!(s.as_str(), "pending" | "firing" | "resolved")
    {
        return Err(ApiError::bad_request(format!("status `{s}`: use pending, firing or resolved")));
    }
    let limit = super::runs::parse_limit(q.get("limit"))?;
    let query = AlertQuery { status, flow: q.get("flow").cloned(), limit, before: None };
    let mut answer = alerts.list(&query).await.map_err(alert_error)?;
    if let Some(visible) = visible {
        scope_alerts(&mut answer, &visible);
    }
    Ok(Json(answer))
}

#[utoipa::path(
    post,
    path = "/api/v1/alerts/test",
    tag = "alerts",
    request_body(content = TestBody, content_type = "application/json"),
    responses(
        (status = 200, description = "the test message was sent (or why not)", body = crate::schema::AlertTestAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody),
        (status = 504, description = "timed out", body = crate::schema::ErrorBody)
    )
)]
pub async fn test(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Operator)?;
    let alerts = state.alerts.as_ref().ok_or_else(not_configured)?;
    let body: TestBody = json_body(&body)?;
    if body.channel.is_empty() {
        return Err(ApiError::bad_request("give the channel: {\"channel\": \"NAME\"}"));
    }
    let outcome = alerts.test(&body.channel).await.map_err(alert_error)?;
    Ok(Json(json!(outcome)))
}

/// Keeps only the alerts of flows in `visible` (alerts without a flow, such as a
/// sidecar's, are global and left out of a scoped caller's list).
fn scope_alerts(answer: &mut Value, visible: &std::collections::HashSet<String>) {
    if let Some(list) = answer.get_mut("alerts").and_then(Value::as_array_mut) {
        list.retain(|a| a.get("flow").and_then(Value::as_str).is_some_and(|f| visible.contains(f)));
    }
}

#[utoipa::path(
    post,
    path = "/api/v1/alerts/{id}/acknowledge",
    operation_id = "acknowledge_alert",
    tag = "alerts",
    params(("id" = String, Path, description = "the alert's id")),
    request_body(content = MarkBody, content_type = "application/json"),
    responses(
        (status = 200, description = "acknowledged: no more reminders; audited", body = crate::schema::AlertMarkAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 409, description = "the alert is resolved", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn acknowledge(
    State(state): State<AppState>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    mark(state, id, headers, body, madeira_alert::MarkKind::Acknowledge).await
}

#[utoipa::path(
    post,
    path = "/api/v1/alerts/{id}/silence",
    operation_id = "silence_alert",
    tag = "alerts",
    params(("id" = String, Path, description = "the alert's id")),
    request_body(content = MarkBody, content_type = "application/json"),
    responses(
        (status = 200, description = "silenced until the time given (no update or reminder before then); audited", body = crate::schema::AlertMarkAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 409, description = "the alert is resolved", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn silence(
    State(state): State<AppState>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    mark(state, id, headers, body, madeira_alert::MarkKind::Silence).await
}

/// The API's side: the caller, the body, then `mark_alert`.
async fn mark(
    state: AppState,
    id: String,
    headers: HeaderMap,
    body: Bytes,
    kind: madeira_alert::MarkKind,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Operator)?;
    let body: MarkBody = json_body(&body)?;
    mark_alert(&state, &caller, &id, kind, body.reason, body.duration.as_deref()).await.map(Json)
}

/// Acknowledges or silences the open alert `id` for `caller` (an operator),
/// the same for the API and the console: checks the reason and the silence's
/// length, the alert (open, in the caller's scope), audits (committed first),
/// then hands the mark to the alert task.
pub async fn mark_alert(
    state: &AppState,
    caller: &crate::Caller,
    id: &str,
    kind: madeira_alert::MarkKind,
    reason: Option<String>,
    duration: Option<&str>,
) -> Result<Value, ApiError> {
    let alerts = state.alerts.as_ref().ok_or_else(not_configured)?;
    let action = match kind {
        madeira_alert::MarkKind::Acknowledge => "alert_acknowledge",
        madeira_alert::MarkKind::Silence => "alert_silence",
    };
    let reason = super::runs::required_reason(reason, action)?;
    let now = madeira_engine::now_ms();
    let field =
        |message: String, name: &str| ApiError::bad_request(message).with_details(json!({"field": name}));
    let until = match (&kind, duration) {
        (madeira_alert::MarkKind::Acknowledge, None) => None,
        (madeira_alert::MarkKind::Acknowledge, Some(_)) => {
            return Err(field("for: only a silence lasts; acknowledge takes a reason only".into(), "for"));
        }
        (madeira_alert::MarkKind::Silence, None) => {
            return Err(field(
                "for: required for a silence, e.g. {\"for\": \"2h\"} (0s lifts one)".into(),
                "for",
            ));
        }
        (madeira_alert::MarkKind::Silence, Some(text)) => {
            let d = humantime::parse_duration(text)
                .map_err(|e| field(format!("for: `{text}`: {e}; write e.g. 30m, 2h or 1d"), "for"))?;
            if d > SILENCE_MAX {
                return Err(field(
                    format!("for: `{text}` is longer than 7d; change the alert routes for a lasting mute"),
                    "for",
                ));
            }
            Some(now.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
        }
    };
    let flow = alerts.open_alert_flow(id).await.map_err(alert_error)?;
    if let Some(visible) = state.visible_flows(caller).await?
        && !flow.is_some_and(|flow| visible.contains(&flow))
    {
        return Err(ApiError::not_found(format!("alert {id} not found")));
    }
    let record = madeira_store::AuditRecord {
        at: now,
        actor: caller.name.clone(),
        action: action.into(),
        run_id: None,
        node: None,
        reason: Some(reason.clone()),
        details: Some(json!({"alert": id, "until": until.map(|u| crate::views::time(Some(u)))})),
    };
    state.engine.audit(record).await?;
    let mark = madeira_alert::Mark { by: caller.name.clone(), at: now, reason, until };
    alerts.mark(id, kind, mark).await.map_err(alert_error)?;
    Ok(
        json!({"alert": id, "action": action, "by": caller.name, "until": until.map(|u| crate::views::time(Some(u)))}),
    )
}
