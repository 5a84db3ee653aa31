//! Event triggers (`POST /events`; kept for paused flows, see
//! `madeira_engine::events`) and pausing a flow's triggers.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::json_body;
use crate::{ApiError, AppState, Role};

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct EventBody {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    #[schema(value_type = Object)]
    payload: serde_json::Map<String, Value>,
}

#[utoipa::path(
    post,
    path = "/api/v1/events",
    tag = "triggers",
    request_body(content = EventBody, content_type = "application/json"),
    responses(
        (status = 200, description = "the runs the event started (or dropped for paused flows)", body = crate::schema::EventAnswer),
        (status = 202, description = "kept for a paused flow (`queued`) until it is resumed; runs started for the others", body = crate::schema::EventAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 422, description = "unprocessable", body = crate::schema::ErrorBody),
        (status = 429, description = "rate limited (see Retry-After), or a paused flow's queue of kept events is full (`paused_queue_full`)", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn event(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let caller = state.auth.caller(&headers, Role::Operator)?;
    if caller.is_scoped() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "token `{}` is scoped to some flows; an event may start any team's flow: send events with an unscoped token",
                caller.name
            ),
        ));
    }
    let actor = caller.name;
    let body: EventBody = json_body(&body)?;
    if body.kind.is_empty() || body.id.is_empty() || body.kind.len() > 200 || body.id.len() > 200 {
        return Err(ApiError::bad_request(
            "an event needs `type` and `id` (1 to 200 characters each); `id` is what makes a redelivery a duplicate",
        ));
    }
    for (field, text) in [("type", &body.kind), ("id", &body.id)] {
        madeira_core::text::check_text(field, text)
            .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "bad_text", m))?;
    }
    let listeners = state.engine.event_listeners(&body.kind).await?;
    if listeners.is_empty() {
        let known = state.engine.event_types().await?;
        let list: Vec<&str> = known.iter().map(String::as_str).collect();
        let hint = if list.is_empty() { "none".to_string() } else { list.join(", ") };
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_listener",
            format!("no flow listens to event type `{}`; known types: {hint}", body.kind),
        )
        .with_details(json!({"type": body.kind, "known_types": list})));
    }
    // A redelivery Redis remembers, for every flow listening now (none paused),
    // is answered from there: no rate-limit slot, no store round trip.
    if listeners.iter().all(|l| !l.paused)
        && let Some(seen) = state.shared.seen_event(&body.kind, &body.id).await
    {
        let runs: Option<Vec<&String>> = listeners.iter().map(|l| seen.get(&l.def.name)).collect();
        if let Some(runs) = runs {
            return Ok((StatusCode::OK, Json(json!({"runs": runs, "queued": [], "dropped": []}))));
        }
    }
    for l in &listeners {
        if !l.paused || l.on_paused == madeira_core::OnPaused::Queue {
            state.check_rate(&l.def.name, l.def.rate_limit).await?;
        }
    }
    let outcome = state.engine.fire_event(&body.kind, &body.id, Value::Object(body.payload), &actor).await?;
    if outcome.queued.is_empty() && outcome.dropped.is_empty() {
        let made: BTreeMap<String, String> =
            outcome.runs.iter().map(|o| (o.flow.clone(), o.run_id.clone())).collect();
        state.shared.remember_event(&body.kind, &body.id, &made).await;
    }
    let status = if outcome.queued.is_empty() { StatusCode::OK } else { StatusCode::ACCEPTED };
    let queued: Vec<Value> = outcome
        .queued
        .iter()
        .map(|q| {
            json!({"flow": q.flow, "position": q.position, "queued_at": crate::views::time(Some(q.queued_at_ms)),
                   "max_queued": q.max_queued, "created": q.created})
        })
        .collect();
    let runs: Vec<String> = outcome.runs.into_iter().map(|o| o.run_id).collect();
    Ok((status, Json(json!({"runs": runs, "queued": queued, "dropped": outcome.dropped}))))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ReasonBody {
    #[serde(default)]
    reason: Option<String>,
}

#[utoipa::path(
    post,
    path = "/api/v1/flows/{name}/{action}",
    tag = "flows",
    params(("name" = String, Path, description = "flow name"), ("action" = crate::schema::FlowAction, Path, description = "pause or resume")),
    request_body(content = ReasonBody, content_type = "application/json"),
    responses(
        (status = 200, description = "the flow is paused, or resumed with the events kept while paused started", body = crate::schema::PauseAnswer),
        (status = 400, description = "bad request: the message names the field and the fix", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "not found", body = crate::schema::ErrorBody),
        (status = 413, description = "body over 1 MiB", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn pause(
    State(state): State<AppState>,
    Path((name, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let caller = state.auth.caller(&headers, Role::Operator)?;
    state.check_flow(&caller, &name).await?;
    let actor = caller.name;
    let body: ReasonBody = json_body(&body)?;
    let paused = match action.as_str() {
        "pause" => true,
        "resume" => false,
        other => {
            return Err(ApiError::not_found(format!("unknown flow action `{other}`: use pause or resume")));
        }
    };
    let report = state.engine.set_paused(&name, paused, &actor, body.reason).await?;
    Ok(Json(
        json!({"flow": name, "paused": paused, "started": report.started, "queued_events": report.remaining}),
    ))
}
