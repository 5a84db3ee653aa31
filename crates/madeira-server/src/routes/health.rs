//! `/healthz` always answers; `/readyz` answers 200 once the app marked itself
//! ready, and 503 while the store cannot take writes (it turns ready again by
//! itself when a write succeeds).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;

use crate::AppState;

pub async fn healthz() -> &'static str {
    "ok\n"
}

pub async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    if !state.ready.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting\n".into());
    }
    match state.engine.store_status() {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("store unavailable: {e}\n")),
    }
}
