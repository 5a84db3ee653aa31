//! API errors: one place maps engine and store errors to HTTP status codes and the
//! `{"error": {"code", "message", "details"}}` body.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use madeira_engine::EngineError;
use serde_json::{Value as Json_, json};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Json_,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), details: Json_::Null }
    }

    pub fn with_details(mut self, details: Json_) -> Self {
        self.details = details;
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = self.details.get("retry_after_seconds").and_then(Json_::as_u64);
        let body = json!({"error": {"code": self.code, "message": self.message, "details": self.details}});
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = retry_after
            && let Ok(value) = axum::http::HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, value);
        }
        response
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let message = e.to_string();
        match e {
            EngineError::FlowNotFound(_)
            | EngineError::VersionNotFound { .. }
            | EngineError::RunNotFound(_)
            | EngineError::NodeNotFound { .. } => Self::not_found(message),
            EngineError::Invalid(errors) => {
                let lines: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
                Self::new(StatusCode::BAD_REQUEST, "invalid_flow", message)
                    .with_details(json!({"errors": lines}))
            }
            EngineError::Refused { refusal: madeira_core::Refusal::ObserveOnly { .. }, .. } => {
                Self::new(StatusCode::CONFLICT, "observe_only", message)
            }
            EngineError::Refused { refusal, .. } => {
                let state = match &refusal {
                    madeira_core::Refusal::Node { state, .. } => Some(state.as_str()),
                    madeira_core::Refusal::Run { state, .. } => Some(state.as_str()),
                    _ => None,
                };
                Self::new(StatusCode::CONFLICT, "refused", message).with_details(json!({"state": state}))
            }
            EngineError::OverlapSkipped { active, .. } => {
                Self::new(StatusCode::CONFLICT, "overlap_skipped", message)
                    .with_details(json!({"active": active}))
            }
            EngineError::QueueFull { ref node, max_permits, queue_size, .. } => {
                let details = json!({"node": node, "max_permits": max_permits, "queue_size": queue_size,
                                     "retry_after_seconds": 1});
                Self::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", message).with_details(details)
            }
            EngineError::PausedQueueFull { ref flow, ref event_type, queued, limit } => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, "paused_queue_full", message).with_details(
                    json!({"flow": flow, "type": event_type, "queued": queued, "max_queued": limit}),
                )
            }
            EngineError::FlowActive { ref flow, ref runs } => {
                Self::new(StatusCode::CONFLICT, "flow_active", message)
                    .with_details(json!({"flow": flow, "runs": runs}))
            }
            EngineError::Lifecycle { code, .. } => {
                let code = match code {
                    "schedule_mismatch" => "schedule_mismatch",
                    "no_schedule" => "no_schedule",
                    _ => "cannot_edit",
                };
                Self::new(StatusCode::CONFLICT, code, message)
            }
            EngineError::ObserveOnly(_) => Self::new(StatusCode::CONFLICT, "observe_only", message),
            EngineError::Paused(_) => Self::new(StatusCode::CONFLICT, "refused", message),
            EngineError::BackfillNotFound(_) => Self::not_found(message),
            EngineError::BadBackfill(_) => Self::new(StatusCode::BAD_REQUEST, "bad_backfill", message),
            EngineError::BackfillRefused { ref state, .. } => {
                Self::new(StatusCode::CONFLICT, "refused", message).with_details(json!({"state": state}))
            }
            EngineError::ShuttingDown => Self::new(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", message),
            EngineError::BadText(_) => Self::new(StatusCode::BAD_REQUEST, "bad_text", message),
            EngineError::BadBizDate(_) => Self::new(StatusCode::BAD_REQUEST, "bad_biz_date", message),
            EngineError::HolderSilent { owner } => {
                Self::new(StatusCode::GATEWAY_TIMEOUT, "holder_silent", message)
                    .with_details(json!({"replica": owner}))
            }
            EngineError::Remote { code, state, .. } => {
                let (status, code) = match code.as_str() {
                    "refused" => (StatusCode::CONFLICT, "refused"),
                    "not_found" => (StatusCode::NOT_FOUND, "not_found"),
                    "shutting_down" => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
                    _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
                };
                Self::new(status, code, message).with_details(json!({"state": state}))
            }
            EngineError::HeldElsewhere { owner, .. } => {
                Self::new(StatusCode::CONFLICT, "held_elsewhere", message)
                    .with_details(json!({"replica": owner}))
            }
            EngineError::Store(e) if e.is_unavailable() => {
                tracing::warn!(error = %message, "answered 503: the store cannot write");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the store cannot take writes right now (nothing was saved); retry shortly",
                )
                .with_details(json!({"retry_after_seconds": 1}))
            }
            EngineError::BadIdempotencyKey { ref key, .. } => {
                Self::new(StatusCode::BAD_REQUEST, "bad_idempotency_key", message)
                    .with_details(json!({"header": "Idempotency-Key", "key": key}))
            }
            EngineError::IdempotencyKeyReused { ref run_id, .. } => {
                Self::new(StatusCode::CONFLICT, "idempotency_key_reused", message)
                    .with_details(json!({"run_id": run_id}))
            }
            EngineError::Store(_) | EngineError::BadStoredFlow { .. } => {
                // The database's own text stays in the log: it may name tables, paths or values.
                tracing::error!(error = %message, "internal error");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; the server log has the cause",
                )
            }
        }
    }
}

impl From<madeira_store::StoreError> for ApiError {
    fn from(e: madeira_store::StoreError) -> Self {
        EngineError::Store(e).into()
    }
}
