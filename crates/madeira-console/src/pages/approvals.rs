//! `/approvals`: every node waiting in MANUAL_CONFIRM, grouped by flow and node,
//! with the rendered prompt, how long it waited and its escalation deadlines;
//! confirm or reject each with a reason, or confirm several of the same node
//! across runs at once. The list refreshes when a confirmation starts or ends.

use axum::extract::{Query, State};
use axum::response::Response;
use madeira_core::{NodeAction, NodeState};
use madeira_server::Role;
use maud::{Markup, html};
use serde::Deserialize;

use super::{run::short, run_href};
use crate::i18n::t;
use crate::page::{self, ActionDialog, Nav, Shell};
use crate::session::Ctx;
use crate::time::{span_text, stamp};
use crate::{Console, ConsoleError};

/// Runs with a waiting node shown at most (the longest waiting first).
const SCAN_LIMIT: u32 = 500;

/// One node waiting for a person.
#[derive(Debug, Clone)]
pub struct Pending {
    pub run_id: String,
    pub flow: String,
    pub node: String,
    pub prompt: String,
    pub since: Option<i64>,
    pub alert_at: Option<i64>,
    pub fallback_at: Option<i64>,
    /// The flow's timezone (times shown in it on request).
    pub tz: String,
}

/// Every MANUAL_CONFIRM node of a running run, oldest first; `true` when the scan
/// was capped. One store read finds the runs (whatever the number of flows); each
/// is then loaded once to render its prompts.
pub async fn pending(
    console: &Console,
    user: &crate::session::User,
) -> Result<(Vec<Pending>, bool), ConsoleError> {
    let engine = &console.app.engine;
    let reads = &console.app.reads;
    let mut out = Vec::new();
    let visible = super::visible(console, user).await?;
    let waiting = reads.runs.awaiting_confirmation(SCAN_LIMIT).await?;
    let capped = waiting.len() as u32 >= SCAN_LIMIT;
    for run_id in waiting {
        let Some(stored) = reads.runs.load_run(&run_id).await? else { continue };
        let row = &stored.run;
        if visible.as_ref().is_some_and(|v| !v.contains(&row.flow)) {
            continue;
        }
        let def = engine.flow(&row.flow, Some(row.version)).await?;
        for n in stored.nodes.iter().filter(|n| n.state == NodeState::ManualConfirm) {
            let Some(NodeAction::Manual(manual)) = def.nodes.get(n.idx as usize).map(|d| &d.action) else {
                continue;
            };
            let since = n.started_at;
            let at = |d: Option<std::time::Duration>| Some(since? + i64::try_from(d?.as_millis()).ok()?);
            out.push(Pending {
                run_id: row.id.clone(),
                flow: row.flow.clone(),
                node: n.node.clone(),
                prompt: madeira_server::render_prompt(&manual.prompt, &stored, &def),
                since,
                alert_at: at(manual.alert_after),
                fallback_at: at(manual.fallback_after),
                tz: crate::time::flow_tz(&def).to_string(),
            });
        }
    }
    out.sort_by_key(|p| p.since.unwrap_or(i64::MAX));
    Ok((out, capped))
}

#[derive(Debug, Default, Deserialize)]
pub struct ApprovalsQuery {
    #[serde(default)]
    fragment: Option<String>,
}

