//! `/alerts` (firing and resolved, with deliveries per channel) and `/sidecars`
//! (group, jobs, running attempts, heartbeat age, version; nodes waiting for a
//! sidecar). Both read the same handles as `GET /api/v1/alerts` and `/sidecars`.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::Response;
use madeira_store::AlertQuery;
use maud::html;
use serde_json::Value;

use crate::i18n::t;
use crate::page::{self, Nav, Shell};
use crate::session::Ctx;
use crate::terms::{Term, term_markup};
use crate::{Console, ConsoleError};

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// An alert's acknowledgement and silence (who, why, until), and for an open
/// alert the buttons that set them.
fn marks(ctx: &Ctx, a: &Value) -> maud::Markup {
    let lang = ctx.lang;
    let id = text(&a["id"]);
    let open = matches!(text(&a["status"]).as_str(), "pending" | "firing");
    let dialog = |action: &str, label: &'static str, extra: Option<maud::Markup>| page::ActionDialog {
        id: format!("dlg-{action}-{id}"),
        label: t(lang, label),
        action: format!("/alerts/{id}/{action}"),
        hidden: vec![],
        preview: Some(text(&a["summary"])),
        danger: false,
        denied: ctx.denied(madeira_server::Role::Operator),
        extra,
    };
    let lengths = html! {
        label { (t(lang, "Silence for"))
            select name="for" { @for d in ["30m", "1h", "2h", "4h", "8h", "1d"] { option value=(d) selected[d == "2h"] { (d) } } }
        }
    };
    html! {
        @let ack = &a["acknowledged"];
        @if ack.is_object() {
            div.mark.acked { (t(lang, "Acknowledged by")) " " strong { (text(&ack["by"])) } ": " (text(&ack["reason"])) }
        }
        @let silence = &a["silenced"];
        @if silence.is_object() {
            div.mark.silenced { (t(lang, "Silenced until")) " " (text(&silence["until"])) " · " strong { (text(&silence["by"])) } ": " (text(&silence["reason"])) }
        }
        @if open {
            @if !ack.is_object() { (dialog("acknowledge", "Acknowledge", None).render(ctx)) }
            (dialog("silence", "Silence", Some(lengths)).render(ctx))
        }
    }
}

/// The link to the page after `alerts` when it was full.
fn older(alerts: &[Value], status_qs: &str) -> Option<String> {
    let last = alerts.last().filter(|_| alerts.len() as u32 >= PAGE).map(|a| text(&a["id"]))?;
    let sep = if status_qs.is_empty() { '?' } else { '&' };
    Some(format!("/alerts{status_qs}{sep}before={}", crate::page::url_encode(&last)))
}

/// Alerts on one page of `/alerts`, newest first; "Older" pages by the last id.
const PAGE: u32 = 50;

pub async fn alerts(
    State(console): State<Console>,
    ctx: Ctx,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    let lang = ctx.lang;
    let status = q.get("status").filter(|s| matches!(s.as_str(), "pending" | "firing" | "resolved")).cloned();
    let list = match &console.app.alerts {
        Some(a) => {
            let before = q.get("before").filter(|b| b.len() <= 64).cloned();
            let query = AlertQuery { status: status.clone(), flow: None, limit: PAGE, before };
            Some(a.list(&query).await.map_err(|e| ConsoleError::Api {
                status: axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                message: e.to_string(),
            })?)
        }
        None => None,
    };
    let status_qs = status.as_deref().map(|s| format!("?status={s}")).unwrap_or_default();
    // The next page follows the last alert read, shown to this user or not.
    let older = list.as_ref().and_then(|v| older(v["alerts"].as_array()?, &status_qs));
    let mut list = list;
    if let (Some(v), Some(visible)) = (list.as_mut(), super::visible(&console, &ctx.user).await?)
        && let Some(alerts) = v.get_mut("alerts").and_then(|l| l.as_array_mut())
    {
        alerts.retain(|a| a.get("flow").and_then(|f| f.as_str()).is_some_and(|f| visible.contains(f)));
    }
    let body = html! {
        h1 { (t(lang, "Alerts")) }
        nav.filters { a href="/alerts" { (t(lang, "all")) } " · " a href="/alerts?status=firing" { (t(lang, "Firing")) } " · " a href="/alerts?status=resolved" { (t(lang, "Resolved")) } }
        @match &list {
            None => p.muted { (t(lang, "Alerting is not running here.")) },
            Some(v) => {
                @let alerts = v["alerts"].as_array().cloned().unwrap_or_default();
                @if alerts.is_empty() { p.muted { (t(lang, "none")) } }
                div.table-wrap { table.alerts {
                    thead { tr { th { (t(lang, "State")) } th { (t(lang, "Severity")) } th { (t(lang, "Summary")) } th { (t(lang, "Flow")) } th { (t(lang, "Runs")) } th { (t(lang, "Deliveries")) } th { (t(lang, "Actions")) } } }
                    tbody { @for a in &alerts { tr {
                        td { span class=(format!("tag al-{}", text(&a["status"]))) data-status=(text(&a["status"])) { (term_markup(lang, Term::AlertStatus, &text(&a["status"]))) } }
                        td { (term_markup(lang, Term::Severity, &text(&a["severity"]))) }
                        td { strong { (text(&a["alertname"])) } " " (text(&a["summary"])) @if !text(&a["node"]).is_empty() { " · " code { (text(&a["node"])) } } }
                        td { (text(&a["flow"])) }
                        td { @for r in a["runs"].as_array().cloned().unwrap_or_default().iter().take(5) {
                            @let id = text(r); a href=(super::run_href(&id)) { code { (super::run::short(&id)) } } " " } }
                        td { @for d in a["deliveries"].as_array().cloned().unwrap_or_default() {
                            span.tag title=(text(&d["last_error"])) { (text(&d["channel"])) ": " (term_markup(lang, Term::Delivery, &text(&d["status"]))) } " " } }
                        td.alert-actions { (marks(&ctx, a)) }
                    } } }
                } }
                nav.pager {
                    @if q.contains_key("before") { a href=(format!("/alerts{status_qs}")) { "« " (t(lang, "Newest")) } }
                    @if let Some(href) = &older { a href=(href) { (t(lang, "Older")) " »" } }
                }
            }
        }
    };
    Ok(page::html_response(Shell::new(&ctx, t(lang, "Alerts"), &console.assets, Nav::Alerts).render(body)))
}

