//! `GET /calendars` (every calendar the server knows: built-in, config, calendar
//! files, applied; with base, data range and origin), `GET
//! /calendars/{name}?year=2026` (that year's days off on weekdays and make-up
//! weekend workdays) and `PUT /calendars/{name}` (apply a calendar file).

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use chrono::Datelike;
use madeira_calendar::Calendar;
use madeira_engine::CalendarOrigin;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role};

/// A calendar's name, description, base, data range and origin.
pub(crate) fn summary(calendar: &Calendar, origin: Option<CalendarOrigin>) -> Value {
    let (origin, version) = match origin {
        Some(CalendarOrigin::Applied(v)) => ("applied", Some(v)),
        Some(CalendarOrigin::Config) => ("config", None),
        _ => ("builtin", None),
    };
    json!({
        "name": calendar.name(),
        "description": calendar.description(),
        "base": calendar.base(),
        "first_known_day": calendar.first_known_day().map(|d| d.to_string()),
        "last_known_day": calendar.last_known_day().map(|d| d.to_string()),
        "origin": origin,
        "version": version,
    })
}

#[utoipa::path(
    put,
    path = "/api/v1/calendars/{name}",
    operation_id = "apply_calendar",
    tag = "calendars",
    params(("name" = String, Path, description = "calendar name")),
    request_body(content = String, content_type = "application/yaml", description = "a calendar file: `calendar: NAME`, `base`, `holidays`, `workdays`, `exclude_weekends`, `from`, `until`"),
    responses(
        (status = 200, description = "a new version (or the same one, unchanged)", body = crate::schema::CalendarApplyAnswer),
        (status = 201, description = "a new version of the calendar was stored", body = crate::schema::CalendarApplyAnswer),
        (status = 400, description = "bad calendar: the message names the problem and the fix", body = crate::schema::ErrorBody),
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
    let actor = state.auth.authorize(&headers, Role::Admin)?;
    let source =
        std::str::from_utf8(&body).map_err(|_| ApiError::bad_request("calendar body is not UTF-8 YAML"))?;
    let file = format!("{name}.yaml");
    let named = madeira_calendar::parse_definitions(source)
        .ok()
        .and_then(|defs| defs.first().map(|d| d.name.clone()));
    if let Some(defined) = named.filter(|n| *n != name) {
        return Err(ApiError::bad_request(format!(
            "the body defines calendar `{defined}` but the URL names `{name}`; PUT it to /api/v1/calendars/{defined}"
        )));
    }
    let outcome = state.engine.apply_calendar(&file, source, &actor).await?;
    let status = if outcome.created { StatusCode::CREATED } else { StatusCode::OK };
    let answer = json!({"calendar": outcome.flow, "version": outcome.version, "created": outcome.created});
    Ok((status, Json(answer)))
}

#[utoipa::path(
    get,
    path = "/api/v1/calendars",
    operation_id = "list_calendars",
    tag = "calendars",
    responses(
        (status = 200, description = "every calendar, by name", body = crate::schema::CalendarList),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let calendars = state.engine.calendars();
    let list: Vec<Value> =
        calendars.iter().map(|c| summary(c, state.engine.calendar_origin(c.name()))).collect();
    Ok(Json(json!({ "calendars": list })))
}

#[utoipa::path(
    get,
    path = "/api/v1/calendars/{name}",
    operation_id = "show_calendar",
    tag = "calendars",
    params(
        ("name" = String, Path, description = "calendar name"),
        ("year" = Option<i32>, Query, description = "the year to show, default the current one (UTC)")
    ),
    responses(
        (status = 200, description = "the calendar and one year of it", body = crate::schema::CalendarYear),
        (status = 400, description = "bad `year`, or a year the calendar has no data for", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 404, description = "no such calendar", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let calendars = state.engine.calendars();
    let calendar = calendars.get(&name).ok_or_else(|| {
        let known: Vec<&str> = calendars.names().collect();
        ApiError::not_found(format!("calendar {name} not found; known: {}", known.join(", ")))
    })?;
    let year = match q.get("year") {
        None => chrono::Utc::now().year(),
        Some(raw) => match raw.parse::<i32>() {
            Ok(y @ 1..=9999) => y,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "year `{raw}`: give a year from 1 to 9999, e.g. 2026"
                )));
            }
        },
    };
    let days = calendar.year_summary(year).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let dates = |v: &[chrono::NaiveDate]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    let mut body = summary(calendar, state.engine.calendar_origin(&name));
    body["year"] = json!(year);
    body["off_days"] = json!(dates(&days.off_days));
    body["make_up_days"] = json!(dates(&days.make_up_days));
    body["business_days"] = json!(days.business_days);
    Ok(Json(body))
}
