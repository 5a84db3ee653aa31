//! The flow page's business-dates section (issue #35): the calendars the flow
//! uses, the next business-day ticks of its cron triggers on their calendars
//! (skipped days passed over), and the deadline state of the latest business
//! date's run (on time / at risk / missed / met, `madeira_core::deadline_risk`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use madeira_calendar::Calendars;
use madeira_core::bizdate::{format_date, next_deadline, parse_date};
use madeira_core::deadline_risk::{self, DeadlineState, NodeProgress};
use madeira_core::schedule::Planned;
use madeira_core::{FlowDef, NodeState, TriggerDef};
use madeira_server::AppState;
use madeira_store::{RunQuery, RunRow};
use maud::{Markup, html};

use super::{run::short, run_href};
use crate::i18n::{Lang, t};

/// How many next ticks are shown.
const NEXT: usize = 5;

/// What the section shows, gathered from the engine and the store.
pub struct BizDates {
    pub calendars: Vec<String>,
    /// Next fire instants of the cron triggers on their calendars, soonest first.
    pub next_ticks: Vec<DateTime<Utc>>,
    pub deadline: Option<DeadlineView>,
}

/// The latest business date's run against its deadline.
pub struct DeadlineView {
    pub biz_date: String,
    pub at: DateTime<Utc>,
    pub state: DeadlineState,
    pub run_id: Option<String>,
}

