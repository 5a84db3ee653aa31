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
    operation_id = "list_audit",
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
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let visible = state.visible_flows(&caller).await?;
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
    let mut records = state.reads.audit.audit(&query).await?;
    if let Some(visible) = &visible {
        // A scoped caller sees the entries of its flows: by the run's flow, or
        // the `flow` an entry without a run names (pause, missed_run, ...).
        let mut run_flows: HashMap<String, Option<String>> = HashMap::new();
        let mut kept = Vec::with_capacity(records.len());
        for a in records {
            let flow = match &a.run_id {
                Some(id) => {
                    if !run_flows.contains_key(id) {
                        let flow = state.reads.runs.load_run(id).await?.map(|r| r.run.flow);
                        run_flows.insert(id.clone(), flow);
                    }
                    run_flows.get(id).cloned().flatten()
                }
                None => {
                    a.details.as_ref().and_then(|d| d.get("flow")).and_then(Value::as_str).map(String::from)
                }
            };
            if flow.is_some_and(|f| visible.contains(&f)) {
                kept.push(a);
            }
        }
        records = kept;
    }
    let entries: Vec<Value> = records
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
