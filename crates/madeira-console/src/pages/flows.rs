//! `/flows` (every flow with labels, triggers and next fire, paused state and a
//! strip of its last runs) and `/flows/{name}` (the DAG, versions with a diff
//! view, routing rules, recent runs; pause/resume and run now with a params form).

use axum::extract::{Path, Query, State};
use axum::response::Response;
use madeira_core::{FlowDef, TriggerDef};
use madeira_server::Role;
use madeira_store::{FlowRecord, RunQuery, RunRow};
use maud::{Markup, html};
use serde::Deserialize;

use super::{flow_href, run::short, run_href};
use crate::dag;
use crate::i18n::{Lang, t};
use crate::page::{self, Nav, Shell, badge};
use crate::session::Ctx;
use crate::terms::{Term, term, term_markup};
use crate::time::stamp;
use crate::{Console, ConsoleError};

const STRIP: u32 = 12;

/// Each trigger as text, with the next fire of a cron trigger.
fn triggers(lang: Lang, def: &FlowDef, calendars: &madeira_calendar::Calendars, now: i64) -> Markup {
    html! {
        ul.triggers {
            @for tr in &def.triggers {
                @match tr {
                    TriggerDef::Cron(c) => {
                        @let next = madeira_core::schedule::next_fire(c, calendars, chrono::Utc::now()).map(|t| t.timestamp_millis());
                        li { (term(lang, Term::Trigger, "cron")) " " code { (c.expr) } " " span.muted { (c.timezone) }
                            @if let Some(cal) = &c.calendar { " " span.tag.calendar { (cal.name) } }
                            " → " (stamp(lang, next, now)) }
                    }
                    TriggerDef::Event { event, .. } => li { (term(lang, Term::Trigger, "event")) " " code { (event) } },
                    TriggerDef::Message(m) => li { (term(lang, Term::Trigger, "message")) " " code { (m.source) } },
                    TriggerDef::FlowSucceeded { flow, .. } => li { (term(lang, Term::Trigger, "after")) " " code { (flow) } },
                }
            }
            @if def.triggers.is_empty() { li.muted { (term(lang, Term::Trigger, "manual")) } }
        }
    }
}

fn strip(runs: &[RunRow]) -> Markup {
    html! {
        span.strip {
            @for r in runs.iter().rev() {
                a class=(format!("cell st-{}", r.state.shown())) href=(run_href(&r.id)) title=(format!("{} {}", r.state.shown(), r.id)) { (crate::page::icon(r.state.shown().as_str())) }
            }
        }
    }
}

fn pause_form(ctx: &Ctx, record: &FlowRecord) -> Markup {
    let (action, label) = if record.paused { ("resume", "Resume") } else { ("pause", "Pause") };
    let url = format!("/flows/{}/{action}", record.name);
    html! {
        @if ctx.can(Role::Operator) {
            form.inline method="post" action=(url) hx-post=(url) hx-target="#flash" {
                input type="hidden" name="csrf" value=(ctx.user.csrf);
                button type="submit" { (t(ctx.lang, label)) }
            }
        }
    }
}

pub async fn list(State(console): State<Console>, ctx: Ctx) -> Result<Response, ConsoleError> {
    let lang = ctx.lang;
    let now = madeira_engine::now_ms();
    let engine = &console.app.engine;
    let mut rows = Vec::new();
    for record in engine.store().list_flows().await? {
        let def = engine.flow(&record.name, Some(record.latest_version)).await?;
        if !ctx.user.caller().sees(&def.labels) {
            continue;
        }
        let runs = engine
            .store()
            .list_runs(&RunQuery { flow: Some(record.name.clone()), limit: STRIP, ..Default::default() })
            .await?;
        rows.push((record, def, runs));
    }
    let calendars = console.app.engine.calendars();
    let body = html! {
        h1 { (t(lang, "Flows")) " " span.muted { "(" (rows.len()) ")" } }
        (page::denied_note(ctx.denied(Role::Operator).as_ref()))
        div.table-wrap { table.flows {
            thead { tr { th { (t(lang, "Flow")) } th { (t(lang, "Labels")) } th { (t(lang, "Triggers")) } th { (t(lang, "Recent runs")) } th { (t(lang, "State")) } th {} } }
            tbody {
                @for (record, def, runs) in &rows {
                    tr {
                        td { a href=(flow_href(&record.name)) { strong { (record.name) } } " v" (record.latest_version)
                            @if let Some(d) = &def.description { br; span.muted { (d) } } }
                        td { @for (k, v) in &def.labels { span.tag { (k) "=" (v) } " " } }
                        td { (triggers(lang, def, &calendars, now)) }
                        td { (strip(runs)) }
                        td { @if record.paused { span.tag.paused { (t(lang, "paused")) } } @else { span.tag.active { (t(lang, "active")) } } }
                        td { (pause_form(&ctx, record)) }
                    }
                }
            }
        } }
    };
    Ok(page::html_response(Shell::new(&ctx, t(lang, "Flows"), &console.assets, Nav::Flows).render(body)))
}