/// The calendars `def` names: its cron triggers', its `biz_date:`'s and its deadline's.
pub fn calendars_of(def: &FlowDef) -> Vec<String> {
    let mut names: Vec<String> = def
        .triggers
        .iter()
        .filter_map(|t| match t {
            TriggerDef::Cron(c) => c.calendar.as_ref().map(|c| c.name.clone()),
            _ => None,
        })
        .chain(def.business.rule.calendar.clone())
        .chain(def.business.deadline.as_ref().and_then(|d| d.calendar.clone()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The next `NEXT` fires of `def`'s cron triggers after `now`, on their calendars.
pub fn next_ticks(def: &FlowDef, calendars: &Calendars, now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut fires: Vec<DateTime<Utc>> = def
        .triggers
        .iter()
        .filter_map(|t| match t {
            TriggerDef::Cron(c) => Some(c),
            _ => None,
        })
        .flat_map(|c| madeira_core::schedule::plan_many(c, calendars, now, NEXT))
        .filter_map(|p| match p {
            Planned::Fire { at, .. } => Some(at),
            _ => None,
        })
        .collect();
    fires.sort();
    fires.dedup();
    fires.truncate(NEXT);
    fires
}

/// Gathers the section for `def`, whose latest runs are `runs` (newest first).
pub async fn gather(app: &AppState, def: &FlowDef, runs: &[RunRow], now_ms: i64) -> BizDates {
    let calendars = app.engine.calendars();
    let now = DateTime::from_timestamp_millis(now_ms).unwrap_or_default();
    let deadline = match &def.business.deadline {
        Some(_) => deadline_view(app, def, runs, now, &calendars).await,
        None => None,
    };
    BizDates { calendars: calendars_of(def), next_ticks: next_ticks(def, &calendars, now), deadline }
}

/// The latest business date among `runs` (else the date of the next deadline)
/// and where its run stands against its deadline.
async fn deadline_view(
    app: &AppState,
    def: &FlowDef,
    runs: &[RunRow],
    now: DateTime<Utc>,
    calendars: &Calendars,
) -> Option<DeadlineView> {
    let deadline = def.business.deadline.as_ref()?;
    let cal = deadline.calendar.as_deref().and_then(|n| calendars.get(n));
    let latest = runs.iter().filter_map(|r| r.biz_date.as_deref()).max().and_then(|d| parse_date(d).ok());
    let date = match latest {
        Some(d) => d,
        None => next_deadline(deadline, now, cal)?.0,
    };
    let at = madeira_core::bizdate::deadline_at(deadline, date, cal)?;
    let biz_date = format_date(date);
    let reads = &app.reads;
    let query = RunQuery {
        flow: Some(def.name.clone()),
        biz_date: Some(biz_date.clone()),
        limit: 20,
        ..Default::default()
    };
    let of_date = reads.runs.list_runs(&query).await.ok().unwrap_or_default();
    let succeeded =
        of_date.iter().filter(|r| r.state.as_str() == "SUCCESS").filter_map(|r| r.finished_at).min();
    let newest = of_date.first();
    let remaining = match succeeded {
        Some(_) => Duration::ZERO,
        None => {
            let samples = reads.runs.node_durations(&def.name, 200).await.ok().unwrap_or_default();
            let samples: Vec<(String, Duration)> = samples
                .into_iter()
                .map(|(n, ms)| (n, Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
                .collect();
            let usual = deadline_risk::usual_durations(&samples);
            let stored = match newest {
                Some(r) => reads.runs.load_run(&r.id).await.ok().flatten(),
                None => None,
            };
            let progress: Option<Vec<NodeProgress>> = stored.map(|s| {
                def.nodes
                    .iter()
                    .map(|n| {
                        let row = s.nodes.iter().find(|row| row.node == n.id);
                        let state = row.map_or(NodeState::Init, |row| row.state);
                        let started = row.and_then(|row| row.started_at).unwrap_or(now.timestamp_millis());
                        let ran = u64::try_from(now.timestamp_millis().saturating_sub(started)).unwrap_or(0);
                        NodeProgress { state, running_for: Duration::from_millis(ran) }
                    })
                    .collect()
            });
            deadline_risk::remaining(def, progress.as_deref(), &usual)
        }
    };
    let warn_before = deadline.warn_before.unwrap_or_default();
    let state = deadline_risk::deadline_state(
        now.timestamp_millis(),
        at.timestamp_millis(),
        succeeded,
        remaining,
        warn_before,
    );
    Some(DeadlineView { biz_date, at, state, run_id: newest.map(|r| r.id.clone()) })
}

/// The state's words, in `lang`.
pub fn state_text(lang: Lang, state: DeadlineState) -> &'static str {
    match state {
        DeadlineState::OnTime => t(lang, "on time"),
        DeadlineState::AtRisk => t(lang, "at risk"),
        DeadlineState::Missed => t(lang, "missed"),
        DeadlineState::Met => t(lang, "met"),
    }
}

/// The section, times shown in `tz` (the flow's timezone).
pub fn section(lang: Lang, def: &FlowDef, view: &BizDates) -> Markup {
    let tz = def.business.timezone;
    let local = |at: &DateTime<Utc>| at.with_timezone(&tz).format("%Y-%m-%d %a %H:%M %Z").to_string();
    html! {
        section.bizdates #bizdates {
            h2 { (t(lang, "Business dates")) }
            div.kv { span.k { (t(lang, "Calendar")) } span #flow-calendars.v {
                @if view.calendars.is_empty() { span.muted { (t(lang, "none (every day)")) } }
                @for c in &view.calendars { span.tag { (c) } " " }
            } }
            div.kv.wide { span.k { (t(lang, "Next business-day ticks")) } span.v {
                @if view.next_ticks.is_empty() { span.muted { "-" } }
                @else { ol #next-ticks { @for at in &view.next_ticks { li { time datetime=(at.to_rfc3339()) { (local(at)) } } } } }
            } }
            @if let Some(d) = &view.deadline {
                div.kv.wide { span.k { (t(lang, "Deadline")) } span #deadline-state.v data-state=(d.state.as_str()) {
                    span class=(format!("tag deadline-{}", d.state.as_str().replace(' ', "-"))) { (state_text(lang, d.state)) }
                    " " (t(lang, "Business date")) " " code { (d.biz_date) } " · " (t(lang, "due")) " " (local(&d.at))
                    @if let Some(id) = &d.run_id { " · " a href=(run_href(id)) { code { (short(id)) } } }
                } }
            }
        }
    }
}
