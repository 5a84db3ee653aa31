//! JSON shapes of SPEC §9 built from store rows and flow definitions.

use madeira_core::{FlowDef, TriggerDef};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use madeira_store::{FlowRecord, RunRow, StoredRun};
use serde::Serialize;
use serde_json::{Map, Value as Json, json};

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

/// `GET /runs/{id}`: the run with every node's state, attempts, outputs, reasons.
/// Typed and borrowed from the stored run, so a run of thousands of nodes is
/// serialised without building a JSON tree first.
#[derive(Serialize)]
pub struct RunDetail<'a> {
    run_id: &'a str,
    flow: &'a str,
    version: u32,
    status: &'static str,
    params: &'a Json,
    trigger: &'a str,
    actor: &'a str,
    idempotency_key: Option<&'a str>,
    biz_date: Option<&'a str>,
    waiting_reason: Option<&'a str>,
    created_at: Time,
    started_at: Time,
    finished_at: Time,
    order: Vec<&'a str>,
    /// Node id → its view (ordered by id).
    pub nodes: BTreeMap<&'a str, NodeDetail<'a>>,
    pub warnings: Vec<String>,
}

/// One node of `RunDetail`; the route adds `throttle` and `waiting`.
#[derive(Serialize)]
pub struct NodeDetail<'a> {
    pub status: &'static str,
    pub reason: Option<Cow<'a, str>>,
    attempts: u32,
    attempt_history: Vec<AttemptView<'a>>,
    outputs: &'a Map<String, Json>,
    data_version: u32,
    stale: bool,
    started_at: Time,
    finished_at: Time,
    needs: Vec<NeedView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<bool>,
}

#[derive(Serialize)]
struct AttemptView<'a> {
    attempt: u32,
    started_at: Time,
    finished_at: Time,
    outcome: Option<&'a str>,
    error: Option<&'a str>,
    host: Option<&'a str>,
    /// A sub-flow node's attempt: the child run it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    child_run: Option<String>,
}

impl NodeDetail<'_> {
    /// Sets each attempt's `child_run` from `children` (attempt → child run id).
    pub fn set_child_runs(&mut self, children: &HashMap<u32, String>) {
        for a in &mut self.attempt_history {
            a.child_run = children.get(&a.attempt).cloned();
        }
    }
}

#[derive(Serialize)]
struct NeedView<'a> {
    node: &'a str,
    kind: &'static str,
}

/// A stored time, serialised as `time` writes it (RFC 3339 or null).
struct Time(Option<i64>);

impl Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.and_then(chrono::DateTime::from_timestamp_millis) {
            Some(t) => s.serialize_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            None => s.serialize_none(),
        }
    }
}

