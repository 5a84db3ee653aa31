//! `/`: the overview. Runs by state over the last 24 h, what runs now, what
//! failed (each run with the node that failed it and that node's error), what
//! waits for a person, sidecars online and lost, open alerts and the next cron
//! fires.

use axum::extract::State;
use axum::response::Response;
use madeira_core::TriggerDef;
use madeira_store::{AlertQuery, RunQuery, RunRow};
use maud::{Markup, html};

use super::flows::runs_table;
use crate::i18n::{Lang, t};
use crate::page::{self, Nav, Shell, badge};
use crate::session::Ctx;
use crate::terms::{Term, term_markup};
use crate::time::stamp;
use crate::{Console, ConsoleError};
use madeira_core::timebound::id_bound;

/// Runs counted per state; more show as `1000+`.
const COUNT_CAP: u32 = 1000;

pub async fn page(State(console): State<Console>, ctx: Ctx) -> Result<Response, ConsoleError> {
    let lang = ctx.lang;
    let now = madeira_engine::now_ms();
    let engine = &console.app.engine;
    let reads = &console.app.reads;
    let day_ago = id_bound(now - 24 * 3_600_000);
    let scope = super::visible(&console, &ctx.user).await?;
    let in_scope = |flow: &str| scope.as_ref().is_none_or(|v| v.contains(flow));
    let mut counts = Vec::new();
    for state in ["QUEUED", "RUNNING", "SUCCESS", "FAILED", "CANCELLED"] {
        // Unscoped: a capped count in the store (no rows read back). Scoped: the
        // newest COUNT_CAP rows of the state, filtered by flow here.
        let n = if scope.is_none() {
            reads.runs.count_runs(state, &day_ago, COUNT_CAP).await? as usize
        } else {
            let query = RunQuery { state: Some(state.into()), limit: COUNT_CAP, ..Default::default() };
            let rows = reads.runs.list_runs(&query).await?;
            rows.iter().filter(|r| r.id >= day_ago && in_scope(&r.flow)).count()
        };
        counts.push((state, n, n as u32 >= COUNT_CAP));
    }
    let mut running = reads
        .runs
        .list_runs(&RunQuery { state: Some("RUNNING".into()), limit: 10, ..Default::default() })
        .await?;
    let mut failed = reads
        .runs
        .list_runs(&RunQuery { state: Some("FAILED".into()), limit: 5, ..Default::default() })
        .await?;
    running.retain(|r| in_scope(&r.flow));
    failed.retain(|r| in_scope(&r.flow));
    let mut failed_at = Vec::with_capacity(failed.len());
    for r in &failed {
        failed_at.push(failed_nodes(&console, &ctx.user, r).await);
    }
    let (waiting, _) = super::approvals::pending(&console, &ctx.user).await?;
    let sidecars = console.app.fleet.as_ref().map(|f| f.sidecars());
    let alerts = match &console.app.alerts {
        Some(a) => a
            .list(&AlertQuery { status: Some("firing".into()), limit: 10, ..AlertQuery::default() })
            .await
            .ok()
            .map(|mut v| {
                if scope.is_some()
                    && let Some(list) = v.get_mut("alerts").and_then(|l| l.as_array_mut())
                {
                    list.retain(|a| a.get("flow").and_then(|f| f.as_str()).is_some_and(&in_scope));
                }
                v
            }),
        None => None,
    };
    let mut fires = Vec::new();
    for record in reads.flows.list_flows().await? {
        if record.paused || !in_scope(&record.name) {
            continue;
        }
        let def = engine.flow(&record.name, Some(record.latest_version)).await?;
        for tr in &def.triggers {
            if let TriggerDef::Cron(c) = tr
                && let Some(next) = madeira_core::schedule::next_after(c, chrono::Utc::now())
            {
                fires.push((next.timestamp_millis(), record.name.clone(), c.expr.clone()));
            }
        }
    }
    fires.sort();
    fires.truncate(8);
    let body = html! {
        h1 { (t(lang, "Overview")) }
        section.cards-row {
            @for (state, n, capped) in &counts {
                a.stat href=(format!("/runs?state={state}&since={}", page::url_encode(&crate::time::rfc3339(now - 24 * 3_600_000)))) {
                    span.num { (n) @if *capped { "+" } } (badge(lang, state))
                }
            }
        }
        p.muted.small { (t(lang, "Runs by state (24 h)")) }
        div.overview-grid {
            section.box { h2 { a href="/approvals" { (t(lang, "Waiting for confirmation")) } " " span.count { (waiting.len()) } }
                ul { @for p in waiting.iter().take(6) { li { a href=(super::run_href(&p.run_id)) { (p.flow) " · " code { (p.node) } } " — " (p.prompt) } } }
                @if waiting.is_empty() { p.muted { (t(lang, "none")) } } }
            section.box { h2 { (t(lang, "Sidecars")) }
                @match &sidecars {
                    Some(list) => {
                        @let online = list.iter().filter(|s| s.connected).count();
                        p { a href="/sidecars" { (t(lang, "Sidecars online")) ": " strong { (online) } " · " (t(lang, "Sidecars lost")) ": " strong { (list.len() - online) } } }
                    }
                    None => p.muted { (t(lang, "The sidecar link is off.")) },
                } }
            section.box { h2 { a href="/alerts" { (t(lang, "Open alerts")) } }
                @match &alerts {
                    Some(v) => {
                        @let list = v["alerts"].as_array().cloned().unwrap_or_default();
                        @if list.is_empty() { p.muted { (t(lang, "none")) } }
                        ul { @for a in &list { li { span.tag { (term_markup(lang, Term::Severity, a["severity"].as_str().unwrap_or(""))) } " " (a["summary"].as_str().unwrap_or("")) } } }
                    }
                    None => p.muted { (t(lang, "Alerting is not running here.")) },
                } }
            section.box { h2 { (t(lang, "Next cron fires")) }
                @if fires.is_empty() { p.muted { (t(lang, "none")) } }
                ul { @for (at, flow, expr) in &fires { li { a href=(super::flow_href(flow)) { (flow) } " " code { (expr) } " " (stamp(lang, Some(*at), now)) } } } }
        }
        section { h2 { (t(lang, "Running now")) } (runs_table(lang, &running, now)) }
        section { h2 { (t(lang, "Recently failed")) } (failed_table(lang, &failed, &failed_at, now)) }
    };
    Ok(page::html_response(
        Shell::new(&ctx, t(lang, "Overview"), &console.assets, Nav::Overview).render(body),
    ))
}

