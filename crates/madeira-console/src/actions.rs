//! The console's POSTs: node actions (confirm, reject, rerun, rerun with
//! downstream, mark-success, skip), cancel, bulk confirm, bulk cancel and bulk
//! rerun-failed from the runs search, run now, pause and resume, and an
//! alert's acknowledgement or silence. Each checks the CSRF token and the role first, then calls the same
//! `EngineHandle` method the REST API calls, with the signed-in token's name as
//! the actor (the engine audits it with the reason). htmx requests get a flash
//! fragment (and `HX-Trigger: madeira-refresh`), plain form posts a redirect.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use madeira_engine::{ActionRequest, NodeActionKind, TriggerRequest};
use madeira_server::Role;
use serde::Deserialize;
use serde_json::Value;

use crate::error::is_htmx;
use crate::i18n::{Lang, t};
use crate::page::flash;
use crate::session::Ctx;
use crate::terms::{Term, term};
use crate::{Console, ConsoleError};

const MAX_REASON: usize = 2000;
/// Most runs (or waiting nodes) one bulk action touches.
const MAX_BULK: usize = 500;

#[derive(Debug, Default, Deserialize)]
pub struct ActionForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    downstream: Option<String>,
    #[serde(default)]
    params: Option<String>,
    /// A silence's length (`2h`).
    #[serde(default, rename = "for")]
    duration: Option<String>,
}

/// A bulk form's fields (`sel` repeats).
#[derive(Debug, Deserialize)]
#[serde(from = "Vec<(String, String)>")]
pub struct Fields(Vec<(String, String)>);

impl From<Vec<(String, String)>> for Fields {
    fn from(pairs: Vec<(String, String)>) -> Self {
        Self(pairs)
    }
}

