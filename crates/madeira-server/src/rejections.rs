//! Framework rejections in the API's error shape: axum answers a too-large body
//! (413), a wrong media type (415), a wrong method (405), an unknown route (404) or
//! a path or query it cannot parse (400) with plain text or nothing; this layer
//! rewrites every such 4xx answer as `{"error": {"code", "message", "details"}}`,
//! keeping its status and headers (`Allow`, `Retry-After`).

use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::{ApiError, MAX_BODY_BYTES};

/// Longest plain-text rejection read back to quote in the message.
const MAX_TEXT: usize = 4096;

/// `map_response` middleware: leaves JSON and non-4xx answers alone.
pub(crate) async fn json_errors(method: Method, uri: Uri, response: Response) -> Response {
    json_errors_under("", method, uri, response).await
}

/// `json_errors` for a service nested under `prefix` (which sees its requests'
/// paths without it): messages name the whole path.
pub(crate) async fn json_errors_under(
    prefix: &str,
    method: Method,
    uri: Uri,
    response: Response,
) -> Response {
    let status = response.status();
    if !status.is_client_error() || is_json(response.headers()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, MAX_TEXT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let allow = parts.headers.get(header::ALLOW).and_then(|v| v.to_str().ok()).map(str::to_string);
    let path = format!("{prefix}{}", uri.path());
    let error = describe(status, &method, &path, &text, allow.as_deref());
    let mut rewritten = error.into_response();
    parts.headers.remove(header::CONTENT_TYPE);
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in &parts.headers {
        rewritten.headers_mut().entry(name).or_insert_with(|| value.clone());
    }
    *rewritten.status_mut() = status;
    rewritten
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json") || ct.ends_with("+json"))
}

fn describe(status: StatusCode, method: &Method, path: &str, text: &str, allow: Option<&str>) -> ApiError {
    let said = if text.is_empty() { String::new() } else { format!(" ({text})") };
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            status,
            "body_too_large",
            format!("{method} {path}: the request body is over the API's limit of {MAX_BODY_BYTES} bytes"),
        )
        .with_details(json!({"limit_bytes": MAX_BODY_BYTES})),
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = allow.unwrap_or_default();
            ApiError::new(
                status,
                "method_not_allowed",
                format!("{method} is not allowed on {path}; use {allowed}"),
            )
            .with_details(json!({"allow": allowed}))
        }
        StatusCode::NOT_FOUND => ApiError::new(
            status,
            "not_found",
            format!("{method} {path}: no such route; the API is under /api/v1"),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            status,
            "unsupported_media_type",
            format!("{method} {path}: unsupported Content-Type{said}; send application/json"),
        ),
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::new(
            status,
            "unprocessable",
            format!("{method} {path}: the request body is not valid{said}"),
        ),
        StatusCode::BAD_REQUEST => ApiError::bad_request(format!("{method} {path}: bad request{said}")),
        _ => ApiError::new(status, "rejected", format!("{method} {path}: {status}{said}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn rewrite(
        status: StatusCode,
        text: &'static str,
        headers: &[(header::HeaderName, &str)],
    ) -> Response {
        let mut response = (status, text).into_response();
        for (name, value) in headers {
            response.headers_mut().insert(name.clone(), value.parse().expect("header"));
        }
        json_errors(Method::POST, Uri::from_static("/api/v1/x"), response).await
    }

    async fn body_of(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        serde_json::from_slice(&bytes).expect("json")
    }

    #[tokio::test]
    async fn plain_rejections_become_json_with_status_and_headers_kept() {
        let r = rewrite(StatusCode::PAYLOAD_TOO_LARGE, "Failed to buffer the request body", &[]).await;
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(is_json(r.headers()));
        assert_eq!(body_of(r).await["error"]["code"], "body_too_large");
        let r = rewrite(StatusCode::METHOD_NOT_ALLOWED, "", &[(header::ALLOW, "GET,HEAD")]).await;
        assert_eq!(r.headers()[header::ALLOW], "GET,HEAD");
        let body = body_of(r).await;
        assert_eq!(body["error"]["code"], "method_not_allowed");
        assert!(body["error"]["message"].as_str().unwrap_or_default().contains("use GET,HEAD"), "{body}");
    }

    #[tokio::test]
    async fn json_and_non_client_errors_pass_through() {
        let r = rewrite(StatusCode::SERVICE_UNAVAILABLE, "starting", &[]).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let bytes = axum::body::to_bytes(r.into_body(), 1024).await.expect("body");
        assert_eq!(&bytes[..], b"starting");
        let api = ApiError::not_found("run x not found").into_response();
        let r = json_errors(Method::GET, Uri::from_static("/api/v1/runs/x"), api).await;
        assert_eq!(body_of(r).await["error"]["message"], "run x not found");
    }
}
