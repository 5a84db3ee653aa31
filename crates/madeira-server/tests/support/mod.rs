//! The in-process API of the server's integration tests: a real engine on a fresh
//! SQLite store, no auth, optionally with flows applied first.

use std::sync::Arc;

use madeira_engine::{EngineOptions, Executors};
use madeira_server::{AppState, AuthConfig};
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
    let store = Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"));
    let (engine, handle) = madeira_engine::build(
        store,
        Executors::new(Default::default()),
        Vec::new(),
        EngineOptions::default(),
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(engine.run(cancel.clone()));
    for (file, yaml) in flows {
        handle.apply_flow(file, yaml).await.expect("flow");
    }
    let router = madeira_server::router(AppState::new(handle, auth));
    App { router, _dir: dir, _cancel: cancel }
}
