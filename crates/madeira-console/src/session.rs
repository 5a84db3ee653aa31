//! Sign-in and who is looking. A bearer token from `auth.tokens`, pasted once,
//! makes a session (`sessions`: kept in the store, hashed) whose random id goes in
//! an HttpOnly, SameSite=Strict cookie. Every POST must carry the session's CSRF
//! token (form field `csrf` or header `X-CSRF-Token`); the sign-in form's own is
//! a double-submit cookie (`madeira_signin`), so it works on any replica. Without
//! `auth.tokens` (`madeira dev`) every visitor is `local` (admin) and the CSRF
//! token is one per process. Tokens are never stored in the session, logged or
//! echoed; a session holds only the token's name.

use axum::Form;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use madeira_server::Role;
use maud::html;
use serde::Deserialize;

use crate::i18n::{Lang, t};
use crate::sessions::random_token;
pub use crate::viewer::{Ctx, User};
use crate::{Console, ConsoleError, page};

pub const SESSION_COOKIE: &str = "madeira_session";
pub const LANG_COOKIE: &str = "madeira_lang";
/// The sign-in form's CSRF token, also in its hidden field (double submit).
const SIGNIN_COOKIE: &str = "madeira_signin";

/// Constant-time comparison (length leaks, content does not).
pub fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

/// A cookie's value from the `Cookie` header.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The request's language: `?lang=`, then the cookie, then Accept-Language.
pub fn lang_of(parts: &Parts) -> Lang {
    let from_query = parts
        .uri
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("lang=")))
        .and_then(Lang::parse);
    from_query.or_else(|| cookie(&parts.headers, LANG_COOKIE).and_then(Lang::parse)).unwrap_or_else(|| {
        Lang::from_accept(parts.headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok()))
    })
}

impl Ctx {
    /// A POST may go on: its CSRF token matches and the role suffices.
    pub fn check_post(
        &self,
        headers: &HeaderMap,
        form_csrf: Option<&str>,
        need: Role,
    ) -> Result<(), ConsoleError> {
        let presented = headers.get("x-csrf-token").and_then(|v| v.to_str().ok()).or(form_csrf).unwrap_or("");
        if presented.is_empty() || !same(presented, &self.user.csrf) {
            tracing::warn!(actor = %self.user.name, path = %self.path, "console POST refused: missing or wrong CSRF token");
            return Err(ConsoleError::Forbidden(
                t(self.lang, "Missing or wrong CSRF token: reload the page and try again.").into(),
            ));
        }
        if let Some(why) = self.denied(need) {
            tracing::warn!(actor = %self.user.name, path = %self.path, "console POST refused: role too weak");
            return Err(ConsoleError::Forbidden(why));
        }
        Ok(())
    }
}

