//! `GET /audit?run_id=&actor=&since=&limit=`.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use madeira_store::AuditQuery;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role, views};

#[utoipa::path(
    get,
    path = "/api/v1/audit",
    tag = "audit",
    params(("run_id" = Option<String>, Query), ("actor" = Option<String>, Query), ("since" = Option<String>, Query, description = "RFC 3339"), ("limit" = Option<u32>, Query, description = "1 to 1000, default 50")),
    responses(
        (status = 200, description = "audit entries, newest first", body = crate::schema::AuditList),
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
    state.auth.authorize(&headers, Role::Viewer)?;
    let since_ms = match q.get("since") {
        Some(s) => Some(
            chrono::DateTime::parse_from_rfc3339(s)
                .map_err(|e| ApiError::bad_request(format!("since `{s}`: {e}; use RFC 3339")))?
                .timestamp_millis(),
        ),
        None => None,
    };
    let query = AuditQuery {
        run_id: q.get("run_id").cloned(),
        actor: q.get("actor").cloned(),
        since_ms,
        limit: super::runs::parse_limit(q.get("limit"))?,
    };
    let entries: Vec<Value> = state
        .engine
        .store()
        .audit(&query)
        .await?
        .into_iter()
        .map(|a| {
            json!({
                "at": views::time(Some(a.at)),
                "actor": a.actor,
                "action": a.action,
                "run_id": a.run_id,
                "node": a.node,
                "reason": a.reason,
                "details": a.details,
            })
        })
        .collect();
    Ok(Json(json!({"entries": entries})))
}
