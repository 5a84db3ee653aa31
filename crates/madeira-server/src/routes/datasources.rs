//! `GET /datasources`: the SQL datasources of the server config with their pool
//! use (kind, max_connections, read_only, statements running, attempts waiting,
//! open and idle connections). Never their URLs.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role};

pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let datasources = state.datasources.as_ref().map(|d| d.datasources()).unwrap_or_default();
    Ok(Json(json!({ "datasources": datasources })))
}
