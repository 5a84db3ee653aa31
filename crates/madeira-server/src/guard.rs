//! What keeps a browser from driving the API sideways.
//!
//! - `local_only` (servers without authentication, i.e. `madeira dev` on
//!   loopback): a request whose `Host` names anything but loopback (`localhost`,
//!   `*.localhost`, 127.0.0.0/8, `::1`) or a configured public name is refused with
//!   421 — a DNS-rebinding page reaches loopback under its own name — and one whose
//!   `Origin` is not the server's own (`Host`'s host and port) with 403: a page on
//!   another origin may send simple requests (no-cors `fetch`, forms) to loopback.
//!   The port of `Host` is not checked (port forwarding keeps the name).
//! - `json_bodies` (every server): a request body sent to the API must say
//!   `Content-Type: application/json` (or `application/*+json`, parameters
//!   allowed), else 415: a browser sends `text/plain` cross-origin without a
//!   preflight. `PUT /api/v1/flows/{name}` and `PUT /api/v1/calendars/{name}`
//!   take YAML and are not checked (a PUT always needs a preflight).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::ApiError;

/// The names a server without authentication answers to, besides loopback ones.
#[derive(Debug, Default)]
pub(crate) struct HostPolicy {
    names: Vec<String>,
}

impl HostPolicy {
    pub(crate) fn new(names: &[String]) -> Self {
        Self { names: names.iter().map(|n| normalize(n)).filter(|n| !n.is_empty()).collect() }
    }

    fn allows(&self, host: &str) -> bool {
        let host = normalize(host);
        match host.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback() || self.names.contains(&host),
            Err(_) => host == "localhost" || host.ends_with(".localhost") || self.names.contains(&host),
        }
    }

    /// Why `headers` (and `uri`, for an absolute-form target) are refused, if they are.
    fn check(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), ApiError> {
        let host = match headers.get(header::HOST) {
            Some(value) => Some(value.to_str().ok().and_then(split_authority).ok_or_else(|| {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_host", "the Host header is not a host[:port]")
            })?),
            None => uri.authority().and_then(|a| split_authority(a.as_str())),
        };
        let Some((host, port)) = host else {
            // No Host at all (HTTP/1.0): no browser sends such a request.
            return Ok(());
        };
        if !self.allows(&host) {
            return Err(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "foreign_host",
                format!(
                    "Host `{host}` is not this server's: a server without authentication (`madeira dev`) \
                     answers only requests addressed to loopback (localhost, 127.0.0.1, [::1]); \
                     use one of those names"
                ),
            )
            .with_details(json!({"host": host})));
        }
        let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
        let origin_text = origin.to_str().unwrap_or("");
        let same = origin_text
            .parse::<Uri>()
            .ok()
            .and_then(|o| {
                let default = if o.scheme_str() == Some("https") { 443 } else { 80 };
                let (h, p) = split_authority(o.authority()?.as_str())?;
                Some((normalize(&h), p.unwrap_or(default)))
            })
            .is_some_and(|(h, p)| h == normalize(&host) && p == port.unwrap_or(80));
        if same {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            format!(
                "a request from origin `{origin_text}` is refused: a server without authentication \
                 (`madeira dev`) answers only its own pages and non-browser clients"
            ),
        )
        .with_details(json!({"origin": origin_text})))
    }
}

/// `host[:port]` split, brackets of an IPv6 literal removed.
fn split_authority(text: &str) -> Option<(String, Option<u16>)> {
    let authority: axum::http::uri::Authority = text.trim().parse().ok()?;
    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
    Some((host, authority.port_u16()))
}

fn normalize(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Middleware: refuses foreign `Host` and `Origin` (see the module doc).
pub(crate) async fn local_only(
    State(policy): State<Arc<HostPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(refusal) = policy.check(request.headers(), request.uri()) {
        let client = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string());
        tracing::warn!(
            client = client.as_deref().unwrap_or("?"),
            method = %request.method(),
            path = %request.uri().path(),
            code = refusal.code,
            "request refused: not addressed to this unauthenticated server by its own name or origin"
        );
        return refusal.into_response();
    }
    next.run(request).await
}

