//! The page shell (head, navigation, who is signed in, language switch), shared
//! bits of markup (state badges, action dialogs) and the security headers every
//! console response carries (CSP without inline script, no framing).

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use crate::assets::{Assets, HTMX_SRI, HTMX_VERSION};
use crate::i18n::{Lang, state_gloss, t};
use crate::terms::{state_label, state_labels_json};
use crate::viewer::Ctx;

/// Which navigation entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Approvals,
    Flows,
    Estate,
    Backfills,
    Runs,
    Audit,
    Alerts,
    Sidecars,
    None,
}

pub struct Shell<'a> {
    lang: Lang,
    title: String,
    assets: &'a Assets,
    ctx: Option<&'a Ctx>,
    nav: Nav,
    /// Extra ES modules for this page (logical asset names).
    modules: Vec<&'static str>,
    /// What the page's live stream refreshes: `runs` (on run-level events),
    /// `manual` (on confirmations), `run` (run.js does it) or nothing.
    live: &'static str,
    live_flow: Option<String>,
    /// The event id this page was rendered at (its stream resumes after it).
    after: Option<u64>,
}

impl<'a> Shell<'a> {
    pub fn new(ctx: &'a Ctx, title: impl Into<String>, assets: &'a Assets, nav: Nav) -> Self {
        let live = match nav {
            Nav::Approvals => "manual",
            Nav::None => "",
            _ => "runs",
        };
        Self {
            lang: ctx.lang,
            title: title.into(),
            assets,
            ctx: Some(ctx),
            nav,
            modules: Vec::new(),
            live,
            live_flow: None,
            after: Some(ctx.after),
        }
    }

    /// A page for visitors who are not signed in (sign-in).
    pub fn bare(lang: Lang, title: &str, assets: &'a Assets) -> Self {
        Self {
            lang,
            title: title.to_string(),
            assets,
            ctx: None,
            nav: Nav::None,
            modules: Vec::new(),
            live: "",
            live_flow: None,
            after: None,
        }
    }

    /// Sets what the live stream refreshes (see `live`).
    pub fn live(mut self, mode: &'static str) -> Self {
        self.live = mode;
        self
    }

    /// Listens to one flow's events only.
    pub fn live_flow(mut self, flow: &str) -> Self {
        self.live_flow = Some(flow.to_string());
        self
    }

    pub fn module(mut self, name: &'static str) -> Self {
        self.modules.push(name);
        self
    }

    pub fn render(&self, body: Markup) -> Markup {
        let lang = self.lang;
        let csrf = self.ctx.map(|c| c.user.csrf.as_str()).unwrap_or("");
        let hx_headers = serde_json::json!({"X-CSRF-Token": csrf}).to_string();
        html! {
            (DOCTYPE)
            html lang=(lang.code()) {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    meta name="color-scheme" content="light dark";
                    meta name="htmx-config" content=(HTMX_CONFIG);
                    title { (self.title) " · Madeira" }
                    link rel="icon" type="image/svg+xml" href=(self.assets.url("favicon.svg"));
                    link rel="stylesheet" href=(self.assets.url("style.css"));
                    script src=(self.assets.url("htmx.min.js")) integrity=(HTMX_SRI) crossorigin="anonymous" data-htmx-version=(HTMX_VERSION) defer {}
                    script type="module" src=(self.assets.url("app.js")) {}
                    @for m in &self.modules { script type="module" src=(self.assets.url(m)) {} }
                }
                body hx-headers=(hx_headers) data-lang=(lang.code()) data-state-labels=(state_labels_json(lang)) data-now=(madeira_engine::now_ms()) {
                    header.top {
                        a.brand href="/" { "Madeira" }
                        @if let Some(ctx) = self.ctx { (nav(ctx, self.nav)) }
                        div.who {
                            (time_switch(lang))
                            (lang_switch(lang, self.ctx.map_or("/", |c| c.path.as_str())))
                            @if let Some(ctx) = self.ctx { (who(ctx)) }
                        }
                    }
                    main #main data-live=(self.live) data-live-flow=[self.live_flow.as_deref()] data-after=[self.after] { (body) }
                    div #flash aria-live="polite" {}
                }
            }
        }
    }
}

/// htmx settings: no inline indicator styles (CSP), swap error answers too (they
/// carry a readable message).
const HTMX_CONFIG: &str = r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false,"responseHandling":[{"code":"204","swap":false},{"code":"...","swap":true}]}"#;

fn nav(ctx: &Ctx, current: Nav) -> Markup {
    let lang = ctx.lang;
    let items = [
        (Nav::Overview, "/", "Overview"),
        (Nav::Approvals, "/approvals", "Approvals"),
        (Nav::Flows, "/flows", "Flows"),
        (Nav::Estate, "/estate", "Estate"),
        (Nav::Backfills, "/backfills", "Backfills"),
        (Nav::Runs, "/runs", "Runs"),
        (Nav::Audit, "/audit", "Audit"),
        (Nav::Alerts, "/alerts", "Alerts"),
        (Nav::Sidecars, "/sidecars", "Sidecars"),
    ];
    html! {
        nav.main-nav aria-label="main" {
            @for (which, href, text) in items {
                a href=(href) aria-current=[(which == current).then_some("page")] { (t(lang, text)) }
            }
        }
    }
}

