//! `/metrics` (Prometheus scrape, no token; OpenMetrics when asked for, else text
//! 0.0.4) and `/admin/log-level` (read, or change the log filter at run time;
//! admin role outside dev).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::json_body;
use crate::{ApiError, AppState, Role};

pub async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(exposition) = &state.metrics else {
        return ApiError::not_found("metrics are not enabled in this process").into_response();
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (body, content_type) = exposition.render_for(accept);
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogLevelBody {
    /// A level (`debug`) or `EnvFilter` directives (`madeira_engine=debug,info`).
    #[serde(alias = "level")]
    pub filter: String,
}

pub async fn get_log_level(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let control = log_control(&state)?;
    Ok(Json(json!({"filter": control.current()})))
}

pub async fn put_log_level(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let actor = state.auth.authorize(&headers, Role::Admin)?;
    let control = log_control(&state)?;
    let body: LogLevelBody = json_body(&body)?;
    let previous = control.current();
    control.set(&body.filter).map_err(|e| {
        ApiError::bad_request(format!("filter `{}`: {e}", body.filter))
            .with_details(json!({"example": "info,madeira_engine=debug"}))
    })?;
    tracing::warn!(actor = %actor, from = %previous, to = %body.filter.trim(), "log level changed");
    Ok(Json(json!({"filter": control.current(), "previous": previous})))
}

fn log_control(state: &AppState) -> Result<&madeira_telemetry::LogControl, ApiError> {
    state.log_control.as_ref().ok_or_else(|| {
        ApiError::new(StatusCode::NOT_IMPLEMENTED, "not_implemented", "this process has no log filter handle")
    })
}