pub async fn page(
    State(console): State<Console>,
    ctx: Ctx,
    Query(q): Query<ApprovalsQuery>,
) -> Result<Response, ConsoleError> {
    let (items, capped) = pending(&console, &ctx.user).await?;
    let list = list_markup(&ctx, &items, capped);
    if q.fragment.is_some() {
        return Ok(page::html_response(list));
    }
    let lang = ctx.lang;
    let body = html! {
        div.approvals-page {
            h1 { (t(lang, "Approvals")) " " span.muted #approvals-count { "(" (items.len()) ")" } }
            div #live-status.live-status data-ok=(t(lang, "Live")) data-retry=(t(lang, "Reconnecting…")) data-poll=(t(lang, "Live updates lost: polling every 5 s.")) {}
            (list)
        }
    };
    let shell = Shell::new(&ctx, t(lang, "Approvals"), &console.assets, Nav::Approvals);
    Ok(page::html_response(shell.render(body)))
}

fn list_markup(ctx: &Ctx, items: &[Pending], capped: bool) -> Markup {
    let lang = ctx.lang;
    let now = madeira_engine::now_ms();
    let mut groups: Vec<((String, String), Vec<&Pending>)> = Vec::new();
    for p in items {
        let key = (p.flow.clone(), p.node.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(p),
            None => groups.push((key, vec![p])),
        }
    }
    let denied = ctx.denied(Role::Operator);
    html! {
        div #approvals-list data-count=(items.len()) {
            @if capped { p.flash.warn { (t(lang, "Runs in this view are capped; narrow the filter.")) } }
            @if items.is_empty() { p.empty { (t(lang, "Nothing waits for confirmation.")) } }
            @if !items.is_empty() { (page::denied_note(denied.as_ref())) }
            @for (gi, ((flow, node), list)) in groups.iter().enumerate() {
                section.approval-group {
                    h2 { a href=(super::flow_href(flow)) { (flow) } " · " code { (node) } " " span.muted { "(" (list.len()) ")" } }
                    div.cards {
                        @for p in list { (card(ctx, p, (list.len() > 1).then_some(gi), now)) }
                    }
                    @if list.len() > 1 && denied.is_none() {
                        form.bulk id=(format!("bulk-{gi}")) method="post" action="/approvals/bulk" hx-post="/approvals/bulk" hx-target="#flash" {
                            input type="hidden" name="csrf" value=(ctx.user.csrf);
                            label { (t(lang, "Reason (required)")) textarea name="reason" required rows="2" maxlength="2000" {} }
                            button.primary type="submit" { (t(lang, "Confirm selected")) }
                        }
                    }
                }
            }
        }
    }
}

/// One waiting node; `group` names its bulk form when there is one.
fn card(ctx: &Ctx, p: &Pending, group: Option<usize>, now: i64) -> Markup {
    let lang = ctx.lang;
    let denied = ctx.denied(Role::Operator);
    let dialog = |name: &str, label: &'static str, danger: bool| ActionDialog {
        id: format!("dlg-{name}-{}-{}", p.run_id, p.node),
        label: t(lang, label),
        action: format!("/runs/{}/nodes/{}/{name}", p.run_id, p.node),
        hidden: vec![],
        preview: Some(p.prompt.clone()),
        danger,
        denied: denied.clone(),
        extra: None,
    };
    html! {
        article.approval data-run=(p.run_id) data-node=(p.node) data-tz=(p.tz) {
            @if let (None, Some(group)) = (&denied, group) {
                label.select { input type="checkbox" name="sel" value=(format!("{}:{}", p.run_id, p.node)) form=(format!("bulk-{group}")) aria-label="select"; }
            }
            div.approval-main {
                p.prompt { (p.prompt) }
                p.meta {
                    a href=(run_href(&p.run_id)) { (t(lang, "Run")) " " code { (short(&p.run_id)) } }
                    " · " (t(lang, "Waiting for")) " " @if let Some(s) = p.since { (span_text(lang, ((now - s).max(0) / 1000) as u64)) } @else { "-" }
                    @if let Some(a) = p.alert_at { " · " (t(lang, "Escalates")) " " (stamp(lang, Some(a), now)) }
                    @if let Some(f) = p.fallback_at { " · " (t(lang, "Falls back")) " " (stamp(lang, Some(f), now)) }
                }
            }
            div.approval-actions { (dialog("confirm", "Confirm", false).render(ctx)) (dialog("reject", "Reject", true).render(ctx)) }
        }
    }
}
