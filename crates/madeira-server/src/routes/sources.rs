//! `GET /sources`: each configured message source (SPEC §6.1) with its type and
//! state, and per consumer its flow, what it consumes, state, lag, last error and
//! message counts by outcome. Never a URL or a credential.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role};

pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let sources = state.sources.as_ref().map(|view| view()).unwrap_or_else(|| json!([]));
    Ok(Json(json!({"sources": sources})))
}
