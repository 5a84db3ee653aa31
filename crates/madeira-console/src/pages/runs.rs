//! `/runs`: search by flow, states (several), time range, trigger and actor, newest
//! first, paginated on the server by run id (ids are UUIDv7, so time-ordered: a
//! time bound is an id bound and each page is an index range scan).

use axum::extract::{Query, State};
use axum::response::Response;
use madeira_store::{RunQuery, RunRow};
use maud::html;

use super::flows::selectable_runs_table;
use crate::i18n::t;
use crate::page::{self, Nav, Shell, url_encode};
use crate::session::Ctx;
use crate::terms::state_label;
use crate::{Console, ConsoleError};
use madeira_core::timebound::{id_bound, parse_time};
use madeira_server::Role;

const PAGE: usize = 50;
const STATES: [&str; 5] = ["QUEUED", "RUNNING", "SUCCESS", "FAILED", "CANCELLED"];

/// A search: filters as given in the query string.
#[derive(Debug, Default, Clone)]
pub struct Search {
    pub flow: Option<String>,
    pub states: Vec<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub trigger: Option<String>,
    /// Who started the run (`runs.actor`), matched whole in the store.
    pub actor: Option<String>,
    /// Only runs of this business date (`YYYY-MM-DD`).
    pub biz_date: Option<String>,
    pub cursor: Option<String>,
}

impl Search {
    fn from_pairs(pairs: &[(String, String)]) -> Result<Self, ConsoleError> {
        let mut s = Search::default();
        for (k, v) in pairs.iter().filter(|(_, v)| !v.trim().is_empty()) {
            match k.as_str() {
                "flow" => s.flow = Some(v.trim().to_string()),
                "state" => {
                    let up = v.trim().to_ascii_uppercase();
                    if !STATES.contains(&up.as_str()) {
                        return Err(ConsoleError::BadRequest(format!(
                            "state `{v}`: use {}",
                            STATES.join(", ")
                        )));
                    }
                    s.states.push(up);
                }
                "since" => {
                    s.since = Some(parse_time(v).ok_or_else(|| {
                        ConsoleError::BadRequest(format!("since `{v}`: use 2026-12-01T09:30 (UTC)"))
                    })?)
                }
                "until" => {
                    s.until = Some(parse_time(v).ok_or_else(|| {
                        ConsoleError::BadRequest(format!("until `{v}`: use 2026-12-01T09:30 (UTC)"))
                    })?)
                }
                "trigger" => s.trigger = Some(v.trim().to_string()),
                "actor" => s.actor = Some(v.trim().to_string()),
                "biz_date" => {
                    let d = madeira_core::bizdate::parse_date(v.trim()).map_err(ConsoleError::BadRequest)?;
                    s.biz_date = Some(madeira_core::bizdate::format_date(d));
                }
                "cursor" => s.cursor = Some(v.trim().to_string()),
                _ => {}
            }
        }
        Ok(s)
    }

    /// The query string of this search without its cursor.
    fn query_string(&self) -> String {
        let mut parts = Vec::new();
        if let Some(f) = &self.flow {
            parts.push(format!("flow={}", url_encode(f)));
        }
        for st in &self.states {
            parts.push(format!("state={st}"));
        }
        if let Some(ms) = self.since {
            parts.push(format!("since={}", url_encode(&crate::time::rfc3339(ms))));
        }
        if let Some(ms) = self.until {
            parts.push(format!("until={}", url_encode(&crate::time::rfc3339(ms))));
        }
        if let Some(tr) = &self.trigger {
            parts.push(format!("trigger={}", url_encode(tr)));
        }
        if let Some(a) = &self.actor {
            parts.push(format!("actor={}", url_encode(a)));
        }
        if let Some(d) = &self.biz_date {
            parts.push(format!("biz_date={d}"));
        }
        parts.join("&")
    }
}

/// Most (flow, state) pairs one search is split into.
const MAX_PARTS: usize = 100;

/// The (flow, state) queries that answer `search` together, each one an index
/// range already in id order (the store's `runs(flow, state, id)` index): a
/// flow without states asks each state, states without a flow ask each flow.
/// Newest first over all of them is then a merge of short lists.
async fn plan(
    console: &Console,
    search: &Search,
) -> Result<Vec<(Option<String>, Option<String>)>, ConsoleError> {
    let states: Vec<Option<String>> = match (&search.flow, search.states.is_empty()) {
        (Some(_), true) => STATES.iter().map(|s| Some(s.to_string())).collect(),
        (_, true) => vec![None],
        _ => search.states.iter().cloned().map(Some).collect(),
    };
    let flows: Vec<Option<String>> = match &search.flow {
        Some(f) => vec![Some(f.clone())],
        None if !search.states.is_empty() => {
            let names: Vec<Option<String>> =
                console.app.reads.flows.list_flows().await?.into_iter().map(|f| Some(f.name)).collect();
            if names.len() * states.len() <= MAX_PARTS { names } else { vec![None] }
        }
        None => vec![None],
    };
    Ok(flows.iter().flat_map(|f| states.iter().map(move |s| (f.clone(), s.clone()))).collect())
}

