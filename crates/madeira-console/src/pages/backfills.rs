//! Backfills in the console: `/backfills` lists them with their progress (a bar
//! and the counts) and, for an operator, pause / resume / cancel with a reason;
//! the flow page's "Backfill" form posts to `/flows/{name}/backfill`. Both call
//! the same `EngineHandle` methods as `POST /api/v1/flows/{name}/backfills` and
//! `POST /api/v1/backfills/{id}/{action}`, with the signed-in token as the actor.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use madeira_core::estate::{BackfillAction, BackfillOrder, Rerun};
use madeira_engine::BackfillRequest;
use madeira_server::Role;
use madeira_store::BackfillRecord;
use maud::{Markup, html};
use serde::Deserialize;

use crate::actions::{answer, done_message, required_reason};
use crate::error::is_htmx;
use crate::i18n::{Lang, t};
use crate::page::{self, Nav, Shell};
use crate::pages::flow_href;
use crate::pages::run::short;
use crate::session::Ctx;
use crate::time::stamp;
use crate::{Console, ConsoleError};

pub async fn page(State(console): State<Console>, ctx: Ctx) -> Result<Response, ConsoleError> {
    let lang = ctx.lang;
    let now = madeira_engine::now_ms();
    let engine = &console.app.engine;
    let mut shown = Vec::new();
    for b in engine.backfills(100).await? {
        let visible = match engine.flow(&b.flow, None).await {
            Ok(def) => ctx.user.caller().sees(&def.labels),
            Err(_) => !ctx.user.caller().is_scoped(),
        };
        if visible {
            shown.push(b);
        }
    }
    let body = html! {
        h1 { (t(lang, "Backfills")) }
        (page::denied_note(ctx.denied(Role::Operator).as_ref()))
        @if shown.is_empty() { p.muted { (t(lang, "No backfills yet: start one from a flow's page.")) } }
        @else {
            div.table-wrap { table.backfills {
                thead { tr {
                    th { (t(lang, "Backfill")) } th { (t(lang, "Flow")) } th { (t(lang, "Dates")) } th { (t(lang, "State")) }
                    th { (t(lang, "Progress")) } th.opt { (t(lang, "Actor")) } th.opt { (t(lang, "Reason")) } th { (t(lang, "Created")) } th {}
                } }
                tbody { @for b in &shown { (row(&ctx, b, now)) } }
            } }
        }
    };
    Ok(page::html_response(
        Shell::new(&ctx, t(lang, "Backfills").to_string(), &console.assets, Nav::Backfills).render(body),
    ))
}

fn row(ctx: &Ctx, b: &BackfillRecord, now: i64) -> Markup {
    let lang = ctx.lang;
    let p = &b.progress;
    let settled = p.success + p.failed + p.cancelled + p.skipped + p.blocked;
    let span = match (&b.date_from, &b.date_to) {
        (Some(f), Some(t)) => format!("{f} … {t}"),
        _ => b.dates.join(", "),
    };
    let dialog = |action: &str, label: &'static str, danger: bool| page::ActionDialog {
        id: format!("dlg-{action}-{}", b.id),
        label: t(lang, label),
        action: format!("/backfills/{}/{action}", b.id),
        hidden: vec![],
        preview: Some(format!("{} {span}", b.flow)),
        danger,
        denied: ctx.denied(Role::Operator),
        extra: None,
    };
    html! {
        tr data-backfill=(b.id) data-state=(b.state) {
            td data-label=(t(lang, "Backfill")) { code title=(b.id) { (short(&b.id)) } }
            td data-label=(t(lang, "Flow")) { a href=(flow_href(&b.flow)) { (b.flow) } @if b.with_dependents { " " span.tag { (t(lang, "with dependents")) } } }
            td.dates data-label=(t(lang, "Dates")) { (span) " (" (b.dates.len()) ")" }
            td data-label=(t(lang, "State")) { span.tag.{"bf-" (b.state)} { (state(lang, &b.state)) } }
            td.progress data-label=(t(lang, "Progress")) {
                progress value=(settled) max=(p.total.max(1)) {}
                " " span.counts { (settled) "/" (p.total) }
                @for (n, label) in [(p.running, "running"), (p.queued, "queued"), (p.success, "success"), (p.failed, "failed"), (p.skipped, "skipped"), (p.blocked, "blocked"), (p.cancelled, "cancelled")] {
                    @if n > 0 { " · " span.{"n-" (label)} { (t(lang, label)) " " (n) } }
                }
                @if !b.paused_flows.is_empty() {
                    br; span.paused-wait { (t(lang, "waits for the resume of paused flow")) " " (b.paused_flows.join(", ")) }
                }
            }
            td.opt data-label=(t(lang, "Actor")) { (b.actor) }
            td.opt data-label=(t(lang, "Reason")) { (b.reason) }
            td data-label=(t(lang, "Created")) { (stamp(lang, Some(b.created_at), now)) }
            td.actions {
                @if b.state == "running" { (dialog("pause", "Pause", false).render(ctx)) }
                @if b.state == "paused" { (dialog("resume", "Resume", false).render(ctx)) }
                @if matches!(b.state.as_str(), "running" | "paused") { (dialog("cancel", "Cancel backfill", true).render(ctx)) }
            }
        }
    }
}