fn who(ctx: &Ctx) -> Markup {
    let lang = ctx.lang;
    html! {
        @if ctx.auth_on {
            span.user title=(format!("{:?}", ctx.user.role)) {
                (t(lang, "signed in as")) " " strong { (ctx.user.name) } " · " (format!("{:?}", ctx.user.role).to_lowercase())
            }
            form.inline method="post" action="/signout" {
                input type="hidden" name="csrf" value=(ctx.user.csrf);
                button.link type="submit" { (t(lang, "Sign out")) }
            }
        } @else {
            span.user.muted { (t(lang, "dev mode: no sign-in")) }
        }
    }
}

/// How times are shown (kept in the browser; `time` module doc).
fn time_switch(lang: Lang) -> Markup {
    html! {
        select #time-mode.time-mode aria-label=(t(lang, "Times")) title=(t(lang, "Times")) {
            option value="relative" { (t(lang, "Relative")) }
            option value="flow" { (t(lang, "Flow timezone")) }
            option value="utc" { "UTC" }
        }
    }
}

fn lang_switch(lang: Lang, path: &str) -> Markup {
    let (other, label) = match lang {
        Lang::En => ("zh-CN", "中文"),
        Lang::ZhCn => ("en", "English"),
    };
    let href = format!("/lang?set={other}&next={}", url_encode(path));
    html! { a.lang href=(href) hreflang=(other) lang=(other) { (label) } }
}

/// Percent-encodes everything but unreserved characters.
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A state as colour, icon and text (never colour alone). The text is the state
/// in `lang` (`SUCCESS`, `成功`); `data-state` always holds the SPEC name, and
/// the title the other form (the gloss in English, the SPEC name in Chinese).
pub fn badge(lang: Lang, state: &str) -> Markup {
    let shown = state_label(lang, state);
    let title = if shown == state { state_gloss(lang, state) } else { state };
    html! {
        span class=(format!("badge st-{state}")) data-state=(state) title=(title) {
            span.icon aria-hidden="true" { (icon(state)) } " " (shown)
        }
    }
}

pub fn icon(state: &str) -> &'static str {
    match state {
        "SUCCESS" => "✓",
        "FAILED" => "✗",
        "RUNNING" => "▶",
        "RETRYING" => "↻",
        "SKIPPED" => "⤼",
        "MANUAL_CONFIRM" => "‖",
        "CANCELLED" => "⊘",
        "QUEUED" => "…",
        _ => "○",
    }
}

/// A button opening a dialog with a form: hidden fields, a required reason, and
/// what the action touches. `action` is the form's URL.
pub struct ActionDialog<'a> {
    pub id: String,
    pub label: &'a str,
    pub action: String,
    pub hidden: Vec<(&'static str, String)>,
    pub preview: Option<String>,
    pub danger: bool,
    /// Why it is not offered (then it is not drawn).
    pub denied: Option<String>,
    /// More fields, above the reason (a silence's length).
    pub extra: Option<Markup>,
}

impl ActionDialog<'_> {
    pub fn render(&self, ctx: &Ctx) -> Markup {
        let lang = ctx.lang;
        // Not offered to this role: the section says why once (`denied_note`).
        if self.denied.is_some() {
            return html! {};
        }
        html! {
            button.action.danger[self.danger] type="button" data-open=(self.id) { (self.label) }
            dialog.action-dialog id=(self.id) {
                form method="post" action=(self.action) hx-post=(self.action) hx-target="#flash" hx-swap="innerHTML" {
                    h3 { (self.label) }
                    @if let Some(p) = &self.preview { p.preview { (p) } }
                    input type="hidden" name="csrf" value=(ctx.user.csrf);
                    @for (k, v) in &self.hidden { input type="hidden" name=(k) value=(v); }
                    @if let Some(extra) = &self.extra { (extra) }
                    label { (t(lang, "Reason (required)"))
                        textarea name="reason" required minlength="1" maxlength="2000" rows="3" {}
                    }
                    div.buttons {
                        button.primary.danger[self.danger] type="submit" { (self.label) }
                        button type="button" data-close=(self.id) { (t(lang, "Close")) }
                    }
                }
            }
        }
    }
}

pub fn html_response(markup: Markup) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], markup.into_string()).into_response()
}

/// A flash message fragment (answer to an htmx action).
pub fn flash(ok: bool, text: &str) -> Markup {
    html! { div class=(if ok { "flash ok" } else { "flash error" }) role="status" { (text) } }
}

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Security headers on every console response; pages are never cached.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let is_asset = request.uri().path().starts_with("/assets/");
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !is_asset && !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// Why a section's actions are not offered to this role.
pub fn denied_note(denied: Option<&String>) -> Markup {
    html! { @if let Some(why) = denied { p.denied.muted role="note" { "🔒 " (why) } } }
}

/// `markup` with a `Server-Timing` header: the handler's time since `started`
/// and, when it computed one, the DAG layout's.
pub fn timed_response(markup: Markup, started: std::time::Instant, layout_ms: Option<f64>) -> Response {
    let mut response = html_response(markup);
    let mut timing = format!("app;dur={:.1}", started.elapsed().as_secs_f64() * 1000.0);
    if let Some(ms) = layout_ms {
        timing.push_str(&format!(", layout;dur={ms:.1}"));
    }
    if let Ok(v) = HeaderValue::from_str(&timing) {
        response.headers_mut().insert("server-timing", v);
    }
    response
}
