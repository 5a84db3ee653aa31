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
    let query =
        AlertQuery { status, flow: q.get("flow").cloned(), limit: super::runs::parse_limit(q.get("limit"))? };
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