impl FromRequestParts<Console> for Ctx {
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Self::Rejection> {
        let lang = lang_of(parts);
        let after = console.hub.last_id();
        let path = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
        if !console.auth_on() {
            let user = User {
                name: "local".into(),
                role: Role::Admin,
                csrf: console.sessions.process_csrf.clone(),
                scope: None,
            };
            return Ok(Self { user, lang, path, auth_on: false, after });
        }
        let tokens = console.app.auth.tokens.as_deref().unwrap_or(&[]);
        let user = match cookie(&parts.headers, SESSION_COOKIE).filter(|id| !id.is_empty()) {
            Some(id) => console.sessions.get(id, tokens).await?,
            None => None,
        };
        match user {
            Some(user) => Ok(Self { user, lang, path, auth_on: true, after }),
            None => Err(ConsoleError::SignIn { next: path, htmx: crate::error::is_htmx(&parts.headers) }),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct NextQuery {
    #[serde(default)]
    next: Option<String>,
    #[serde(default)]
    set: Option<String>,
}

/// Only a local absolute path may be a redirect target, and one without control
/// characters (it goes into a `Location` header).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.chars().any(char::is_control) =>
        {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

pub async fn signin_page(
    State(console): State<Console>,
    parts: Parts,
    Query(q): Query<NextQuery>,
) -> Response {
    let lang = lang_of(&parts);
    if !console.auth_on() {
        return Redirect::to(&safe_next(q.next.as_deref())).into_response();
    }
    signin_form(&console, lang, &safe_next(q.next.as_deref()), None, StatusCode::OK)
}

fn signin_form(
    console: &Console,
    lang: Lang,
    next: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let csrf = random_token();
    let secure = if console.options.secure_cookies { "; Secure" } else { "" };
    let form_cookie =
        format!("{SIGNIN_COOKIE}={csrf}; Path=/signin; HttpOnly; SameSite=Strict; Max-Age=3600{secure}");
    let body = html! {
        section.signin {
            h1 { (t(lang, "Sign in")) }
            p.muted { (t(lang, "Paste a bearer token from auth.tokens. It is checked once and never stored in the browser; you get a session cookie.")) }
            @if let Some(e) = error { div.flash.error role="alert" { (e) } }
            form method="post" action="/signin" {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="next" value=(next);
                label for="token" { (t(lang, "Token")) }
                input #token type="password" name="token" autocomplete="off" required autofocus;
                button.primary type="submit" { (t(lang, "Sign in")) }
            }
        }
    };
    let shell = page::Shell::bare(lang, t(lang, "Sign in"), &console.assets);
    (status, [(header::SET_COOKIE, form_cookie)], page::html_response(shell.render(body))).into_response()
}

#[derive(Debug, Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: Option<String>,
    #[serde(default)]
    csrf: String,
}

pub async fn signin(State(console): State<Console>, parts: Parts, Form(form): Form<SignInForm>) -> Response {
    let lang = lang_of(&parts);
    let next = safe_next(form.next.as_deref());
    let expected = cookie(&parts.headers, SIGNIN_COOKIE).unwrap_or("");
    if expected.is_empty() || !same(&form.csrf, expected) {
        return signin_form(
            &console,
            lang,
            &next,
            Some(t(lang, "The form expired: try again.")),
            StatusCode::FORBIDDEN,
        );
    }
    let Some(tokens) = &console.app.auth.tokens else {
        return Redirect::to(&next).into_response();
    };
    let presented = form.token.trim();
    let Some(entry) = tokens.iter().find(|e| !presented.is_empty() && same(&e.token, presented)) else {
        // Logged at WARN with the client's address by the server's failed-auth limit.
        tracing::debug!("console sign-in refused: unknown token");
        return signin_form(&console, lang, &next, Some(t(lang, "Unknown token.")), StatusCode::UNAUTHORIZED);
    };
    let id = match console.sessions.open(entry).await {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(actor = %entry.name, error = %e, "console sign-in: the session could not be stored");
            return e.into_response();
        }
    };
    tracing::info!(actor = %entry.name, role = ?entry.role, "console sign-in");
    let cookie = session_cookie(&id, console.sessions.ttl().as_secs(), console.options.secure_cookies);
    (StatusCode::SEE_OTHER, [(header::LOCATION, next), (header::SET_COOKIE, cookie)]).into_response()
}

fn session_cookie(id: &str, max_age: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
}

#[derive(Debug, Default, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: Option<String>,
}

pub async fn signout(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Result<Response, ConsoleError> {
    ctx.check_post(&headers, form.csrf.as_deref(), Role::Viewer)?;
    if let Some(id) = cookie(&headers, SESSION_COOKIE) {
        console.sessions.close(id).await?;
    }
    tracing::info!(actor = %ctx.user.name, "console sign-out");
    let clear = session_cookie("", 0, console.options.secure_cookies);
    let to = if console.auth_on() { "/signin" } else { "/" };
    Ok((StatusCode::SEE_OTHER, [(header::LOCATION, to.to_string()), (header::SET_COOKIE, clear)])
        .into_response())
}

/// `GET /lang?set=zh-CN&next=/path`: remembers the language in a cookie.
pub async fn set_lang(Query(q): Query<NextQuery>) -> Response {
    let lang = q.set.as_deref().and_then(Lang::parse).unwrap_or(Lang::En);
    let cookie = format!("{LANG_COOKIE}={}; Path=/; SameSite=Strict; Max-Age=31536000", lang.code());
    let next = safe_next(q.next.as_deref());
    (StatusCode::SEE_OTHER, [(header::LOCATION, next), (header::SET_COOKIE, cookie)]).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_redirect_targets() {
        assert_eq!(safe_next(Some("/runs/1?x=2")), "/runs/1?x=2");
        for evil in [
            "//evil.example",
            "https://evil.example",
            "/\\evil",
            "",
            "/a\r\nSet-Cookie: x",
            "/\u{1}",
            "/a\tb",
            "/\u{7f}",
        ] {
            assert_eq!(safe_next(Some(evil)), "/", "{evil:?}");
        }
    }

    #[test]
    fn cookies_are_found_by_name() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=1; madeira_session=abc; b=2".parse().expect("header"));
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "missing"), None);
        assert!(session_cookie("x", 10, true).contains("HttpOnly; SameSite=Strict; Max-Age=10; Secure"));
    }
}
