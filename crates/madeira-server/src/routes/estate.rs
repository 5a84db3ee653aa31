//! `GET /estate?date=YYYY-MM-DD`: the estate map for one business date — every
//! flow, its upstream flows, the state of its newest run for that date, whom a
//! held flow waits for and the failed upstream (flow and node) at the root.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role};

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EstateQuery {
    /// The business date, `YYYY-MM-DD` (default: today, UTC).
    date: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/v1/estate",
    operation_id = "estate_map",
    tag = "estate",
    params(EstateQuery),
    responses(
        (status = 200, description = "every flow with its upstreams and its state for the date", body = crate::schema::EstateView),
        (status = 400, description = "bad date", body = crate::schema::ErrorBody),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn map(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<EstateQuery>,
) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let date = match q.date {
        Some(d) => {
            madeira_core::bizdate::parse_date(&d).map_err(|e| ApiError::bad_request(format!("date: {e}")))?
        }
        None => chrono::Utc::now().date_naive(),
    };
    let date = madeira_core::bizdate::format_date(date);
    let flows = state.engine.estate_map(&date).await?;
    Ok(Json(json!({"date": date, "flows": flows})))
}