/// Middleware: a request body must be JSON (see the module doc).
pub(crate) async fn json_bodies(request: Request, next: Next) -> Response {
    let (method, path, headers) = (request.method(), request.uri().path(), request.headers());
    if has_body(headers) && !takes_yaml(method, path) && !is_json(headers) {
        let sent = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("none");
        return ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "{method} {path}: the body's Content-Type is `{sent}`; send `Content-Type: application/json`"
            ),
        )
        .with_details(json!({"content_type": sent}))
        .into_response();
    }
    next.run(request).await
}

fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.trim() != "0")
}

/// `PUT /api/v1/flows/{name}` and `PUT /api/v1/calendars/{name}`: YAML files.
fn takes_yaml(method: &Method, path: &str) -> bool {
    let one_name =
        |prefix: &str| path.strip_prefix(prefix).is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
    *method == Method::PUT && (one_name("/api/v1/flows/") || one_name("/api/v1/calendars/"))
}

/// `application/json` or `application/<anything>+json`, parameters allowed.
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json"
        || essence.strip_prefix("application/").is_some_and(|sub| sub.len() > 5 && sub.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(name.clone(), value.parse().expect("header"));
        }
        h
    }

    #[test]
    fn json_media_types_with_parameters_pass_others_do_not() {
        for ok in ["application/json", "Application/JSON; charset=utf-8", "application/merge-patch+json"] {
            assert!(is_json(&headers(&[(header::CONTENT_TYPE, ok)])), "{ok}");
        }
        for bad in ["text/plain", "application/x-www-form-urlencoded", "application/+json", "json"] {
            assert!(!is_json(&headers(&[(header::CONTENT_TYPE, bad)])), "{bad}");
        }
        assert!(!is_json(&HeaderMap::new()));
        assert!(takes_yaml(&Method::PUT, "/api/v1/flows/x"));
        assert!(takes_yaml(&Method::PUT, "/api/v1/calendars/x"));
        assert!(!takes_yaml(&Method::POST, "/api/v1/flows/x"));
        assert!(!takes_yaml(&Method::PUT, "/api/v1/flows/x/runs"));
    }

    #[test]
    fn loopback_hosts_and_same_origin_pass_foreign_ones_do_not() {
        let policy = HostPolicy::new(&["madeira.example".to_string()]);
        let uri = Uri::from_static("/api/v1/runs");
        for host in
            ["127.0.0.1:7070", "localhost:7070", "[::1]:7070", "LOCALHOST.", "madeira.example", "a.localhost"]
        {
            assert!(policy.check(&headers(&[(header::HOST, host)]), &uri).is_ok(), "{host}");
        }
        for host in ["evil.example:7070", "10.0.0.1:7070", "localhost.evil.example"] {
            let e = policy.check(&headers(&[(header::HOST, host)]), &uri).expect_err(host);
            assert_eq!(e.status, StatusCode::MISDIRECTED_REQUEST, "{host}");
        }
        let same = [(header::HOST, "127.0.0.1:7070"), (header::ORIGIN, "http://127.0.0.1:7070")];
        assert!(policy.check(&headers(&same), &uri).is_ok());
        for origin in ["https://evil.example", "null", "http://127.0.0.1:7071", "http://localhost:7070"] {
            let h = headers(&[(header::HOST, "127.0.0.1:7070"), (header::ORIGIN, origin)]);
            assert_eq!(policy.check(&h, &uri).expect_err(origin).status, StatusCode::FORBIDDEN, "{origin}");
        }
        assert!(policy.check(&HeaderMap::new(), &uri).is_ok(), "no Host: not a browser");
    }
}
