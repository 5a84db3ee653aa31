//! Backfills: `POST /flows/{name}/backfills` makes one (operator, reason
//! required), `GET /backfills` lists them with progress, `GET /backfills/{id}`
//! shows one with its runs, `POST /backfills/{id}/{pause|resume|cancel}` changes
//! it (operator, reason required; a cancel cancels its runs not finished).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use madeira_core::estate::{BackfillAction, BackfillOrder, Rerun};
use madeira_engine::BackfillRequest;
use madeira_store::{BackfillRecord, BackfillStepRow};
use serde::Deserialize;
use serde_json::{Value, json};

use super::json_body;
use super::runs::{parse_limit, required_reason};
use crate::views::time;
use crate::{ApiError, AppState, Role};

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct BackfillBody {
    /// First business date, `YYYY-MM-DD` (with `to`).
    #[serde(default)]
    from: Option<String>,
    /// Last business date, `YYYY-MM-DD`, included.
    #[serde(default)]
    to: Option<String>,
    /// Exact dates instead of `from`/`to`.
    #[serde(default)]
    dates: Option<Vec<String>>,
    /// Only this calendar's business days between `from` and `to`.
    #[serde(default)]
    calendar: Option<String>,
    /// `asc` (default) or `desc`.
    #[serde(default)]
    order: Option<String>,
    /// Runs of the backfill at once, 1 to 64 (default 1).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    parallel: Option<u32>,
    /// Also every flow downstream of this one in the estate, same dates.
    #[serde(default)]
    with_dependents: bool,
    /// `skip-existing` (default: a date with a SUCCESS run is skipped) or `existing`.
    #[serde(default)]
    rerun: Option<String>,
    /// Why (required, not blank): kept in the audit trail with the actor.
    #[serde(default)]
    #[schema(required = true, min_length = 1, value_type = String)]
    reason: Option<String>,
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ReasonBody {
    /// Why (required, not blank): kept in the audit trail with the actor.
    #[serde(default)]
    #[schema(required = true, min_length = 1, value_type = String)]
    reason: Option<String>,
}

fn date(field: &str, raw: &str) -> Result<chrono::NaiveDate, ApiError> {
    madeira_core::bizdate::parse_date(raw).map_err(|e| ApiError::bad_request(format!("{field}: {e}")))
}

fn named<T: std::str::FromStr>(field: &str, raw: Option<&str>) -> Result<Option<T>, ApiError>
where
    T::Err: std::fmt::Display,
{
    raw.map(|r| r.parse::<T>().map_err(|e| ApiError::bad_request(format!("{field}: {e}")))).transpose()
}

#[utoipa::path(
    post,
    path = "/api/v1/flows/{name}/backfills",
    operation_id = "create_backfill",
    tag = "backfills",
    params(("name" = String, Path, description = "flow name")),
    request_body(content = BackfillBody, content_type = "application/json"),
    responses(
        (status = 201, description = "the backfill; its first runs are created", body = crate::schema::BackfillCreated),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 409, description = "refused: the flow is observe-only", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Path(flow): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let caller = state.auth.caller(&headers, Role::Operator)?;
    state.check_flow(&caller, &flow).await?;
    let body: BackfillBody = json_body(&body)?;
    let reason = required_reason(body.reason, "a backfill")?;
    if body.with_dependents && caller.is_scoped() {
        for dependent in state.engine.backfill_flows(&flow, true).await? {
            state.check_flow(&caller, &dependent).await?;
        }
    }
    let dates = body
        .dates
        .as_ref()
        .map(|list| list.iter().map(|d| date("dates", d)).collect::<Result<Vec<_>, _>>())
        .transpose()?;
    let req = BackfillRequest {
        flow: flow.clone(),
        from: body.from.as_deref().map(|d| date("from", d)).transpose()?,
        to: body.to.as_deref().map(|d| date("to", d)).transpose()?,
        dates,
        calendar: body.calendar,
        order: named::<BackfillOrder>("order", body.order.as_deref())?.unwrap_or_default(),
        parallel: body.parallel.unwrap_or(1),
        with_dependents: body.with_dependents,
        rerun: named::<Rerun>("rerun", body.rerun.as_deref())?.unwrap_or_default(),
        reason,
        actor: caller.name,
    };
    let made = state.engine.create_backfill(req).await?;
    let answer = json!({"id": made.id, "flow": flow, "dates": made.dates, "flows": made.flows,
                        "runs": made.steps, "state": "running"});
    Ok((StatusCode::CREATED, Json(answer)))
}

fn record(b: &BackfillRecord) -> Value {
    json!({
        "id": b.id, "flow": b.flow, "date_from": b.date_from, "date_to": b.date_to, "calendar": b.calendar,
        "dates": b.dates, "order": b.order, "parallel": b.parallel, "with_dependents": b.with_dependents,
        "rerun": b.rerun, "reason": b.reason, "actor": b.actor, "state": b.state,
        "created_at": time(Some(b.created_at)), "finished_at": time(b.finished_at), "progress": b.progress,
        "paused_flows": b.paused_flows,
    })
}

fn step(s: &BackfillStepRow) -> Value {
    json!({
        "seq": s.seq, "flow": s.flow, "biz_date": s.biz_date, "run_id": s.run_id, "run_state": s.run_state,
        "outcome": s.outcome, "note": s.note, "started_at": time(s.started_at), "finished_at": time(s.finished_at),
    })
}

/// `GET /backfills` query.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BackfillListQuery {
    /// 1 to 1000, default 50.
    #[param(value_type = Option<u32>)]
    limit: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/backfills",
    operation_id = "list_backfills",
    tag = "backfills",
    params(BackfillListQuery),
    responses(
        (status = 200, description = "the latest backfills first, with progress", body = crate::schema::BackfillList),
        (status = 400, description = "bad limit", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<BackfillListQuery>,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let limit = parse_limit(q.limit.as_ref())?;
    let visible = state.visible_flows(&caller).await?;
    let backfills: Vec<Value> = state
        .engine
        .backfills(limit)
        .await?
        .iter()
        .filter(|b| visible.as_ref().is_none_or(|v| v.contains(&b.flow)))
        .map(record)
        .collect();
    Ok(Json(json!({"backfills": backfills})))
}

#[utoipa::path(
    get,
    path = "/api/v1/backfills/{id}",
    operation_id = "show_backfill",
    tag = "backfills",
    params(("id" = String, Path, description = "backfill id")),
    responses(
        (status = 200, description = "the backfill and its runs", body = crate::schema::BackfillDetail),
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
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Viewer)?;
    let (b, steps) = state.engine.backfill(&id).await?;
    state
        .check_flow(&caller, &b.flow)
        .await
        .map_err(|_| ApiError::not_found(format!("backfill {id} not found")))?;
    let mut answer = record(&b);
    answer["steps"] = steps.iter().map(step).collect();
    Ok(Json(answer))
}

#[utoipa::path(
    post,
    path = "/api/v1/backfills/{id}/{action}",
    operation_id = "backfill_action",
    tag = "backfills",
    params(("id" = String, Path, description = "backfill id"), ("action" = crate::schema::BackfillAction, Path, description = "pause, resume or cancel")),
    request_body(content = ReasonBody, content_type = "application/json"),
    responses(
        (status = 200, description = "the backfill after the change", body = crate::schema::Backfill),
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
pub async fn act(
    State(state): State<AppState>,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Operator)?;
    let action = match action.as_str() {
        "pause" => BackfillAction::Pause,
        "resume" => BackfillAction::Resume,
        "cancel" => BackfillAction::Cancel,
        other => {
            return Err(ApiError::not_found(format!(
                "no backfill action `{other}`; use pause, resume or cancel"
            )));
        }
    };
    let (b, _) = state.engine.backfill(&id).await?;
    state
        .check_flow(&caller, &b.flow)
        .await
        .map_err(|_| ApiError::not_found(format!("backfill {id} not found")))?;
    let body: ReasonBody = json_body(&body)?;
    let reason = required_reason(body.reason, action.as_str())?;
    let b = state.engine.change_backfill(&id, action, &caller.name, &reason).await?;
    Ok(Json(record(&b)))
}