pub async fn sidecars(State(console): State<Console>, ctx: Ctx) -> Result<Response, ConsoleError> {
    let lang = ctx.lang;
    let mut waiting = console.app.engine.waiting().list();
    if let Some(visible) = super::visible(&console, &ctx.user).await? {
        let mut kept = Vec::with_capacity(waiting.len());
        for w in waiting {
            let flow = console.app.reads.runs.load_run(&w.0).await?.map(|s| s.run.flow);
            if flow.is_some_and(|f| visible.contains(&f)) {
                kept.push(w);
            }
        }
        waiting = kept;
    }
    let body = html! {
        h1 { (t(lang, "Sidecars")) }
        @match console.app.fleet.as_ref().map(|f| f.sidecars()) {
            None => p.muted { (t(lang, "The sidecar link is off.")) },
            Some(list) => {
                @if list.is_empty() { p.muted { (t(lang, "none")) } }
                div.table-wrap { table.sidecars {
                    thead { tr { th { (t(lang, "Name")) } th { (t(lang, "Group")) } th { (t(lang, "State")) } th { (t(lang, "Jobs")) } th { (t(lang, "running")) } th { (t(lang, "Heartbeat")) } th { (t(lang, "Version")) } } }
                    tbody { @for s in &list { tr {
                        td { strong { (s.name) } }
                        td { (s.group) }
                        td { @if s.connected { span.tag.active { (t(lang, "Connected")) } } @else { span.tag.paused { (t(lang, "Lost")) } } }
                        td { @for j in &s.jobs { code { (j) } " " } }
                        td.num { (s.running) }
                        td { (format!("{:.1} s", s.last_heartbeat_age_seconds)) }
                        td { (s.version) }
                    } } }
                } }
            }
        }
        @if let Some(view) = console.app.xxl.as_ref() {
            h2 { "XXL-JOB executors" }
            @let executors = view();
            @let list = executors.as_array().cloned().unwrap_or_default();
            @if list.is_empty() { p.muted { (t(lang, "none")) } }
            div.table-wrap { table.sidecars {
                thead { tr { th { (t(lang, "Name")) } th { (t(lang, "Group")) } th { (t(lang, "State")) } th { "Kind" } th { (t(lang, "Heartbeat")) } } }
                tbody { @for x in &list { tr {
                    td { strong { (x["name"].as_str().unwrap_or("")) } }
                    td { (x["group"].as_str().unwrap_or("")) }
                    td { @if x["live"] == true { span.tag.active { (t(lang, "Connected")) } } @else { span.tag.paused { (t(lang, "Lost")) } } }
                    td { code { "xxl" } }
                    td { (format!("{:.1} s", (madeira_engine::now_ms() - x["last_seen_ms"].as_i64().unwrap_or(0)) as f64 / 1000.0)) }
                } } }
            } }
        }
        h2 { (t(lang, "Nodes waiting for a sidecar")) }
        @if waiting.is_empty() { p.muted { (t(lang, "none")) } }
        ul { @for (run, node, reason) in &waiting { li { a href=(super::run_href(run)) { code { (super::run::short(run)) } } " " code { (node) } " — " (reason) } } }
    };
    Ok(page::html_response(
        Shell::new(&ctx, t(lang, "Sidecars"), &console.assets, Nav::Sidecars).render(body),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_page_of_alerts_links_to_the_older_ones_after_its_last() {
        let page: Vec<Value> =
            (0..PAGE).rev().map(|i| serde_json::json!({"id": format!("a{i:02}")})).collect();
        assert_eq!(older(&page, ""), Some("/alerts?before=a00".into()));
        assert_eq!(older(&page, "?status=firing"), Some("/alerts?status=firing&before=a00".into()));
        assert_eq!(older(&page[1..], ""), None, "a page that is not full is the last");
    }
}
