//! The estate map for one business date: every flow with its `after` edges and
//! the state of its newest run for that date (done, running, held and by whom,
//! failed, queued, none), whether it is late against its deadline, and for a
//! held flow the root of the trouble: the first failed upstream flow (and its
//! failed node) up its chain of waits; a failed flow lists the flows it holds.
//! Node-level `after` entries are edges too (`node_after`), and a running run
//! with a node held by one lists it (`held_nodes`) with the root of its trouble.

use std::collections::BTreeMap;

use madeira_store::{RunQuery, Store};
use serde::Serialize;

use crate::EngineError;
use crate::flows::FlowCache;

/// One flow of the map.
#[derive(Debug, Clone, Serialize)]
pub struct MapFlow {
    pub flow: String,
    /// Upstream flows (`after`, its nodes' `after`, and `flow_succeeded`).
    pub after: Vec<String>,
    /// Node-level `after` edges: which node waits for which flow (or node).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_after: Vec<NodeEdge>,
    /// Nodes of the date's running run held by their `after`, with whom they wait for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held_nodes: Vec<HeldNodeView>,
    /// `done`, `running`, `held`, `queued`, `failed`, `cancelled` or `none`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// A held run's reason (`waiting for payments-pull 2026-12-04`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// For a held flow: the failed upstream `{flow, node}` that holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root_cause: Option<RootCause>,
    /// For a failed flow: the held flows whose root cause it is, upstream first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<String>,
    /// The instant (RFC 3339, UTC) the flow's run for this date must be SUCCESS
    /// by (`deadline:`), for a flow that has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// That deadline has passed and the flow is not done.
    pub late: bool,
}

/// `node` of the flow waits for `upstream` (`upstream_node` of it, if given).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodeEdge {
    pub node: String,
    pub upstream: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_node: Option<String>,
}

/// A node held by its `after` now, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HeldNodeView {
    pub node: String,
    pub waiting_for: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RootCause {
    pub flow: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// The map of every flow for `date`, upstream flows first; `now_ms` decides
/// which deadlines have passed.
pub async fn build(
    store: &dyn Store,
    flows: &FlowCache,
    date: &str,
    now_ms: i64,
) -> Result<Vec<MapFlow>, EngineError> {
    let defs = flows.latest_defs(store).await?;
    let estate = crate::estate::of(&defs);
    let calendars = flows.calendars();
    let day = madeira_core::bizdate::parse_date(date).map_err(EngineError::BadBizDate)?;
    let deadlines: BTreeMap<&str, chrono::DateTime<chrono::Utc>> = defs
        .iter()
        .filter_map(|def| {
            let deadline = def.business.deadline.as_ref()?;
            let cal = deadline.calendar.as_deref().and_then(|c| calendars.get(c));
            Some((def.name.as_str(), madeira_core::bizdate::deadline_at(deadline, day, cal)?))
        })
        .collect();
    let mut map: BTreeMap<String, MapFlow> = BTreeMap::new();
    let mut failed_node: BTreeMap<String, Option<String>> = BTreeMap::new();
    for name in estate.topo() {
        let Some(f) = estate.get(&name) else { continue };
        let query = RunQuery {
            flow: Some(name.clone()),
            biz_date: Some(date.to_string()),
            limit: 1,
            ..RunQuery::default()
        };
        let newest = store.list_runs(&query).await?.into_iter().next();
        let mut after: Vec<String> = f.all_after().map(|(_, a)| a.flow.clone()).collect();
        after.extend(f.triggered_by.iter().map(|(u, _)| u.clone()));
        after.sort();
        after.dedup();
        let (state, run_id, waiting_for) = match &newest {
            None => ("none", None, None),
            Some(r) => {
                let state = match r.state.as_str() {
                    "SUCCESS" => "done",
                    "RUNNING" => "running",
                    "FAILED" => "failed",
                    "CANCELLED" => "cancelled",
                    _ if r.wait_reason.as_deref().is_some_and(|w| w.starts_with("waiting for")) => "held",
                    _ => "queued",
                };
                (state, Some(r.id.clone()), r.wait_reason.clone().filter(|_| state == "held"))
            }
        };
        if state == "failed"
            && let Some(id) = &run_id
        {
            let stored = store.load_run(id).await?;
            let node = stored
                .and_then(|s| s.nodes.into_iter().find(|n| n.state.as_str() == "FAILED").map(|n| n.node));
            failed_node.insert(name.clone(), node);
        }
        let held_nodes = match (&newest, defs.iter().find(|d| d.name == name)) {
            (Some(r), Some(def)) if state == "running" => held_nodes(store, &r.id, def).await?,
            _ => Vec::new(),
        };
        let node_after = f
            .node_after
            .iter()
            .map(|(node, a)| NodeEdge {
                node: node.clone(),
                upstream: a.flow.clone(),
                upstream_node: a.node.clone(),
            })
            .collect();
        let due = deadlines.get(name.as_str());
        let late = state != "done" && due.is_some_and(|at| at.timestamp_millis() <= now_ms);
        let deadline = due.map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        let flow = MapFlow {
            flow: name.clone(),
            after,
            node_after,
            held_nodes,
            state,
            run_id,
            waiting_for,
            root_cause: None,
            holds: Vec::new(),
            deadline,
            late,
        };
        map.insert(name, flow);
    }
    let names: Vec<String> = estate.topo();
    for name in &names {
        if map.get(name).is_some_and(|m| m.state == "held" || !m.held_nodes.is_empty()) {
            let root = root_of(name, &map, &failed_node, 0);
            if let Some(r) = &root
                && let Some(upstream) = map.get_mut(&r.flow)
            {
                upstream.holds.push(name.clone());
            }
            if let Some(m) = map.get_mut(name) {
                m.root_cause = root;
            }
        }
    }
    Ok(names.into_iter().filter_map(|n| map.remove(&n)).collect())
}

/// The INIT nodes of the RUNNING run `run_id` (of `def`) held by an unmet `after`.
async fn held_nodes(
    store: &dyn Store,
    run_id: &str,
    def: &madeira_core::FlowDef,
) -> Result<Vec<HeldNodeView>, EngineError> {
    let reasons = crate::node_after::node_reasons(store, run_id, def).await;
    if reasons.is_empty() {
        return Ok(Vec::new());
    }
    let Some(stored) = store.load_run(run_id).await? else { return Ok(Vec::new()) };
    Ok(reasons
        .into_iter()
        .filter(|(node, _)| stored.nodes.iter().any(|n| n.node == *node && n.state.as_str() == "INIT"))
        .map(|(node, waiting_for)| HeldNodeView { node, waiting_for })
        .collect())
}

/// The first failed flow up `name`'s waits (depth-bounded: the estate has no cycles).
fn root_of(
    name: &str,
    map: &BTreeMap<String, MapFlow>,
    failed: &BTreeMap<String, Option<String>>,
    depth: usize,
) -> Option<RootCause> {
    if depth > 64 {
        return None;
    }
    let flow = map.get(name)?;
    for up in &flow.after {
        match map.get(up).map(|m| m.state) {
            Some("failed") => {
                return Some(RootCause { flow: up.clone(), node: failed.get(up).cloned().flatten() });
            }
            Some("held") => {
                if let Some(root) = root_of(up, map, failed, depth + 1) {
                    return Some(root);
                }
            }
            _ => {}
        }
    }
    None
}
