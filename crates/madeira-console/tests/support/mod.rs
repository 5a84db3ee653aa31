//! The console's integration tests' shared set-up: a real engine on a fresh
//! SQLite store with one flow applied, the API and console routers merged as the
//! binary serves them, one request's answer read whole, a manual run started, and
//! a session signed in with a token.

#![allow(dead_code)] // each test binary uses part of it

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use madeira_console::{Console, ConsoleOptions};
use madeira_engine::{EngineHandle, EngineOptions, Executors, TriggerRequest};
use madeira_server::{AppState, AuthConfig, Reads, TokenEntry};
use madeira_store::Store;
use madeira_store::sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

pub struct App {
    pub router: axum::Router,
    pub engine: EngineHandle,
    /// The store the engine writes, for tests to check what it holds.
    pub store: Arc<dyn Store>,
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
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"));
    let (engine, handle) = madeira_engine::build(
        store.clone(),
        Executors::new(Default::default()),
        Vec::new(),
        EngineOptions::default(),
    );
    let cancel = CancellationToken::new();
    tokio::spawn(engine.run(cancel.clone()));
    handle.apply_flow(file, flow).await.expect("flow");
    let state = AppState::new(handle.clone(), Reads::of(&store), AuthConfig { tokens });
    let options = ConsoleOptions { shutdown: cancel.clone(), ..Default::default() };
    let console = Console::new(state.clone(), store.clone(), options);
    let router = madeira_server::router(state).merge(madeira_console::router(console));
    App { router, engine: handle, store, cancel, _dir: dir }
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
    app.engine.trigger(TriggerRequest::manual(flow, "test")).await.expect("trigger").run_id
}

/// The text between the first `start` and the next `end`.
pub fn between(text: &str, start: &str, end: &str) -> String {
    let from = text.find(start).unwrap_or_else(|| panic!("no `{start}` in {text}")) + start.len();
    let to = text[from..].find(end).expect("end") + from;
    text[from..to].to_string()
}

/// The sign-in form: its double-submit cookie (`name=value`) and CSRF field.
pub async fn signin_form(app: &App) -> (String, String) {
    let page = send(app, Request::builder().uri("/signin").body(Body::empty()).expect("request")).await;
    let set = page.headers[header::SET_COOKIE].to_str().expect("ascii").to_string();
    assert!(set.starts_with("madeira_signin=") && set.contains("HttpOnly; SameSite=Strict"), "{set}");
    let cookie = set.split(';').next().expect("cookie").to_string();
    (cookie, between(&page.body, "name=\"csrf\" value=\"", "\""))
}

/// Signs in with `token`: the session cookie (`name=value`).
pub async fn sign_in(app: &App, token: &str) -> String {
    let (form_cookie, csrf) = signin_form(app).await;
    let request = Request::builder()
        .method("POST")
        .uri("/signin")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, form_cookie)
        .body(Body::from(format!("csrf={csrf}&next=%2F&token={token}")))
        .expect("request");
    let reply = send(app, request).await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
    let set = reply.headers[header::SET_COOKIE].to_str().expect("ascii").to_string();
    set.split(';').next().expect("cookie").to_string()
}
