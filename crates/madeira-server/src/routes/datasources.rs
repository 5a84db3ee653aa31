//! `GET /datasources`: the SQL datasources of the server config with their pool
//! use (kind, max_connections, read_only, statements running, attempts waiting,
//! open and idle connections). Never their URLs.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::{ApiError, AppState, Role};

#[utoipa::path(
    get,
    path = "/api/v1/datasources",
    operation_id = "list_datasources",
    tag = "datasources",
    responses(
        (status = 200, description = "the datasources and their pool use", body = crate::schema::DatasourcesView),
        (status = 401, description = "missing or unknown bearer token", body = crate::schema::ErrorBody),
        (status = 403, description = "the token's role is too low", body = crate::schema::ErrorBody),
        (status = 500, description = "internal error; the server log has the cause", body = crate::schema::ErrorBody),
        (status = 503, description = "shutting down or the store cannot write; retry", body = crate::schema::ErrorBody)
    )
)]
pub async fn list(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<Value>, ApiError> {
    state.auth.authorize(&headers, Role::Viewer)?;
    let datasources = state.datasources.as_ref().map(|d| d.datasources()).unwrap_or_default();
    Ok(Json(json!({ "datasources": datasources })))
}
