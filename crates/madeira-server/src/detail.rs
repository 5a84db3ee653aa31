//! The run-detail view: the one type `GET /runs/{id}` serialises, the console's
//! run page renders from, and the OpenAPI document describes (its schema is
//! derived from these types). Built in two steps: `run_detail` from the stored
//! run and its flow version (pure), `RunDetail::gather` adding what needs the
//! store or the engine (routing warnings, throttle queues, child runs, nodes
//! waiting for an executor).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use madeira_core::FlowDef;
use madeira_store::{AuditQuery, RunQuery, StoredRun};
use serde::Serialize;
use serde_json::{Map, Value as Json};
use utoipa::ToSchema;

use crate::views::render_prompt;
use crate::{ApiError, AppState};

/// `GET /runs/{id}`: the run with every node's state, attempts, outputs, reasons.
/// Typed and borrowed from the stored run, so a run of thousands of nodes is
/// serialised without building a JSON tree first.
#[derive(Serialize, ToSchema)]
pub struct RunDetail<'a> {
    pub run_id: &'a str,
    pub flow: &'a str,
    pub version: u32,
    pub status: &'static str,
    /// The run's parameters, as given.
    #[schema(value_type = serde_json::Value)]
    pub params: &'a Json,
    pub trigger: &'a str,
    /// Who started the run (as in `RunSummary`).
    pub actor: &'a str,
    pub idempotency_key: Option<&'a str>,
    /// The business date, `YYYY-MM-DD` (as in `RunSummary`).
    pub biz_date: Option<&'a str>,
    /// Why a QUEUED run is not started yet (as in `RunSummary`).
    pub waiting_reason: Option<&'a str>,
    #[schema(value_type = String)]
    pub created_at: Time,
    #[schema(value_type = Option<String>)]
    pub started_at: Time,
    #[schema(value_type = Option<String>)]
    pub finished_at: Time,
    /// Node ids in topological order.
    pub order: Vec<&'a str>,
    /// Node id → its view (ordered by id).
    pub nodes: BTreeMap<&'a str, NodeDetail<'a>>,
    /// What happened instead of a failure, e.g. a routing rule that could not be
    /// evaluated and sent the run to the default version.
    pub warnings: Vec<String>,
}

/// One node of `RunDetail`.
#[derive(Serialize, ToSchema)]
pub struct NodeDetail<'a> {
    pub status: &'static str,
    /// Why the node is in its state; for a node no executor has yet, why it waits.
    #[schema(value_type = Option<String>)]
    pub reason: Option<Cow<'a, str>>,
    pub attempts: u32,
    pub attempt_history: Vec<AttemptView<'a>>,
    #[schema(value_type = Object)]
    pub outputs: &'a Map<String, Json>,
    pub data_version: u32,
    pub stale: bool,
    #[schema(value_type = Option<String>)]
    pub started_at: Time,
    #[schema(value_type = Option<String>)]
    pub finished_at: Time,
    pub needs: Vec<NeedView<'a>>,
    /// A manual node's prompt, rendered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// A throttled node's permits and queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ThrottleView>,
    /// True while the node waits: no executor has it, or its own `after` is not
    /// met (`reason` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<bool>,
    /// Node-level `after`: each upstream with whether it is met and where it stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<NodeAfterView>>,
}

/// One entry of a node's `after`, resolved for the run's business date.
#[derive(Serialize, ToSchema)]
pub struct NodeAfterView {
    pub flow: String,
    pub node: Option<String>,
    /// The upstream's business date.
    pub date: String,
    pub met: bool,
    pub upstream_run: Option<String>,
    pub upstream_state: Option<String>,
}

/// One attempt of a node.
#[derive(Serialize, ToSchema)]
pub struct AttemptView<'a> {
    pub attempt: u32,
    #[schema(value_type = String)]
    pub started_at: Time,
    #[schema(value_type = Option<String>)]
    pub finished_at: Time,
    pub outcome: Option<&'a str>,
    pub error: Option<&'a str>,
    /// The replica id for an in-process attempt, the sidecar name(s) for a
    /// sidecar one.
    pub host: Option<&'a str>,
    /// A sub-flow node's attempt: the child run it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub child_run: Option<String>,
}

/// An upstream node and how strongly this one depends on it.
#[derive(Serialize, ToSchema)]
pub struct NeedView<'a> {
    pub node: &'a str,
    /// `strong` or `weak`.
    pub kind: &'static str,
}

/// A throttled node's permits (`throttle:` of its definition) and who waits for
/// one now. Fields in name order, as the API has always written them.
#[derive(Serialize, ToSchema)]
pub struct ThrottleView {
    pub max_permits: u32,
    pub permits_in_use: u32,
    pub queue_depth: usize,
    /// This run's place in the queue (1 is next), when it waits.
    pub queue_position: Option<usize>,
    pub queue_size: u32,
}

/// A stored time (Unix milliseconds), serialised as RFC 3339 (UTC,
/// milliseconds) or null.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Time(pub Option<i64>);

impl Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.and_then(chrono::DateTime::from_timestamp_millis) {
            Some(t) => s.serialize_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            None => s.serialize_none(),
        }
    }
}

