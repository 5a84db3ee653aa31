//! Console errors: one enum, rendered as a small HTML page (or an htmx fragment)
//! with the right status. Engine and store errors keep the API's status mapping
//! (`madeira_server::ApiError`), so a refused action is a 409 here as there.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::html;

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// Not signed in: pages redirect to the sign-in page, other requests get 401.
    #[error("sign in first")]
    SignIn { next: String, htmx: bool },
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    /// An engine or store error, with the status the API gives it.
    #[error("{message}")]
    Api { status: StatusCode, message: String },
}

impl From<madeira_server::ApiError> for ConsoleError {
    fn from(e: madeira_server::ApiError) -> Self {
        Self::Api { status: e.status, message: e.message }
    }
}

impl From<madeira_engine::EngineError> for ConsoleError {
    fn from(e: madeira_engine::EngineError) -> Self {
        madeira_server::ApiError::from(e).into()
    }
}

impl From<madeira_store::StoreError> for ConsoleError {
    fn from(e: madeira_store::StoreError) -> Self {
        madeira_server::ApiError::from(e).into()
    }
}

impl ConsoleError {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::SignIn { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Api { status, .. } => *status,
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        if let Self::SignIn { next, htmx } = &self {
            let to = format!("/signin?next={}", crate::page::url_encode(next));
            // htmx follows a 303 inside its XHR; a 401 with HX-Redirect moves the page.
            let header_name = if *htmx { "HX-Redirect" } else { "Location" };
            let status = if *htmx { StatusCode::UNAUTHORIZED } else { StatusCode::SEE_OTHER };
            return (status, [(header_name, to)]).into_response();
        }
        let status = self.status();
        let message = self.to_string();
        let body = html! {
            div.flash.error role="alert" { strong { (status.as_u16()) " " } (message) }
        };
        let page = html! {
            (maud::DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; meta name="viewport" content="width=device-width, initial-scale=1"; title { "Madeira — " (status.as_u16()) } }
                body { main { (body) p { a href="/" { "Madeira console" } } } }
            }
        };
        (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], page.into_string()).into_response()
    }
}

/// Whether a request came from htmx (answered with a fragment, not a page).
pub fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request")
}

pub async fn not_found() -> ConsoleError {
    ConsoleError::NotFound("no such page".into())
}
