//! The console's integration tests' shared set-up: a real engine on a fresh
//! SQLite store with one flow applied, the API and console routers merged as the
//! binary serves them, one request's answer read whole, and a manual run started.

#![allow(dead_code)] // each test binary uses part of it

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use madeira_console::{Console, ConsoleOptions};
use madeira_engine::{EngineHandle, EngineOptions, Executors, TriggerRequest};
use madeira_server::{AppState, AuthConfig, TokenEntry};
use madeira_store::sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

pub struct App {
    pub router: axum::Router,
    pub engine: EngineHandle,
    cancel: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for App {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The console and API over a running engine with `flow` applied (as `file`);
/// `tokens: None` is dev mode (no sign-in).
pub async fn app(file: &str, flow: &str, tokens: Option<Vec<TokenEntry>>) -> App {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"));
    let (engine, handle) = madeira_engine::build(
        store,
        Executors::new(Default::default()),
        Vec::new(),
        EngineOptions::default(),
    );
    let cancel = CancellationToken::new();
    tokio::spawn(engine.run(cancel.clone()));
    handle.apply_flow(file, flow).await.expect("flow");
    let state = AppState::new(handle.clone(), AuthConfig { tokens });
    let console =
        Console::new(state.clone(), ConsoleOptions { shutdown: cancel.clone(), ..Default::default() });
    let router = madeira_server::router(state).merge(madeira_console::router(console));
    App { router, engine: handle, cancel, _dir: dir }
}

/// One answer, read whole (at most 4 MiB).
pub struct Reply {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub bytes: Vec<u8>,
    pub body: String,
}

pub async fn send(app: &App, request: Request<Body>) -> Reply {
    let response = app.router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 4 << 20).await.expect("body").to_vec();
    Reply { status, headers, body: String::from_utf8_lossy(&bytes).into_owned(), bytes }
}

/// Starts a manual run of `flow`; answers its id.
pub async fn trigger(app: &App, flow: &str) -> String {
    app.engine
        .trigger(TriggerRequest {
            flow: flow.into(),
            params: serde_json::json!({}),
            idempotency_key: None,
            trigger: "manual".into(),
            actor: "test".into(),
            version: None,
            biz_date: None,
            at_ms: None,
        })
        .await
        .expect("trigger")
        .run_id
}

/// The text between the first `start` and the next `end`.
pub fn between(text: &str, start: &str, end: &str) -> String {
    let from = text.find(start).unwrap_or_else(|| panic!("no `{start}` in {text}")) + start.len();
    let to = text[from..].find(end).expect("end") + from;
    text[from..to].to_string()
}