impl NodeDetail<'_> {
    /// Sets each attempt's `child_run` from `children` (attempt → child run id).
    pub fn set_child_runs(&mut self, children: &HashMap<u32, String>) {
        for a in &mut self.attempt_history {
            a.child_run = children.get(&a.attempt).cloned();
        }
    }

    /// Where the latest attempt that has a host ran.
    pub fn latest_host(&self) -> Option<&str> {
        self.attempt_history.iter().rev().find_map(|a| a.host)
    }
}

impl<'a> RunDetail<'a> {
    /// The whole view: `run_detail` and what the store and the engine add
    /// (routing warnings, throttle queues, sub-flow nodes' child runs, nodes
    /// waiting for an executor).
    pub async fn gather(
        state: &AppState,
        stored: &'a StoredRun,
        def: &'a FlowDef,
    ) -> Result<RunDetail<'a>, ApiError> {
        let id = stored.run.id.as_str();
        let mut view = run_detail(stored, def);
        let audit = AuditQuery { run_id: Some(id.to_string()), limit: 100, ..Default::default() };
        view.warnings = state
            .reads
            .audit
            .audit(&audit)
            .await?
            .into_iter()
            .filter(|a| a.action == madeira_engine::fallbacks::ROUTING_FALLBACK)
            .filter_map(|a| a.reason)
            .collect();
        for node in def.nodes.iter().filter(|n| n.throttle.is_some()) {
            let (Some(throttle), Some(entry)) = (node.throttle, view.nodes.get_mut(node.id.as_str())) else {
                continue;
            };
            let live = state.engine.throttle_state(&def.name, &node.id);
            entry.throttle = Some(ThrottleView {
                max_permits: throttle.max_permits,
                permits_in_use: live.in_use,
                queue_depth: live.waiting.len(),
                queue_position: live.waiting.iter().position(|r| r == id).map(|p| p + 1),
                queue_size: throttle.queue_size,
            });
        }
        for node in &def.nodes {
            let madeira_core::NodeAction::Run(madeira_core::ExecutorDef::Subflow(sub)) = &node.action else {
                continue;
            };
            let Some(entry) = view.nodes.get_mut(node.id.as_str()) else { continue };
            let query = RunQuery {
                flow: Some(sub.flow.clone()),
                actor: Some(madeira_core::subflow::child_actor(id, &node.id)),
                limit: 1000,
                ..Default::default()
            };
            let children: HashMap<u32, String> = state
                .reads
                .runs
                .list_runs(&query)
                .await?
                .into_iter()
                .filter_map(|r| {
                    let key = r.idempotency_key.as_deref()?;
                    let (_, _, attempt) = madeira_core::subflow::parse_child_key(key)?;
                    Some((attempt, r.id))
                })
                .collect();
            entry.set_child_runs(&children);
        }
        let waiting = state.engine.waiting();
        for (name, node) in view.nodes.iter_mut() {
            if node.status == "INIT"
                && let Some(reason) = waiting.reason(id, name)
            {
                node.reason = Some(reason.into());
                node.waiting = Some(true);
            }
        }
        view.show_node_after(state, stored, def).await?;
        Ok(view)
    }

    /// Node-level `after`: each node's waits, and on an INIT node of a RUNNING run
    /// with an unmet one, why it waits.
    async fn show_node_after(
        &mut self,
        state: &AppState,
        stored: &StoredRun,
        def: &FlowDef,
    ) -> Result<(), ApiError> {
        if !def.nodes.iter().any(|n| !n.after.is_empty()) {
            return Ok(());
        }
        let run_id = stored.run.id.as_str();
        let waits = state.reads.runs.node_waits(run_id).await?;
        let reasons = madeira_engine::node_after::node_reasons(state.reads.runs.as_ref(), run_id, def).await;
        for (name, node) in self.nodes.iter_mut() {
            let mine: Vec<NodeAfterView> = waits
                .iter()
                .filter(|w| w.node == *name)
                .map(|w| NodeAfterView {
                    flow: w.wait.flow.clone(),
                    node: w.wait.node.clone(),
                    date: w.wait.date.clone(),
                    met: w.met,
                    upstream_run: w.upstream_run.clone(),
                    upstream_state: w.upstream_state.clone(),
                })
                .collect();
            if !mine.is_empty() {
                node.after = Some(mine);
            }
            if stored.run.state == madeira_core::RunState::Running
                && node.status == "INIT"
                && let Some(reason) = reasons.get(*name)
            {
                node.reason = Some(reason.clone().into());
                node.waiting = Some(true);
            }
        }
        Ok(())
    }
}

/// The view of `stored` (a run of `flow`) from the stored rows alone.
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
            after: None,
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

    #[test]
    fn a_throttle_is_written_as_the_api_always_wrote_it() {
        let typed = super::ThrottleView {
            max_permits: 2,
            permits_in_use: 1,
            queue_depth: 3,
            queue_position: None,
            queue_size: 50,
        };
        // What the route built with `json!` before the view was typed.
        let before = json!({
            "max_permits": 2,
            "queue_size": 50,
            "permits_in_use": 1,
            "queue_depth": 3,
            "queue_position": serde_json::Value::Null,
        });
        assert_eq!(serde_json::to_string(&typed).expect("serialises"), before.to_string());
    }
}
