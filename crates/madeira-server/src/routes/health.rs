//! `/healthz` always answers; `/readyz` answers 200 once the app marked itself ready.

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::StatusCode;

use crate::AppState;

pub async fn healthz() -> &'static str {
    "ok\n"
}

pub async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}