#[derive(Debug, Default, Deserialize)]
pub struct FlowQuery {
    #[serde(default)]
    focus: Option<String>,
    #[serde(default)]
    depth: Option<usize>,
    #[serde(default)]
    diff: Option<u32>,
    #[serde(default)]
    version: Option<u32>,
}

pub async fn show(
    State(console): State<Console>,
    ctx: Ctx,
    Path(name): Path<String>,
    Query(q): Query<FlowQuery>,
) -> Result<Response, ConsoleError> {
    let started = std::time::Instant::now();
    let lang = ctx.lang;
    let now = madeira_engine::now_ms();
    let engine = &console.app.engine;
    let store = engine.store();
    let record = store
        .get_flow(&name)
        .await?
        .ok_or_else(|| ConsoleError::NotFound(format!("flow {name} not found")))?;
    if !ctx.user.caller().sees(&engine.flow(&name, None).await?.labels) {
        return Err(ConsoleError::NotFound(format!("flow {name} not found")));
    }
    let version = q.version.unwrap_or(record.latest_version);
    let def = engine.flow(&name, Some(version)).await?;
    let versions = store.flow_versions(&name).await?;
    let runs =
        store.list_runs(&RunQuery { flow: Some(name.clone()), limit: 20, ..Default::default() }).await?;
    let scope = dag::scope_of(&def, q.focus.as_deref(), q.depth, def.topo.first().copied().unwrap_or(0));
    let diff = q.diff.and_then(|v| {
        let new = versions.iter().find(|x| x.version == v)?;
        let old = versions.iter().rev().find(|x| x.version < v);
        let old_text = old.map_or("", |o| o.source.as_str());
        let text = similar::TextDiff::from_lines(old_text, new.source.as_str())
            .unified_diff()
            .header(&format!("v{}", old.map_or(0, |o| o.version)), &format!("v{v}"))
            .to_string();
        Some((v, text))
    });
    let base = flow_href(&name);
    let dates = super::bizdates::gather(engine, &def, &runs, now).await;
    let body = html! {
        div.flow-page data-flow=(name) data-tz=(crate::time::flow_tz(&def)) {
            h1 { (name) " " span.muted { "v" (version) } " "
                @if record.paused { span.tag.paused { (t(lang, "paused")) } } @else { span.tag.active { (t(lang, "active")) } } }
            @if let Some(d) = &def.description { p.muted { (d) } }
            div.flow-head {
                div.kv { span.k { (t(lang, "Labels")) } span.v { @for (k, v) in &def.labels { span.tag { (k) "=" (v) } " " } } }
                div.kv.wide { span.k { (t(lang, "Triggers")) } span.v { (triggers(lang, &def, &engine.calendars(), now)) } }
                @if let Some(routing) = &def.routing {
                    div.kv.wide { span.k { (t(lang, "Routing")) } span.v { ul {
                        @for rule in &routing.rules { li { code { (rule.when.source()) } " → v" (rule.version) } }
                        li { (t(lang, "default")) " → v" (routing.default) }
                    } } }
                }
            }
            (page::denied_note(ctx.denied(Role::Operator).as_ref()))
            @if ctx.can(Role::Operator) {
                div.flow-actions {
                    (pause_form(&ctx, &record))
                    @if !def.observe { (super::backfills::form(&ctx, &name)) }
                    @if !def.observe {
                        details.run-now {
                            summary.button { (t(lang, "Run now")) }
                            form method="post" action=(format!("/flows/{name}/run")) hx-post=(format!("/flows/{name}/run")) hx-target="#flash" {
                                input type="hidden" name="csrf" value=(ctx.user.csrf);
                                label { (t(lang, "Parameters (JSON object)"))
                                    textarea name="params" rows="3" spellcheck="false" { (serde_json::json!({"date": chrono::Utc::now().format("%Y-%m-%d").to_string()})) } }
                                button.primary type="submit" { (t(lang, "Run now")) }
                            }
                        }
                    }
                }
            }
            (super::bizdates::section(lang, &def, &dates))
            section.dag-section { (dag::section(&console, lang, &def, version, &scope, None, &base)) }
            div.two-col {
                section {
                    h2 { (t(lang, "Recent runs")) }
                    (runs_table(lang, &runs, now))
                }
                section {
                    h2 { (t(lang, "Versions")) }
                    ul.versions {
                        @for v in versions.iter().rev() {
                            li { a href=(format!("{base}?version={}", v.version)) { "v" (v.version) } " · " (stamp(lang, Some(v.created_at), now)) " · " code { (v.content_hash.get(..12).unwrap_or(&v.content_hash)) }
                                @if v.version > 1 { " · " a href=(format!("{base}?diff={}", v.version)) { "diff" } } }
                        }
                    }
                    @if let Some((v, text)) = &diff { h3 { "diff v" (v) } pre.diff { (text) } }
                }
            }
        }
    };
    let shell = Shell::new(&ctx, name.clone(), &console.assets, Nav::Flows).live_flow(&name);
    Ok(page::timed_response(shell.render(body), started, dag::take_layout_ms()))
}