/// Longest error shown per failed node (the run page has all of it).
const ERROR_CHARS: usize = 120;

/// The nodes that failed run `r` on their own (`root_failed`), each with its
/// error; empty when the run cannot be read (its flow deleted meanwhile).
async fn failed_nodes(console: &Console, user: &crate::session::User, r: &RunRow) -> Vec<(String, String)> {
    let Ok(run) = super::load_run(console, user, &r.id).await else { return Vec::new() };
    super::root_failed(&run)
        .into_iter()
        .map(|node| {
            let error = run
                .stored
                .nodes
                .iter()
                .find(|n| n.node == node)
                .and_then(|n| n.reason.clone())
                .unwrap_or_default();
            let error = match error.char_indices().nth(ERROR_CHARS) {
                Some((cut, _)) => format!("{}…", &error[..cut]),
                None => error,
            };
            (node, error)
        })
        .collect()
}

/// Recently failed runs, each naming the node that failed it and its error.
fn failed_table(lang: Lang, runs: &[RunRow], nodes: &[Vec<(String, String)>], now: i64) -> Markup {
    html! {
        @if runs.is_empty() { p.muted { (t(lang, "No runs match.")) } }
        @else {
            div.table-wrap { table.runs.failed-runs {
                thead { tr { th { (t(lang, "Run")) } th { (t(lang, "Flow")) } th { (t(lang, "Failed node")) } th { (t(lang, "Error")) } th { (t(lang, "Finished")) } } }
                tbody { @for (r, failed) in runs.iter().zip(nodes) { tr data-run=(r.id) {
                    td { a href=(super::run_href(&r.id)) { code { (super::run::short(&r.id)) } } }
                    td { a href=(super::flow_href(&r.flow)) { (r.flow) } " v" (r.version) }
                    td.failed-node { @for (i, (node, _)) in failed.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(format!("/runs/{}?node={}", r.id, page::url_encode(node))) { code { (node) } } }
                        @if failed.is_empty() { "-" } }
                    td.error { @for (node, error) in failed { @if !error.is_empty() { div { @if failed.len() > 1 { code { (node) } ": " } (error) } } } }
                    td { (stamp(lang, r.finished_at, now)) }
                } } }
            } }
        }
    }
}