impl Fields {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// What a finished action says in `lang`: the action (`terms`), the node and
/// the run it touched, then "Done." (`confirm · node pay · run 0193…: Done.`).
pub(crate) fn done_message(lang: Lang, action: &str, node: Option<&str>, run: Option<&str>) -> String {
    let mut out = term(lang, Term::Action, action).to_string();
    if let Some(node) = node {
        out.push_str(&format!(" · {} {node}", t(lang, "node")));
    }
    if let Some(run) = run {
        out.push_str(&format!(" · {} {run}", t(lang, "run")));
    }
    let colon = if lang == Lang::En { ": " } else { "：" };
    format!("{out}{colon}{}", t(lang, "Done."))
}

/// How a bulk action went: done, or 409 naming each refusal.
fn bulk_outcome(ctx: &Ctx, action: &str, done: usize, refused: &[String]) -> Result<String, ConsoleError> {
    let action = format!("{} ×{done}", term(ctx.lang, Term::Action, action));
    if refused.is_empty() {
        Ok(done_message(ctx.lang, &action, None, None))
    } else {
        Err(ConsoleError::Api {
            status: StatusCode::CONFLICT,
            message: format!("{action}; {}: {}", t(ctx.lang, "refused"), refused.join("; ")),
        })
    }
}

/// The reason an action needs: present, not blank, bounded, no NUL.
pub(crate) fn required_reason(ctx: &Ctx, reason: Option<&str>) -> Result<String, ConsoleError> {
    let reason = reason.map(str::trim).unwrap_or("");
    if reason.is_empty() {
        return Err(ConsoleError::BadRequest(t(ctx.lang, "reason required").into()));
    }
    if reason.len() > MAX_REASON || reason.contains('\0') {
        return Err(ConsoleError::BadRequest(format!("reason: at most {MAX_REASON} bytes, no NUL")));
    }
    Ok(reason.to_string())
}

/// The answer to an action: a flash fragment for htmx, else a redirect to `back`.
pub(crate) fn answer(headers: &HeaderMap, outcome: Result<String, ConsoleError>, back: &str) -> Response {
    match (outcome, is_htmx(headers)) {
        (Ok(message), true) => (
            StatusCode::OK,
            [("HX-Trigger", "madeira-refresh")],
            crate::page::html_response(flash(true, &message)),
        )
            .into_response(),
        (Ok(_), false) => (StatusCode::SEE_OTHER, [(header::LOCATION, back.to_string())]).into_response(),
        (Err(e), true) => {
            (e.status(), crate::page::html_response(flash(false, &e.to_string()))).into_response()
        }
        (Err(e), false) => e.into_response(),
    }
}

pub async fn node_action(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Path((id, node, action)): Path<(String, String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let back = format!("/runs/{id}?node={node}");
    let outcome = async {
        ctx.check_post(&headers, form.csrf.as_deref(), Role::Operator)?;
        let kind = match action.as_str() {
            "confirm" => NodeActionKind::Confirm,
            "reject" => NodeActionKind::Reject,
            "rerun" => NodeActionKind::Rerun { downstream: form.downstream.as_deref() == Some("true") },
            "mark-success" => NodeActionKind::MarkSuccess,
            "skip" => NodeActionKind::Skip,
            other => return Err(ConsoleError::NotFound(format!("unknown node action `{other}`"))),
        };
        let reason = required_reason(&ctx, form.reason.as_deref())?;
        crate::pages::load_run(&console, &ctx.user, &id).await?;
        let request = ActionRequest {
            run_id: id.clone(),
            node: Some(node.clone()),
            kind: Some(kind),
            actor: ctx.user.name.clone(),
            reason: Some(reason),
        };
        console.app.engine.act(request).await?;
        tracing::info!(actor = %ctx.user.name, run_id = %id, node = %node, action = kind.name(), "console action");
        Ok(done_message(ctx.lang, kind.name(), Some(&node), Some(&id)))
    }
    .await;
    answer(&headers, outcome, &back)
}

pub async fn cancel(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    let back = format!("/runs/{id}");
    let outcome = async {
        ctx.check_post(&headers, form.csrf.as_deref(), Role::Operator)?;
        let reason = required_reason(&ctx, form.reason.as_deref())?;
        crate::pages::load_run(&console, &ctx.user, &id).await?;
        let request = ActionRequest {
            run_id: id.clone(),
            node: None,
            kind: None,
            actor: ctx.user.name.clone(),
            reason: Some(reason),
        };
        console.app.engine.act(request).await?;
        tracing::info!(actor = %ctx.user.name, run_id = %id, action = "cancel", "console action");
        Ok(done_message(ctx.lang, "cancel", None, Some(&id)))
    }
    .await;
    answer(&headers, outcome, &back)
}

/// `POST /approvals/bulk`: `sel=<run>:<node>` (repeated), `reason`, `csrf`.
pub async fn bulk_confirm(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    let outcome = async {
        ctx.check_post(&headers, fields.get("csrf"), Role::Operator)?;
        let reason = required_reason(&ctx, fields.get("reason"))?;
        let selected: Vec<(&str, &str)> = fields.all("sel").filter_map(|v| v.split_once(':')).collect();
        if selected.is_empty() || selected.len() > MAX_BULK {
            return Err(ConsoleError::BadRequest(format!("select 1 to {MAX_BULK} waiting nodes")));
        }
        let (mut done, mut failed) = (0, Vec::new());
        for (run, node) in selected {
            if let Err(e) = crate::pages::load_run(&console, &ctx.user, run).await {
                failed.push(format!("{run}: {e}"));
                continue;
            }
            let request = ActionRequest {
                run_id: run.to_string(),
                node: Some(node.to_string()),
                kind: Some(NodeActionKind::Confirm),
                actor: ctx.user.name.clone(),
                reason: Some(reason.clone()),
            };
            match console.app.engine.act(request).await {
                Ok(()) => done += 1,
                Err(e) => failed.push(format!("{run}: {e}")),
            }
        }
        tracing::info!(actor = %ctx.user.name, confirmed = done, failed = failed.len(), "console bulk confirm");
        bulk_outcome(&ctx, "confirm", done, &failed)
    }
    .await;
    answer(&headers, outcome, "/approvals")
}

/// `POST /runs/bulk`: `sel=<run id>` (repeated), `action=cancel|rerun-failed`,
/// `reason`, `csrf`. Cancel ends each selected run that is not final; rerun-failed
/// reruns, with their downstream, the FAILED nodes of each selected run that have
/// no FAILED node upstream (the rest are reset as their downstream). Each run is
/// one engine action per node, audited with the reason; the answer counts what
/// was done and names each run that refused.
pub async fn bulk_runs(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Form(fields): Form<Fields>,
) -> Response {
    let back = fields.get("back").filter(|b| b.starts_with("/runs")).unwrap_or("/runs").to_string();
    let outcome = async {
        ctx.check_post(&headers, fields.get("csrf"), Role::Operator)?;
        let action = match fields.get("action") {
            Some("cancel") => "cancel",
            Some("rerun-failed") => "rerun-failed",
            other => {
                return Err(ConsoleError::BadRequest(format!(
                    "action `{}`: use cancel or rerun-failed",
                    other.unwrap_or("")
                )));
            }
        };
        let reason = required_reason(&ctx, fields.get("reason"))?;
        let selected: Vec<&str> = fields.all("sel").collect();
        if selected.is_empty() || selected.len() > MAX_BULK {
            return Err(ConsoleError::BadRequest(format!("select 1 to {MAX_BULK} runs")));
        }
        let (mut done, mut failed) = (0usize, Vec::new());
        for run in selected {
            let loaded = match crate::pages::load_run(&console, &ctx.user, run).await {
                Ok(loaded) => loaded,
                Err(e) => {
                    failed.push(format!("{run}: {e}"));
                    continue;
                }
            };
            let nodes = match action {
                "cancel" => vec![None],
                _ => crate::pages::root_failed(&loaded).into_iter().map(Some).collect(),
            };
            if nodes.is_empty() {
                failed.push(format!("{run}: {}", t(ctx.lang, "no FAILED node to rerun")));
            }
            for node in nodes {
                let request = ActionRequest {
                    run_id: run.to_string(),
                    kind: node.as_ref().map(|_| NodeActionKind::Rerun { downstream: true }),
                    node,
                    actor: ctx.user.name.clone(),
                    reason: Some(reason.clone()),
                };
                match console.app.engine.act(request).await {
                    Ok(()) => done += 1,
                    Err(e) => failed.push(format!("{run}: {e}")),
                }
            }
        }
        tracing::info!(actor = %ctx.user.name, action, done, refused = failed.len(), "console bulk run action");
        bulk_outcome(&ctx, action, done, &failed)
    }
    .await;
    answer(&headers, outcome, &back)
}

/// `POST /flows/{name}/run`: `params` is a JSON object (or empty).
pub async fn run_now(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Path(flow): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    let outcome = async {
        ctx.check_post(&headers, form.csrf.as_deref(), Role::Operator)?;
        let text = form.params.as_deref().map(str::trim).filter(|s| !s.is_empty()).unwrap_or("{}");
        let params: Value = serde_json::from_str(text).map_err(|e| {
            ConsoleError::BadRequest(format!(
                "params: {e}; give a JSON object like {{\"date\": \"2026-12-01\"}}"
            ))
        })?;
        if !params.is_object() {
            return Err(ConsoleError::BadRequest("params must be a JSON object".into()));
        }
        let def = console.app.engine.flow(&flow, None).await?;
        if !ctx.user.caller().sees(&def.labels) {
            return Err(ConsoleError::NotFound(format!("flow {flow} not found")));
        }
        console.app.check_rate(&flow, def.rate_limit).await?;
        let request = TriggerRequest {
            flow: flow.clone(),
            params,
            idempotency_key: None,
            trigger: "manual".into(),
            actor: ctx.user.name.clone(),
            version: None,
            biz_date: None,
            at_ms: None,
        };
        let outcome = console.app.engine.trigger(request).await?;
        tracing::info!(actor = %ctx.user.name, flow = %flow, run_id = %outcome.run_id, "console run now");
        Ok(outcome.run_id)
    }
    .await;
    match outcome {
        Ok(run_id) => {
            let to = format!("/runs/{run_id}");
            if is_htmx(&headers) {
                (StatusCode::OK, [("HX-Redirect", to)], "").into_response()
            } else {
                (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
            }
        }
        Err(e) => answer(&headers, Err(e), &format!("/flows/{flow}")),
    }
}

async fn set_paused(
    console: &Console,
    ctx: &Ctx,
    headers: &HeaderMap,
    flow: &str,
    form: &ActionForm,
    paused: bool,
) -> Response {
    let outcome = async {
        ctx.check_post(headers, form.csrf.as_deref(), Role::Operator)?;
        let reason = form.reason.as_deref().map(str::trim).filter(|r| !r.is_empty()).map(str::to_string);
        if !ctx.user.caller().sees(&console.app.engine.flow(flow, None).await?.labels) {
            return Err(ConsoleError::NotFound(format!("flow {flow} not found")));
        }
        console.app.engine.set_paused(flow, paused, &ctx.user.name, reason).await?;
        tracing::info!(actor = %ctx.user.name, flow = %flow, paused, "console pause/resume");
        Ok(done_message(ctx.lang, if paused { "pause" } else { "resume" }, None, None))
    }
    .await;
    answer(headers, outcome, &format!("/flows/{flow}"))
}

/// Acknowledges (`acknowledge`) or silences (`silence`, with `for`) an open
/// alert, as `POST /api/v1/alerts/{id}/…` does (`madeira_server::mark_alert`).
pub async fn alert_mark(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let outcome = async {
        ctx.check_post(&headers, form.csrf.as_deref(), Role::Operator)?;
        let kind = match action.as_str() {
            "acknowledge" => madeira_alert::MarkKind::Acknowledge,
            "silence" => madeira_alert::MarkKind::Silence,
            other => return Err(ConsoleError::NotFound(format!("unknown alert action `{other}`"))),
        };
        let reason = required_reason(&ctx, form.reason.as_deref())?;
        let duration = form.duration.as_deref().filter(|d| !d.is_empty());
        madeira_server::mark_alert(&console.app, &ctx.user.caller(), &id, kind, Some(reason), duration)
            .await?;
        Ok(done_message(ctx.lang, &format!("alert_{action}"), None, None))
    }
    .await;
    answer(&headers, outcome, "/alerts")
}

pub async fn pause(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Path(flow): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    set_paused(&console, &ctx, &headers, &flow, &form, true).await
}

pub async fn resume(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Path(flow): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    set_paused(&console, &ctx, &headers, &flow, &form, false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_fields_keep_every_repeated_selection() {
        let fields: Fields = serde_urlencoded::from_str("csrf=c&sel=r1&sel=r2%3An&reason=a+b").expect("form");
        assert_eq!(fields.get("csrf"), Some("c"));
        assert_eq!(fields.get("reason"), Some("a b"));
        assert_eq!(fields.all("sel").collect::<Vec<_>>(), ["r1", "r2:n"]);
        assert_eq!(fields.get("action"), None);
    }

    #[test]
    fn the_done_message_is_in_one_language() {
        let zh = done_message(Lang::ZhCn, "confirm", Some("confirm"), Some("0193-run"));
        assert_eq!(zh, "确认 · 节点 confirm · 运行 0193-run：已完成。");
        let en = done_message(Lang::En, "mark_success", Some("pay"), None);
        assert_eq!(en, "mark_success · node pay: Done.");
    }
}
