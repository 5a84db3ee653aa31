//! JSON shapes of SPEC §9 built from store rows and flow definitions (a run's
//! detail has its own typed view: `detail`).

use madeira_core::{FlowDef, TriggerDef};

use madeira_store::{FlowRecord, RunRow, StoredRun};
use serde_json::{Value as Json, json};

/// RFC 3339 (UTC, milliseconds) for a stored time.
pub fn time(ms: Option<i64>) -> Json {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| Json::from(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)))
        .unwrap_or(Json::Null)
}

pub fn run_summary(run: &RunRow) -> Json {
    json!({
        "run_id": run.id,
        "flow": run.flow,
        "version": run.version,
        "status": run.state.shown().as_str(),
        "trigger": run.trigger,
        "actor": run.actor,
        "biz_date": run.biz_date,
        "waiting_reason": run.wait_reason,
        "created_at": time(Some(run.created_at)),
        "finished_at": time(run.finished_at),
    })
}

/// Replaces `{{ nodes.X.outputs.K }}` and `{{ params.K }}` in a manual prompt
/// (`madeira_core::prompt::render` over the stored run).
pub fn render_prompt(prompt: &str, stored: &StoredRun, _flow: &FlowDef) -> String {
    madeira_core::prompt::render(prompt, |path| lookup(path, stored))
}

fn lookup(path: &str, stored: &StoredRun) -> Option<String> {
    let parts: Vec<&str> = path.split('.').collect();
    let value = match parts.as_slice() {
        ["params", key @ ..] => key.iter().try_fold(&stored.run.params, |v, k| v.get(k))?,
        ["nodes", node, "outputs", key @ ..] => {
            let row = stored.nodes.iter().find(|n| n.node == *node)?;
            let first = row.outputs.get(*key.first()?)?;
            key[1..].iter().try_fold(first, |v, k| v.get(k))?
        }
        ["nodes", node, "status"] => {
            return stored.nodes.iter().find(|n| n.node == *node).map(|n| n.state.to_string());
        }
        _ => return None,
    };
    Some(madeira_core::prompt::shown(value))
}

/// `GET /flows/{name}`.
pub fn flow_detail(record: &FlowRecord, flow: &FlowDef, calendars: &madeira_calendar::Calendars) -> Json {
    let triggers: Vec<Json> = flow
        .triggers
        .iter()
        .map(|t| match t {
            TriggerDef::Cron(c) => json!({
                "cron": c.expr,
                "timezone": c.timezone,
                "next_run": time(
                    madeira_core::schedule::next_fire(c, calendars, chrono::Utc::now()).map(|t| t.timestamp_millis())
                ),
                "calendar": c.calendar.as_ref().map(|k| k.name.clone()),
                "calendar_mode": c.calendar.as_ref().map(|k| k.mode.as_str()),
            }),
            TriggerDef::Event { event, on_paused, max_queued } => {
                json!({"event": event, "on_paused": on_paused.as_str(), "max_queued": max_queued})
            }
            TriggerDef::Message(m) => json!({"message": {
                "source": m.source,
                "queue": m.queue, "exchange": m.exchange, "binding_key": m.binding_key,
                "stream": m.stream, "consumer": m.consumer, "subject": m.subject, "group": m.group,
                "key": m.key.as_ref().map(|k| k.source()),
                "when": m.when.as_ref().map(|w| w.source()),
            }}),
            TriggerDef::FlowSucceeded { flow, .. } => json!({"flow_succeeded": flow}),
        })
        .collect();
    json!({
        "flow": record.name,
        "version": record.latest_version,
        "description": flow.description,
        "labels": flow.labels,
        "paused": record.paused,
        "observe": flow.observe,
        "triggers": triggers,
        "nodes": flow.topo.iter().map(|i| flow.nodes[*i].id.clone()).collect::<Vec<_>>(),
        "updated_at": time(Some(record.updated_at)),
    })
}
