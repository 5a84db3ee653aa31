//! Route table and the request helpers shared by handlers.

mod alerts;
mod audit;
mod flows;
mod health;
mod runs;
mod sidecars;
mod sources;
mod telemetry;
mod triggers;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use serde::de::DeserializeOwned;

use crate::{ApiError, AppState, MAX_BODY_BYTES};

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/flows", get(flows::list))
        .route("/flows/{name}", get(flows::get).put(flows::put))
        .route("/flows/{name}/runs", post(runs::trigger))
        .route("/flows/{name}/versions", get(flows::versions))
        .route("/flows/{name}/versions/{version}", get(flows::version))
        .route("/flows/{name}/{action}", post(triggers::pause))
        .route("/events", post(triggers::event))
        .route("/runs", get(runs::list))
        .route("/runs/{id}", get(runs::show))
        .route("/runs/{id}/cancel", post(runs::cancel))
        .route("/runs/{id}/transitions", get(runs::transitions))
        .route("/runs/{id}/nodes/{node}/logs", get(runs::logs))
        .route("/runs/{id}/nodes/{node}/{action}", post(runs::node_action))
        .route("/audit", get(audit::list))
        .route("/alerts", get(alerts::list))
        .route("/alerts/test", post(alerts::test))
        .route("/sidecars", get(sidecars::list))
        .route("/sources", get(sources::list))
        .fallback(|| async { ApiError::not_found("no such API route; see SPEC §9") });
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(telemetry::metrics))
        .route("/admin/log-level", put(telemetry::put_log_level).get(telemetry::get_log_level))
        .nest("/api/v1", api)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::map_response(crate::rejections::json_errors))
        .with_state(state)
}

/// Parses an optional JSON body (empty means `T::default()`), naming the problem.
pub(crate) fn json_body<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." { String::new() } else { format!(" at `{path}`") };
        ApiError::bad_request(format!("request body{at}: {}", e.inner()))
    })
}
