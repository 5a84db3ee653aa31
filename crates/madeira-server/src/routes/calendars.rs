//! `GET /calendars` (every calendar the server knows: built-in, config, calendar
//! files; with base and data range) and `GET /calendars/{name}?year=2026` (that
//! year's days off on weekdays and make-up weekend workdays).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use chrono::Datelike;
use madeira_calendar::Calendar;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role};

/// A calendar's name, description, base and data range.
pub(crate) fn summary(calendar: &Calendar) -> Value {
    json!({
        "name": calendar.name(),
        "description": calendar.description(),
        "base": calendar.base(),
        "first_known_day": calendar.first_known_day().map(|d| d.to_string()),
        "last_known_day": calendar.last_known_day().map(|d| d.to_string()),
    })
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
    let list: Vec<Value> = calendars.iter().map(summary).collect();
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
    let mut body = summary(calendar);
    body["year"] = json!(year);
    body["off_days"] = json!(dates(&days.off_days));
    body["make_up_days"] = json!(dates(&days.make_up_days));
    body["business_days"] = json!(days.business_days);
    Ok(Json(body))
}
