//! `/audit`: who did what, filtered by run, actor and time; `/audit.csv` exports
//! the same filter as CSV (RFC 4180 quoting; cells that a spreadsheet would run
//! as a formula are prefixed with `'`; a UTF-8 byte order mark first, so that
//! Excel reads the file as UTF-8 rather than the system's code page).

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use madeira_store::{AuditQuery, AuditRecord};
use maud::html;

use crate::i18n::t;
use crate::page::{self, Nav, Shell, url_encode};
use crate::session::Ctx;
use crate::terms::{Term, term_markup};
use crate::time::{rfc3339, stamp};
use crate::{Console, ConsoleError};
use madeira_core::timebound::parse_time;

const LIMIT: u32 = 200;
const CSV_LIMIT: u32 = 10_000;

fn query_of(q: &HashMap<String, String>, limit: u32) -> Result<AuditQuery, ConsoleError> {
    let nonempty = |k: &str| q.get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let since_ms =
        match nonempty("since") {
            Some(s) => Some(parse_time(&s).ok_or_else(|| {
                ConsoleError::BadRequest(format!("since `{s}`: use 2026-12-01T09:30 (UTC)"))
            })?),
            None => None,
        };
    Ok(AuditQuery { run_id: nonempty("run_id"), actor: nonempty("actor"), since_ms, limit })
}

async fn entries(
    console: &Console,
    user: &crate::session::User,
    q: &HashMap<String, String>,
    limit: u32,
) -> Result<Vec<AuditRecord>, ConsoleError> {
    let query = query_of(q, limit)?;
    let mut rows = console.app.reads.audit.audit(&query).await?;
    if let Some(visible) = super::visible(console, user).await? {
        let mut kept = Vec::with_capacity(rows.len());
        for r in rows {
            let flow = match &r.run_id {
                Some(id) => console.app.reads.runs.load_run(id).await?.map(|s| s.run.flow),
                None => {
                    r.details.as_ref().and_then(|d| d.get("flow")).and_then(|f| f.as_str()).map(String::from)
                }
            };
            if flow.is_some_and(|f| visible.contains(&f)) {
                kept.push(r);
            }
        }
        rows = kept;
    }
    if let Some(action) = q.get("action").map(|a| a.trim()).filter(|a| !a.is_empty()) {
        rows.retain(|r| r.action == action);
    }
    Ok(rows)
}

pub async fn page(
    State(console): State<Console>,
    ctx: Ctx,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    let lang = ctx.lang;
    let now = madeira_engine::now_ms();
    let rows = entries(&console, &ctx.user, &q, LIMIT).await?;
    let value = |k: &str| q.get(k).cloned().unwrap_or_default();
    let qs: Vec<String> = ["run_id", "actor", "since", "action"]
        .iter()
        .filter_map(|k| q.get(*k).map(|v| format!("{k}={}", url_encode(v))))
        .collect();
    let body = html! {
        h1 { (t(lang, "Audit")) }
        form.search method="get" action="/audit" {
            label { (t(lang, "Run")) input type="text" name="run_id" value=(value("run_id")); }
            label { (t(lang, "Actor")) input type="text" name="actor" value=(value("actor")); }
            label { (t(lang, "Action")) input type="text" name="action" value=(value("action")) placeholder="confirm, rerun, pause…"; }
            label { (t(lang, "From")) " (UTC)" input type="datetime-local" name="since" value=(value("since")); }
            button.primary type="submit" { (t(lang, "Filter")) }
            a.button href=(format!("/audit.csv?{}", qs.join("&"))) download { (t(lang, "Export CSV")) }
        }
        div.table-wrap { table.audit-table {
            thead { tr { th { (t(lang, "Time")) } th { (t(lang, "Actor")) } th { (t(lang, "Action")) } th { (t(lang, "Run")) } th { (t(lang, "Node")) } th { (t(lang, "Reason")) } } }
            tbody { @for a in &rows { tr {
                td.time data-label=(t(lang, "Time")) { (stamp(lang, Some(a.at), now)) }
                td data-label=(t(lang, "Actor")) { strong { (a.actor) } }
                td data-label=(t(lang, "Action")) { (term_markup(lang, Term::Action, &a.action)) }
                td data-label=(t(lang, "Run")) { @if let Some(r) = &a.run_id { a href=(super::run_href(r)) { code { (super::run::short(r)) } } } }
                td data-label=(t(lang, "Node")) { @if let Some(n) = &a.node { code { (n) } } }
                td.reason data-label=(t(lang, "Reason")) { (a.reason.as_deref().unwrap_or("")) }
            } } }
        } }
        @if rows.is_empty() { p.muted { (t(lang, "none")) } }
    };
    Ok(page::html_response(Shell::new(&ctx, t(lang, "Audit"), &console.assets, Nav::Audit).render(body)))
}

/// One CSV cell: quoted, quotes doubled, formula starts defused.
pub fn csv_cell(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{s}") } else { s.to_string() };
    format!("\"{}\"", s.replace('"', "\"\""))
}

pub async fn csv(
    State(console): State<Console>,
    ctx: Ctx,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    let rows = entries(&console, &ctx.user, &q, CSV_LIMIT).await?;
    let mut out = String::from("\u{feff}at,actor,action,run_id,node,reason,details\r\n");
    for a in &rows {
        let details = a.details.as_ref().map(|d| d.to_string()).unwrap_or_default();
        let cells = [
            rfc3339(a.at),
            a.actor.clone(),
            a.action.clone(),
            a.run_id.clone().unwrap_or_default(),
            a.node.clone().unwrap_or_default(),
            a.reason.clone().unwrap_or_default(),
            details,
        ];
        out.push_str(&cells.iter().map(|c| csv_cell(c)).collect::<Vec<_>>().join(","));
        out.push_str("\r\n");
    }
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (header::CONTENT_DISPOSITION, "attachment; filename=\"madeira-audit.csv\""),
        ],
        out,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::csv_cell;

    #[test]
    fn csv_cells_are_quoted_and_formulas_defused() {
        assert_eq!(csv_cell("plain"), "\"plain\"");
        assert_eq!(csv_cell("say \"hi\", ok"), "\"say \"\"hi\"\", ok\"");
        assert_eq!(csv_cell("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
    }
}