/// One page of runs for `search` and the cursor of the next page.
pub async fn find(
    console: &Console,
    search: &Search,
    limit: usize,
) -> Result<(Vec<RunRow>, Option<String>), ConsoleError> {
    let reads = &console.app.reads;
    let until = search.until.map(id_bound);
    let before = match (&search.cursor, until) {
        (Some(c), Some(u)) => Some(if *c < u { c.clone() } else { u }),
        (c, u) => c.clone().or(u),
    };
    let mut merged: Vec<RunRow> = Vec::new();
    for (flow, state) in plan(console, search).await? {
        let query = RunQuery {
            flow,
            state,
            actor: search.actor.clone(),
            biz_date: search.biz_date.clone(),
            before: before.clone(),
            limit: (limit + 1) as u32,
        };
        merged.extend(reads.runs.list_runs(&query).await?);
    }
    merged.sort_by(|a, b| b.id.cmp(&a.id));
    merged.dedup_by(|a, b| a.id == b.id);
    let since_bound = search.since.map(id_bound);
    if let Some(bound) = &since_bound {
        merged.retain(|r| r.id >= *bound);
    }
    let next = (merged.len() > limit).then(|| merged[limit - 1].id.clone());
    merged.truncate(limit);
    if let Some(tr) = &search.trigger {
        merged.retain(|r| r.trigger == *tr);
    }
    Ok((merged, next))
}

pub async fn search(
    State(console): State<Console>,
    ctx: Ctx,
    Query(pairs): Query<Vec<(String, String)>>,
) -> Result<Response, ConsoleError> {
    let lang = ctx.lang;
    let now = madeira_engine::now_ms();
    let search = Search::from_pairs(&pairs)?;
    let started = std::time::Instant::now();
    let (mut runs, next) = find(&console, &search, PAGE).await?;
    let mut flows = console.app.reads.flows.list_flows().await?;
    if let Some(visible) = super::visible(&console, &ctx.user).await? {
        runs.retain(|r| visible.contains(&r.flow));
        // The filter names only flows the viewer sees, as `GET /api/v1/flows` does.
        flows.retain(|f| visible.contains(&f.name));
    }
    let took = started.elapsed();
    let fmt_local = |ms: Option<i64>| {
        ms.and_then(chrono::DateTime::from_timestamp_millis)
            .map(|t| t.format("%Y-%m-%dT%H:%M").to_string())
            .unwrap_or_default()
    };
    let qs = search.query_string();
    let body = html! {
        h1 { (t(lang, "Runs")) }
        form.search method="get" action="/runs" {
            label { (t(lang, "Flow"))
                select name="flow" { option value="" { "—" }
                    @for f in &flows { option value=(f.name) selected[search.flow.as_deref() == Some(f.name.as_str())] { (f.name) } } } }
            fieldset.states { legend { (t(lang, "States")) }
                @for st in STATES { label.check { input type="checkbox" name="state" value=(st) checked[search.states.iter().any(|s| s == st)]; " " span title=(st) { (state_label(lang, st)) } } } }
            label { (t(lang, "From")) " (UTC)" input type="datetime-local" name="since" value=(fmt_local(search.since)); }
            label { (t(lang, "Until")) " (UTC)" input type="datetime-local" name="until" value=(fmt_local(search.until)); }
            label { (t(lang, "Trigger")) input type="text" name="trigger" value=(search.trigger.clone().unwrap_or_default()) placeholder="manual, cron, event"; }
            label { (t(lang, "Business date")) input type="date" name="biz_date" value=(search.biz_date.clone().unwrap_or_default()); }
            label { (t(lang, "Actor")) input type="text" name="actor" value=(search.actor.clone().unwrap_or_default()) placeholder=(t(lang, "token name, scheduler, message:…")); }
            button.primary type="submit" { (t(lang, "Search")) }
        }
        p.muted.small { (runs.len()) " · " (took.as_millis()) " ms" }
        @let bulk = ctx.denied(Role::Operator).is_none() && !runs.is_empty();
        (selectable_runs_table(lang, &runs, now, bulk.then_some("bulk-runs")))
        @if bulk { (bulk_form(&ctx, &format!("/runs?{qs}"))) }
        nav.pager {
            @if search.cursor.is_some() { a href=(format!("/runs?{qs}")) { "« " (t(lang, "Newest")) } }
            @if let Some(n) = &next { a href=(format!("/runs?{qs}&cursor={}", url_encode(n))) { (t(lang, "Older")) " »" } }
        }
    };
    Ok(page::timed_response(
        Shell::new(&ctx, t(lang, "Runs"), &console.assets, Nav::Runs).render(body),
        started,
        None,
    ))
}

/// The bulk actions over the selected rows: a reason, then cancel or rerun-failed
/// (`actions::bulk_runs`). The count of selected runs is kept by the page script.
fn bulk_form(ctx: &Ctx, back: &str) -> maud::Markup {
    let lang = ctx.lang;
    html! {
        form #bulk-runs.bulk method="post" action="/runs/bulk" hx-post="/runs/bulk" hx-target="#flash" {
            input type="hidden" name="csrf" value=(ctx.user.csrf);
            input type="hidden" name="back" value=(back);
            p.preview { span.sel-count data-for="sel" { "0" } " " (t(lang, "runs selected")) }
            label { (t(lang, "Reason (required)")) textarea name="reason" required rows="2" maxlength="2000" {} }
            div.buttons {
                button.danger type="submit" name="action" value="cancel" { (t(lang, "Cancel selected")) }
                button.primary type="submit" name="action" value="rerun-failed" { (t(lang, "Rerun failed nodes of selected")) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_states_are_refused_and_filters_round_trip() {
        let pairs =
            |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        assert!(Search::from_pairs(&pairs(&[("state", "DONE")])).is_err());
        let s = Search::from_pairs(&pairs(&[
            ("flow", "f"),
            ("state", "failed"),
            ("state", "RUNNING"),
            ("trigger", ""),
            ("actor", "ops bot"),
            ("biz_date", "2026-10-08"),
        ]))
        .expect("valid");
        assert_eq!(s.states, vec!["FAILED", "RUNNING"]);
        assert_eq!(s.query_string(), "flow=f&state=FAILED&state=RUNNING&actor=ops%20bot&biz_date=2026-10-08");
        assert!(Search::from_pairs(&pairs(&[("biz_date", "2026-13-01")])).is_err());
    }
}