/// A table of runs (used by the flow page, the runs search and the overview).
pub fn runs_table(lang: Lang, runs: &[RunRow], now: i64) -> Markup {
    selectable_runs_table(lang, runs, now, None)
}

/// The runs table; with `select` (a form id), each row has a checkbox `sel`
/// belonging to that form (the runs search's bulk actions).
pub fn selectable_runs_table(lang: Lang, runs: &[RunRow], now: i64, select: Option<&str>) -> Markup {
    html! {
        @if runs.is_empty() { p.muted { (t(lang, "No runs match.")) } }
        @else {
            div.table-wrap { table.runs {
                thead { tr {
                    @if select.is_some() { th.sel { input type="checkbox" data-select-all="sel" aria-label=(t(lang, "Select all")); } }
                    th { (t(lang, "Run")) } th { (t(lang, "Flow")) } th { (t(lang, "State")) } th { (t(lang, "Business date")) } th { (t(lang, "Trigger")) } th.opt { (t(lang, "Actor")) } th { (t(lang, "Created")) } th { (t(lang, "Duration")) } } }
                tbody { @for r in runs { tr data-run=(r.id) {
                    @if let Some(form) = select { td.sel { input type="checkbox" name="sel" value=(r.id) form=(form) data-state=(r.state) aria-label=(t(lang, "Select")); } }
                    td { a href=(run_href(&r.id)) { code { (short(&r.id)) } } }
                    td { a href=(flow_href(&r.flow)) { (r.flow) } " v" (r.version) }
                    td { (badge(lang, r.state.shown().as_str())) }
                    td.biz-date { (r.biz_date.as_deref().unwrap_or("-")) }
                    td { (term_markup(lang, Term::Trigger, &r.trigger)) }
                    td.opt.actor { (r.actor) }
                    td { (stamp(lang, Some(r.created_at), now)) }
                    td { @if let (Some(s), Some(f)) = (r.started_at, r.finished_at) { (crate::time::duration_ms(lang, f - s)) } @else { "-" } }
                } } }
            } }
        }
    }
}
