//! `DELETE /flows/{name}` and `POST /flows/{name}/promote|demote`: a flow's
//! lifecycle past apply (see `madeira_engine::lifecycle`). All three need the
//! admin role (they change or remove flow definitions) and, for a scoped caller,
//! a flow of its scope (another team's answers 404).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use madeira_engine::{DeleteRequest, PromoteReport, PromoteRequest};
use serde::Deserialize;
use serde_json::{Value, json};

use super::json_body;
use crate::{ApiError, AppState, Role};

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// Cancel the flow's QUEUED and RUNNING runs first (the ordinary cancel,
    /// audited per run) instead of refusing with 409 `flow_active`.
    #[serde(default)]
    cancel: bool,
    /// Also delete its versions and runs (nodes, transitions, outputs, attempts,
    /// logs). Without it they stay readable. The audit trail is always kept.
    #[serde(default)]
    purge: bool,
    /// Recorded in the audit entry.
    reason: Option<String>,
}

#[utoipa::path(
    delete,
    path = "/api/v1/flows/{name}",
    tag = "flows",
    params(("name" = String, Path, description = "flow name"), DeleteQuery),
    responses(
        (status = 200, description = "deleted: the flow leaves every list; its runs and audit stay readable unless purged", body = crate::schema::DeleteAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low (admin needed)", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 409, description = "runs are active (`flow_active`, naming them); retry with cancel=true", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<DeleteQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Admin)?;
    let Query(query) =
        query.map_err(|e| ApiError::bad_request(format!("{e}; use cancel=true, purge=true, reason=TEXT")))?;
    state.check_flow(&caller, &name).await?;
    let request = DeleteRequest {
        flow: name,
        cancel: query.cancel,
        purge: query.purge,
        actor: caller.name,
        reason: query.reason,
    };
    let report = state.engine.delete_flow(request).await?;
    Ok(Json(json!({
        "flow": report.flow,
        "deleted": true,
        "purged": report.purged,
        "runs": report.runs,
        "cancelled": report.cancelled,
        "events_dropped": report.events_dropped,
    })))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromoteBody {
    /// The crontab line's schedule (5 fields or an `@daily`-style alias): the
    /// flow's cron trigger when it has none; when it has one they must agree.
    #[serde(default)]
    cron: Option<String>,
    /// IANA timezone of `cron` (the crontab's CRON_TZ; default UTC).
    #[serde(default)]
    timezone: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

#[utoipa::path(
    post,
    path = "/api/v1/flows/{name}/promote",
    tag = "flows",
    params(("name" = String, Path, description = "flow name")),
    request_body(content = PromoteBody, content_type = "application/json"),
    responses(
        (status = 200, description = "governed: a new version without `observe: true` (or, `changed: false`, it already was)", body = crate::schema::PromoteAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low (admin needed)", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 409, description = "`schedule_mismatch`, `no_schedule` or `cannot_edit`: the message says what to fix", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn promote(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request = lifecycle_request(&state, &name, &headers, &body).await?;
    if let Some(cron) = &request.cron {
        madeira_core::spec::parse_cron(cron).map_err(|e| ApiError::bad_request(format!("`cron`: {e}")))?;
    }
    if let Some(tz) = &request.timezone {
        madeira_core::spec::parse_timezone(tz)
            .map_err(|e| ApiError::bad_request(format!("`timezone`: {e}")))?;
    }
    let mut report = state.engine.promote(request).await?;
    report.warnings = unserved_jobs(&state, &report.jobs).await?;
    Ok(Json(answer(report)))
}

/// How recently another replica must have reported a sidecar declaring a job.
const LIVE_WITHIN_MS: i64 = 10_000;

/// A warning per sidecar job no live sidecar declares, here or (shared store) on
/// another replica: a governed run of it would wait in INIT.
async fn unserved_jobs(state: &AppState, jobs: &[(String, String)]) -> Result<Vec<String>, ApiError> {
    let here = state.fleet.as_ref().map(|f| f.sidecars()).unwrap_or_default();
    let mut warnings = Vec::new();
    for (group, job) in jobs {
        let local = here.iter().any(|s| s.connected && s.group == *group && s.jobs.contains(job));
        let since = madeira_engine::now_ms() - LIVE_WITHIN_MS;
        if local || !state.reads.presence.sidecar_hosts(group, job, since).await?.is_empty() {
            continue;
        }
        warnings.push(format!(
            "no live sidecar of group `{group}` declares job `{job}`: runs wait in INIT until one does \
             (add the job from `crontab import`'s sidecar-jobs.yaml to that sidecar's config)"
        ));
    }
    Ok(warnings)
}

#[utoipa::path(
    post,
    path = "/api/v1/flows/{name}/demote",
    tag = "flows",
    params(("name" = String, Path, description = "flow name")),
    request_body(content = PromoteBody, content_type = "application/json"),
    responses(
        (status = 200, description = "observe-only again: a new version with `observe: true` (or, `changed: false`, it already was)", body = crate::schema::PromoteAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low (admin needed)", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 409, description = "`cannot_edit`: the flow's source cannot be edited; the message says what to do", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn demote(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let request = lifecycle_request(&state, &name, &headers, &body).await?;
    Ok(Json(answer(state.engine.demote(request).await?)))
}

async fn lifecycle_request(
    state: &AppState,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<PromoteRequest, ApiError> {
    let caller = state.auth.caller(headers, Role::Admin)?;
    let body: PromoteBody = json_body(body)?;
    state.check_flow(&caller, name).await?;
    Ok(PromoteRequest {
        flow: name.to_string(),
        cron: body.cron,
        timezone: body.timezone,
        actor: caller.name,
        reason: body.reason,
    })
}

fn answer(report: PromoteReport) -> Value {
    json!({
        "flow": report.flow,
        "version": report.version,
        "observe": report.observe,
        "changed": report.changed,
        "cron": report.cron.iter().map(|(cron, tz)| json!({"cron": cron, "timezone": tz})).collect::<Vec<_>>(),
        "jobs": report.jobs.iter().map(|(group, job)| json!({"group": group, "job": job})).collect::<Vec<_>>(),
        "warnings": report.warnings,
    })
}
