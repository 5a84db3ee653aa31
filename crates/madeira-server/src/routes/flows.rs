//! `PUT/GET /flows/{name}`, `GET /flows`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role, views};

#[utoipa::path(
    put,
    path = "/api/v1/flows/{name}",
    tag = "flows",
    params(("name" = String, Path, description = "flow name")),
    request_body(content = String, content_type = "application/yaml", description = "the flow YAML (SPEC §4)"),
    responses(
        (status = 200, description = "a new version (or the same one, unchanged)", body = crate::schema::ApplyAnswer),
        (status = 201, description = "the flow was created", body = crate::schema::ApplyAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn put(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    state.auth.authorize(&headers, Role::Admin)?;
    let source =
        std::str::from_utf8(&body).map_err(|_| ApiError::bad_request("flow body is not UTF-8 YAML"))?;
    let def = madeira_core::spec::parse_flow(&format!("{name}.yaml"), source)
        .map_err(|e| ApiError::from(madeira_engine::EngineError::Invalid(e)))?;
    if def.name != name {
        return Err(ApiError::bad_request(format!(
            "the body defines flow `{}` but the URL names `{name}`; PUT it to /api/v1/flows/{}",
            def.name, def.name
        )));
    }
    let outcome = state.engine.apply_flow(&format!("{name}.yaml"), source).await?;
    let status = if outcome.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(json!({"flow": outcome.flow, "version": outcome.version, "created": outcome.created}))))
}

#[utoipa::path(
    get,
    path = "/api/v1/flows/{name}",
    tag = "flows",
    params(("name" = String, Path, description = "flow name")),
    responses(
        (status = 200, description = "the flow at its latest version", body = crate::schema::FlowDetail),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let reads = &state.reads;
    let record = reads
        .flows
        .get_flow(&name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("flow {name} not found")))?;
    state.check_flow(&caller, &name).await?;
    let def = state.engine.flow(&name, Some(record.latest_version)).await?;
    let mut detail = views::flow_detail(&record, &def, &state.engine.calendars());
    skipped_days(&state, &name, &mut detail).await?;
    let queued = state.engine.queued_event_counts().await?;
    detail["queued_events"] = json!(queued.get(&name).copied().unwrap_or(0));
    Ok(Json(detail))
}

#[utoipa::path(
    get,
    path = "/api/v1/flows",
    operation_id = "list_flows",
    tag = "flows",
    responses(
        (status = 200, description = "every flow", body = crate::schema::FlowList),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let mut flows = Vec::new();
    let queued = state.engine.queued_event_counts().await?;
    for record in state.reads.flows.list_flows().await? {
        let def = state.engine.flow(&record.name, Some(record.latest_version)).await?;
        if !caller.sees(&def.labels) {
            continue;
        }
        let mut detail = views::flow_detail(&record, &def, &state.engine.calendars());
        detail["queued_events"] = json!(queued.get(&record.name).copied().unwrap_or(0));
        flows.push(detail);
    }
    Ok(Json(json!({"flows": flows})))
}

#[utoipa::path(
    get,
    path = "/api/v1/flows/{name}/versions",
    tag = "flows",
    params(("name" = String, Path, description = "flow name")),
    responses(
        (status = 200, description = "every applied version", body = crate::schema::FlowVersions),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn versions(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let versions = state.reads.flows.flow_versions(&name).await?;
    if versions.is_empty() {
        return Err(ApiError::not_found(format!("flow {name} not found")));
    }
    state.check_flow(&caller, &name).await?;
    let list: Vec<Value> = versions
        .iter()
        .map(|v| json!({"version": v.version, "content_hash": v.content_hash, "created_at": views::time(Some(v.created_at))}))
        .collect();
    Ok(Json(json!({"flow": name, "versions": list})))
}

#[utoipa::path(
    get,
    path = "/api/v1/flows/{name}/versions/{version}",
    tag = "flows",
    params(("name" = String, Path, description = "flow name"), ("version" = u32, Path, description = "version number")),
    responses(
        (status = 200, description = "the YAML of one version", body = crate::schema::FlowSource),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn version(
    State(state): State<AppState>,
    Path((name, version)): Path<(String, u32)>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    if state.reads.flows.get_flow(&name).await?.is_some() {
        state.check_flow(&caller, &name).await?;
    }
    let v = state
        .reads
        .flows
        .flow_version(&name, version)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("flow {name} version {version} not found")))?;
    Ok(Json(
        json!({"flow": name, "version": v.version, "source": v.source, "created_at": views::time(Some(v.created_at))}),
    ))
}

/// Adds to each calendar trigger of `detail` the latest days its calendar
/// skipped (audit `cron_tick_skipped`, newest first, at most 10).
async fn skipped_days(state: &AppState, flow: &str, detail: &mut Value) -> Result<(), ApiError> {
    let Some(triggers) = detail["triggers"].as_array_mut() else { return Ok(()) };
    if !triggers.iter().any(|t| t["calendar"].is_string()) {
        return Ok(());
    }
    let query =
        madeira_store::AuditQuery { actor: Some("scheduler".into()), limit: 1000, ..Default::default() };
    let audit = state.reads.audit.audit(&query).await?;
    let skipped: Vec<Value> = audit
        .iter()
        .filter(|a| a.action == "cron_tick_skipped")
        .filter_map(|a| a.details.as_ref())
        .filter(|d| d["flow"] == flow)
        .take(10)
        .map(|d| json!({"day": d["day"], "calendar": d["calendar"], "scheduled_at": d["scheduled_at"]}))
        .collect();
    for trigger in triggers.iter_mut().filter(|t| t["calendar"].is_string()) {
        let mine: Vec<&Value> = skipped.iter().filter(|s| s["calendar"] == trigger["calendar"]).collect();
        trigger["skipped_days"] = json!(mine);
    }
    Ok(())
}