fn state(lang: Lang, state: &str) -> &str {
    match state {
        "running" => t(lang, "running"),
        "paused" => t(lang, "paused"),
        "cancelled" => t(lang, "cancelled"),
        "done" => t(lang, "done"),
        other => other,
    }
}

/// The flow page's "Backfill" form.
pub fn form(ctx: &Ctx, flow: &str) -> Markup {
    let lang = ctx.lang;
    let action = format!("/flows/{flow}/backfill");
    html! {
        details.backfill-form {
            summary.button { (t(lang, "Backfill")) }
            form method="post" action=(action) hx-post=(action) hx-target="#flash" {
                input type="hidden" name="csrf" value=(ctx.user.csrf);
                label { (t(lang, "From")) input type="date" name="from" required; }
                label { (t(lang, "To")) input type="date" name="to" required; }
                label { (t(lang, "Parallel runs")) input type="number" name="parallel" min="1" max="64" value="1"; }
                label.check { input type="checkbox" name="with_dependents" value="on"; " " (t(lang, "with dependents")) }
                label { (t(lang, "Reason (required)")) textarea name="reason" required minlength="1" maxlength="2000" rows="2" {} }
                button.primary type="submit" { (t(lang, "Start backfill")) }
            }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct BackfillForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    to: Option<String>,
    #[serde(default)]
    parallel: Option<String>,
    #[serde(default)]
    with_dependents: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

fn date(field: &str, raw: Option<&str>) -> Result<chrono::NaiveDate, ConsoleError> {
    let raw = raw.map(str::trim).unwrap_or_default();
    madeira_core::bizdate::parse_date(raw).map_err(|e| ConsoleError::BadRequest(format!("{field}: {e}")))
}

/// `POST /flows/{name}/backfill`: starts a backfill, then shows `/backfills`.
pub async fn create(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Path(flow): Path<String>,
    Form(form): Form<BackfillForm>,
) -> Response {
    let outcome = async {
        ctx.check_post(&headers, form.csrf.as_deref(), Role::Operator)?;
        let reason = required_reason(&ctx, form.reason.as_deref())?;
        let def = console.app.engine.flow(&flow, None).await?;
        if !ctx.user.caller().sees(&def.labels) {
            return Err(ConsoleError::NotFound(format!("flow {flow} not found")));
        }
        let parallel = match form.parallel.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
            Some(p) => p.parse::<u32>().map_err(|_| {
                ConsoleError::BadRequest(format!("parallel: `{p}` is not a number from 1 to 64"))
            })?,
            None => 1,
        };
        let with_dependents = form.with_dependents.is_some();
        if with_dependents && ctx.user.caller().is_scoped() {
            for dependent in console.app.engine.backfill_flows(&flow, true).await? {
                let def = console.app.engine.flow(&dependent, None).await?;
                if !ctx.user.caller().sees(&def.labels) {
                    return Err(ConsoleError::BadRequest(format!(
                        "with dependents: flow {dependent} is another team's; backfill without dependents"
                    )));
                }
            }
        }
        let req = BackfillRequest {
            flow: flow.clone(),
            from: Some(date("from", form.from.as_deref())?),
            to: Some(date("to", form.to.as_deref())?),
            dates: None,
            calendar: None,
            order: BackfillOrder::Asc,
            parallel,
            with_dependents,
            rerun: Rerun::SkipExisting,
            reason,
            actor: ctx.user.name.clone(),
        };
        let made = console.app.engine.create_backfill(req).await?;
        tracing::info!(actor = %ctx.user.name, flow = %flow, backfill = %made.id, "console backfill");
        Ok(made.id)
    }
    .await;
    match outcome {
        Ok(_) if is_htmx(&headers) => (StatusCode::OK, [("HX-Redirect", "/backfills")], "").into_response(),
        Ok(_) => (StatusCode::SEE_OTHER, [(header::LOCATION, "/backfills")]).into_response(),
        Err(e) => answer(&headers, Err(e), &flow_href(&flow)),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ReasonForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /backfills/{id}/{pause|resume|cancel}`.
pub async fn act(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<ReasonForm>,
) -> Response {
    let outcome = async {
        ctx.check_post(&headers, form.csrf.as_deref(), Role::Operator)?;
        let action = match action.as_str() {
            "pause" => BackfillAction::Pause,
            "resume" => BackfillAction::Resume,
            "cancel" => BackfillAction::Cancel,
            other => return Err(ConsoleError::NotFound(format!("unknown backfill action `{other}`"))),
        };
        let (b, _) = console.app.engine.backfill(&id).await?;
        let visible = match console.app.engine.flow(&b.flow, None).await {
            Ok(def) => ctx.user.caller().sees(&def.labels),
            Err(_) => !ctx.user.caller().is_scoped(),
        };
        if !visible {
            return Err(ConsoleError::NotFound(format!("backfill {id} not found")));
        }
        let reason = required_reason(&ctx, form.reason.as_deref())?;
        console.app.engine.change_backfill(&id, action, &ctx.user.name, &reason).await?;
        Ok(done_message(ctx.lang, &format!("backfill_{action}"), None, None))
    }
    .await;
    answer(&headers, outcome, "/backfills")
}
