//! `GET /sidecars`: the fleet view (name, group, version, declared jobs, attempts
//! running, last heartbeat age) of the sidecars connected to this replica, what
//! every replica of a shared store reports having (`replicas`), plus the nodes
//! waiting in INIT for a sidecar here, and the XXL-JOB executors registered
//! here (`xxl`, kind `xxl`).

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role};

/// Reports older than this (a replica gone without saying so) are not shown.
const PRESENCE_FRESH_MS: i64 = 10_000;

#[utoipa::path(
    get,
    path = "/api/v1/sidecars",
    operation_id = "list_sidecars",
    tag = "sidecars",
    responses(
        (status = 200, description = "the fleet", body = crate::schema::SidecarsView),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let sidecars = state.fleet.as_ref().map(|f| f.sidecars()).unwrap_or_default();
    let mut listed = state.engine.waiting().list();
    // A scoped caller sees only its team's waiting runs, as in every other list.
    if let Some(visible) = state.visible_flows(&caller).await? {
        let mut kept = Vec::with_capacity(listed.len());
        for w in listed {
            let run = state.reads.runs.load_run(&w.0).await.map_err(madeira_engine::EngineError::from)?;
            if run.is_some_and(|r| visible.contains(&r.run.flow)) {
                kept.push(w);
            }
        }
        listed = kept;
    }
    let waiting: Vec<Value> = listed
        .into_iter()
        .map(|(run_id, node, reason)| json!({"run_id": run_id, "node": node, "reason": reason}))
        .collect();
    let since = madeira_engine::now_ms() - PRESENCE_FRESH_MS;
    let replicas: Vec<Value> = state
        .reads
        .presence
        .sidecar_presence(since)
        .await
        .map_err(madeira_engine::EngineError::from)?
        .into_iter()
        .map(|(replica, presence, seen_at)| {
            json!({"replica": replica, "group": presence.group, "jobs": presence.jobs,
                   "seen_at": crate::views::time(Some(seen_at))})
        })
        .collect();
    Ok(Json(json!({
        "replica": state.engine.replica_id(),
        "sidecars": sidecars,
        "replicas": replicas,
        "waiting": waiting,
        "xxl": state.xxl.as_ref().map_or(Value::Array(Vec::new()), |view| view()),
    })))
}