pub fn run_detail<'a>(stored: &'a StoredRun, flow: &'a FlowDef) -> RunDetail<'a> {
    let run = &stored.run;
    // Each node's attempts, gathered in one pass (a run may have thousands of nodes).
    let mut attempts_of: HashMap<&str, Vec<AttemptView<'a>>> = HashMap::new();
    for a in &stored.attempts {
        attempts_of.entry(a.node.as_str()).or_default().push(AttemptView {
            attempt: a.attempt,
            started_at: Time(Some(a.started_at)),
            finished_at: Time(a.finished_at),
            outcome: a.outcome.as_deref(),
            error: a.error.as_deref(),
            host: a.host.as_deref(),
            child_run: None,
        });
    }
    let mut nodes = BTreeMap::new();
    for row in &stored.nodes {
        let def = flow.nodes.get(row.idx as usize);
        let needs = def
            .map(|d| {
                let kind = |k| match k {
                    madeira_core::DepKind::Strong => "strong",
                    madeira_core::DepKind::Weak => "weak",
                };
                d.needs
                    .iter()
                    .map(|n| NeedView { node: flow.nodes[n.upstream].id.as_str(), kind: kind(n.kind) })
                    .collect()
            })
            .unwrap_or_default();
        let prompt = match def.map(|d| &d.action) {
            Some(madeira_core::NodeAction::Manual(manual)) => {
                Some(render_prompt(&manual.prompt, stored, flow))
            }
            _ => None,
        };
        let entry = NodeDetail {
            status: row.state.as_str(),
            reason: row.reason.as_deref().map(Cow::Borrowed),
            attempts: row.attempt,
            attempt_history: attempts_of.remove(row.node.as_str()).unwrap_or_default(),
            outputs: &row.outputs,
            data_version: row.data_version,
            stale: row.stale,
            started_at: Time(row.started_at),
            finished_at: Time(row.finished_at),
            needs,
            prompt,
            throttle: None,
            waiting: None,
        };
        nodes.insert(row.node.as_str(), entry);
    }
    RunDetail {
        run_id: &run.id,
        flow: &run.flow,
        version: run.version,
        status: run.state.shown().as_str(),
        params: &run.params,
        trigger: &run.trigger,
        actor: &run.actor,
        idempotency_key: run.idempotency_key.as_deref(),
        biz_date: run.biz_date.as_deref(),
        waiting_reason: run.wait_reason.as_deref(),
        created_at: Time(Some(run.created_at)),
        started_at: Time(run.started_at),
        finished_at: Time(run.finished_at),
        order: flow.topo.iter().map(|i| flow.nodes[*i].id.as_str()).collect(),
        nodes,
        warnings: Vec::new(),
    }
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

#[cfg(test)]
mod tests {
    use madeira_core::{NodeState, RunState};
    use madeira_store::{AttemptRecord, NodeRow, RunRow, StoredRun};
    use serde_json::json;

    use super::run_detail;

    fn node(idx: u32, name: &str, state: NodeState, attempt: u32) -> NodeRow {
        NodeRow {
            run_id: "r1".into(),
            idx,
            node: name.into(),
            state,
            reason: None,
            attempt,
            series_start: 0,
            data_version: attempt,
            outputs: serde_json::Map::new(),
            reads: Vec::new(),
            stale: false,
            fallback: false,
            next_attempt_at: None,
            started_at: Some(1_000),
            finished_at: None,
        }
    }

    fn attempt(node: &str, attempt: u32, outcome: Option<&str>) -> AttemptRecord {
        AttemptRecord {
            run_id: "r1".into(),
            node: node.into(),
            attempt,
            started_at: 1_000 * i64::from(attempt),
            finished_at: outcome.map(|_| 1_500),
            outcome: outcome.map(Into::into),
            error: None,
            host: Some("dev".into()),
        }
    }

    #[test]
    fn each_node_lists_its_own_attempts_in_order_and_times_read_as_rfc3339() {
        let flow = madeira_core::spec::parse_flow(
            "f.yaml",
            "flow: f\nnodes:\n  a: {run: {builtin: noop}}\n  b: {needs: [a], run: {builtin: noop}}\n",
        )
        .expect("flow");
        let stored = StoredRun {
            run: RunRow {
                id: "r1".into(),
                flow: "f".into(),
                version: 1,
                state: RunState::Running,
                params: json!({"day": "2026-12-05"}),
                idempotency_key: None,
                trigger: "api".into(),
                actor: "ops".into(),
                created_at: 0,
                admitted_at: Some(0),
                started_at: Some(0),
                finished_at: None,
                trace_context: None,
                biz_date: Some("2026-12-04".into()),
                wait_reason: None,
            },
            nodes: vec![node(0, "a", NodeState::Success, 2), node(1, "b", NodeState::Running, 1)],
            // Interleaved, as no query promises an order to the view.
            attempts: vec![
                attempt("a", 1, Some("RETRYABLE")),
                attempt("b", 1, None),
                attempt("a", 2, Some("SUCCESS")),
            ],
        };
        let view = serde_json::to_value(run_detail(&stored, &flow)).expect("serialises");
        let history = |n: &str| -> Vec<serde_json::Value> {
            view["nodes"][n]["attempt_history"].as_array().expect("history").clone()
        };
        assert_eq!(
            history("a").iter().map(|a| a["attempt"].clone()).collect::<Vec<_>>(),
            [json!(1), json!(2)]
        );
        assert_eq!(history("a")[1]["outcome"], "SUCCESS");
        assert_eq!(history("b").len(), 1, "{view}");
        assert_eq!(history("b")[0]["finished_at"], json!(null));
        assert_eq!(history("b")[0]["started_at"], "1970-01-01T00:00:01.000Z");
        assert_eq!(view["nodes"]["b"]["needs"], json!([{"node": "a", "kind": "strong"}]));
        assert_eq!(view["order"], json!(["a", "b"]));
        assert_eq!(view["status"], "RUNNING");
        assert_eq!(view["finished_at"], json!(null));
        assert_eq!(view["params"]["day"], "2026-12-05");
        // Only the route adds these, and only where they apply.
        for key in ["prompt", "throttle", "waiting"] {
            assert!(view["nodes"]["a"].get(key).is_none(), "{key} in {view}");
        }
    }
}
