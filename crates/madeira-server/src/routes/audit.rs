//! `GET /audit?run_id=&actor=&since=&limit=`.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use madeira_store::AuditQuery;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role, views};

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
