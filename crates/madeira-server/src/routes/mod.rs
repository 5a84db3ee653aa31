//! Route table and the request helpers shared by handlers.

pub(crate) mod alerts;
mod audit;
mod backfills;
mod calendars;
mod datasources;
mod estate;
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

use std::convert::Infallible;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{Method, Uri};
use axum::response::Response;
use axum::routing::{MethodRouter, get, post, put};
use serde::de::DeserializeOwned;
use tower::Service;

use crate::{ApiError, AppState, MAX_BODY_BYTES};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route_service("/healthz", rewritten("", get(health::healthz).with_state(state.clone())))
        .route_service("/readyz", rewritten("", get(health::readyz).with_state(state.clone())))
        .route_service("/metrics", rewritten("", get(telemetry::metrics).with_state(state.clone())))
        .route_service(
            "/admin/log-level",
            rewritten(
                "",
                put(telemetry::put_log_level).get(telemetry::get_log_level).with_state(state.clone()),
            ),
        )
        .nest_service(API, rewritten(API, api().with_state(state)))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(crate::guard::json_bodies))
        // Answers of no route at all (404) get the error shape here too.
        .layer(axum::middleware::map_response(crate::rejections::json_errors))
}

/// Where the API is mounted.
const API: &str = "/api/v1";

/// `service` (mounted at `prefix`) with framework rejections rewritten as JSON
/// errors. Around the whole service, not by `Router::layer` (which wraps each
/// method's handler): a wrong method's 405 gets its `Allow` header only after
/// those inner layers ran, and the error body names the allowed methods from it.
fn rewritten<S>(
    prefix: &'static str,
    service: S,
) -> impl Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    use tower::Layer;
    let rewrite = move |method: Method, uri: Uri, response: Response| {
        crate::rejections::json_errors_under(prefix, method, uri, response)
    };
    axum::middleware::map_response(rewrite).layer(service)
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
        ("/flows/{name}/backfills", post(backfills::create)),
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
        ("/alerts/{id}/acknowledge", post(alerts::acknowledge)),
        ("/alerts/{id}/silence", post(alerts::silence)),
        ("/sidecars", get(sidecars::list)),
        ("/datasources", get(datasources::list)),
        ("/calendars", get(calendars::list)),
        ("/calendars/{name}", get(calendars::show).put(calendars::put)),
        ("/sources", get(sources::list)),
        ("/estate", get(estate::map)),
        ("/backfills", get(backfills::list)),
        ("/backfills/{id}", get(backfills::show)),
        ("/backfills/{id}/{action}", post(backfills::act)),
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
