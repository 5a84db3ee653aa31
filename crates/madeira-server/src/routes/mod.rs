//! Route table and the request helpers shared by handlers.

mod alerts;
mod audit;
mod datasources;
mod flows;
pub(crate) mod follow;
mod health;
mod lifecycle;
pub(crate) mod openapi;
mod runs;
mod sidecars;
mod sources;
mod telemetry;
mod triggers;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::routing::{MethodRouter, get, post, put};
use serde::de::DeserializeOwned;

use crate::{ApiError, AppState, MAX_BODY_BYTES};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(telemetry::metrics))
        .route("/admin/log-level", put(telemetry::put_log_level).get(telemetry::get_log_level))
        .nest("/api/v1", api())
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(crate::guard::json_bodies))
        .layer(axum::middleware::map_response(crate::rejections::json_errors))
        .with_state(state)
}

/// Every `/api/v1` route (path relative to `/api/v1`, handlers documented in
/// `openapi`). The router is built from this list and the OpenAPI test probes
/// every method on each path, so a route cannot be served undocumented.
pub(crate) fn api_routes() -> Vec<(&'static str, MethodRouter<AppState>)> {
    vec![
        ("/openapi.json", get(openapi::document)),
        ("/flows", get(flows::list)),
        ("/flows/{name}", get(flows::get).put(flows::put).delete(lifecycle::delete)),
        ("/flows/{name}/promote", post(lifecycle::promote)),
        ("/flows/{name}/demote", post(lifecycle::demote)),
        ("/flows/{name}/runs", post(runs::trigger)),
        ("/flows/{name}/versions", get(flows::versions)),
        ("/flows/{name}/versions/{version}", get(flows::version)),
        ("/flows/{name}/{action}", post(triggers::pause)),
        ("/events", post(triggers::event)),
        ("/runs", get(runs::list)),
        ("/runs/{id}", get(runs::show)),
        ("/runs/{id}/cancel", post(runs::cancel)),
        ("/runs/{id}/transitions", get(runs::transitions)),
        ("/runs/{id}/nodes/{node}/logs", get(runs::logs)),
        ("/runs/{id}/nodes/{node}/{action}", post(runs::node_action)),
        ("/audit", get(audit::list)),
        ("/alerts", get(alerts::list)),
        ("/alerts/test", post(alerts::test)),
        ("/sidecars", get(sidecars::list)),
        ("/datasources", get(datasources::list)),
        ("/sources", get(sources::list)),
    ]
}

fn api() -> Router<AppState> {
    api_routes()
        .into_iter()
        .fold(Router::new(), |router, (path, methods)| router.route(path, methods))
        .fallback(|| async { ApiError::not_found("no such API route; see SPEC §9 or /api/v1/openapi.json") })
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
