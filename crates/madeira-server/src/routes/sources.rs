//! `GET /sources`: each configured message source (SPEC §6.1) with its type and
//! state, and per consumer its flow, what it consumes, state, lag, last error and
//! message counts by outcome. Never a URL or a credential.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role};

#[utoipa::path(
    get,
    path = "/api/v1/sources",
    operation_id = "list_sources",
    tag = "sources",
    responses(
        (status = 200, description = "the message sources and their consumers", body = crate::schema::SourcesList),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let sources = state.sources.as_ref().map(|view| view()).unwrap_or_else(|| json!([]));
    Ok(Json(json!({"sources": sources})))
}
