//! The in-process API of the server's integration tests: a real engine on a fresh
//! SQLite store, no auth, optionally with flows applied first.

use std::sync::Arc;

use madeira_engine::{EngineOptions, Executors};
use madeira_server::{AppState, AuthConfig, Reads};
use madeira_store::Store;
use madeira_store::sqlite::SqliteStore;

pub struct App {
    pub router: axum::Router,
    _dir: tempfile::TempDir,
    _cancel: tokio_util::sync::CancellationToken,
}

/// The API's router over a running engine, with `flows` (`(file, yaml)`) applied.
pub async fn app(flows: &[(&str, &str)]) -> App {
    app_with_auth(flows, AuthConfig::default()).await
}

/// As `app`, with bearer tokens (`auth`).
#[allow(dead_code)] // not every test binary authenticates
pub async fn app_with_auth(flows: &[(&str, &str)], auth: AuthConfig) -> App {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"));
    let (engine, handle) = madeira_engine::build(
        store.clone(),
        Executors::new(Default::default()),
        Vec::new(),
        EngineOptions::default(),
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(engine.run(cancel.clone()));
    for (file, yaml) in flows {
        handle.apply_flow(file, yaml).await.expect("flow");
    }
    let router = madeira_server::router(AppState::new(handle, Reads::of(&store), auth));
    App { router, _dir: dir, _cancel: cancel }
}

/// Sends one JSON request to `router`; answers its status and JSON body (`Null`
/// when the body is not JSON).
#[allow(dead_code)] // not every test binary sends anonymously
pub async fn send(
    router: &axum::Router,
    method: &str,
    uri: &str,
    body: &str,
) -> (axum::http::StatusCode, serde_json::Value) {
    send_as(router, None, method, uri, body).await
}

/// As `send`, with a bearer `token` when one is given.
pub async fn send_as(
    router: &axum::Router,
    token: Option<&str>,
    method: &str,
    uri: &str,
    body: &str,
) -> (axum::http::StatusCode, serde_json::Value) {
    use tower::ServiceExt;
    let mut request =
        axum::http::Request::builder().method(method).uri(uri).header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request.body(axum::body::Body::from(body.to_string())).expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 22).await.expect("body");
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}
