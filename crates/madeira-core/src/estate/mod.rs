//! The estate: every flow and the cross-flow dependencies between them (`after:`
//! entries and `flow_succeeded` triggers). Pure: built from parsed flows, it checks
//! the wiring (unknown flows and nodes, cycles printed with files and lines),
//! resolves which upstream runs a flow's run for a business date waits for
//! (`resolve`), and orders a backfill so that no dependent starts before its
//! upstream for a date (`backfill`), and decides a running backfill's next
//! steps (`progress`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::model::{AfterDef, FlowDef, TriggerDef};

mod backfill;
mod progress;
mod resolve;
mod subflows;
#[cfg(test)]
mod tests;

pub use backfill::{BackfillError, BackfillOrder, BackfillPlan, Dated, backfill_order};
pub use progress::{
    Advance, AdvanceFacts, BackfillAction, BackfillRefusal, BackfillState, Rerun, StepFacts, StepStatus,
    UnknownBackfillName, advance,
};
pub use resolve::{
    BusinessDays, CalendarDays, DateError, Requirement, node_requirements, parse_date, plain_shift,
    requirements,
};

/// One flow as the estate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EstateFlow {
    pub name: String,
    /// Where the flow was read from (a file, or `name@vN` for a stored version).
    pub file: String,
    pub after: Vec<AfterDef>,
    /// Node-level `after:` entries: `(waiting node, entry)`, in node then file order.
    pub node_after: Vec<(String, AfterDef)>,
    /// `flow_succeeded` triggers: `(upstream flow, line)`.
    pub triggered_by: Vec<(String, Option<usize>)>,
    /// The flow's node ids (an `after.node` of a downstream must name one).
    pub nodes: Vec<String>,
    /// Sub-flows its nodes run (`run: {flow}`): `(child flow, line)`.
    pub subflows: Vec<(String, Option<usize>)>,
}

impl EstateFlow {
    pub fn from_def(file: &str, def: &FlowDef) -> Self {
        let triggered_by = def
            .triggers
            .iter()
            .filter_map(|t| match t {
                TriggerDef::FlowSucceeded { flow, line } => Some((flow.clone(), *line)),
                _ => None,
            })
            .collect();
        Self {
            name: def.name.clone(),
            file: file.to_string(),
            after: def.after.clone(),
            node_after: def
                .nodes
                .iter()
                .flat_map(|n| n.after.iter().map(|a| (n.id.clone(), a.clone())))
                .collect(),
            triggered_by,
            nodes: def.nodes.iter().map(|n| n.id.clone()).collect(),
            subflows: subflows::of(def),
        }
    }

    /// Every `after` entry, the flow's then its nodes' (`Some(node)`).
    pub fn all_after(&self) -> impl Iterator<Item = (Option<&str>, &AfterDef)> {
        let nodes = self.node_after.iter().map(|(n, a)| (Some(n.as_str()), a));
        self.after.iter().map(|a| (None, a)).chain(nodes)
    }

    /// Upstream flows with the line naming them and whether the edge is same-date
    /// (`date: same` or a `flow_succeeded` trigger). A node's `after` is an edge of
    /// its flow: a flow-level cycle through one is refused like any other.
    fn edges(&self) -> impl Iterator<Item = Edge<'_>> {
        let after =
            self.all_after().map(|(_, a)| Edge { upstream: &a.flow, line: a.line, same_date: a.offset == 0 });
        let triggers =
            self.triggered_by.iter().map(|(f, line)| Edge { upstream: f, line: *line, same_date: true });
        after.chain(triggers)
    }
}

#[derive(Debug, Clone, Copy)]
struct Edge<'a> {
    upstream: &'a str,
    line: Option<usize>,
    same_date: bool,
}

/// One step of a cycle: `flow` (at `file:line`) waits for `upstream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleStep {
    pub flow: String,
    pub file: String,
    pub line: Option<usize>,
    pub upstream: String,
}

/// A problem in the wiring of the estate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EstateError {
    #[error("{file}:{}: flow {flow}: `{field}` names flow `{upstream}`, which does not exist{hint}; apply it first or fix the name", line.unwrap_or(1))]
    UnknownFlow {
        file: String,
        line: Option<usize>,
        flow: String,
        field: &'static str,
        upstream: String,
        hint: String,
    },
    #[error("{file}:{}: flow {flow}: `after` names node `{node}` of flow `{upstream}`, which has no such node{hint}", line.unwrap_or(1))]
    UnknownNode {
        file: String,
        line: Option<usize>,
        flow: String,
        upstream: String,
        node: String,
        hint: String,
    },
    #[error("{}", cycle_text(.0))]
    Cycle(Vec<CycleStep>),
    /// Flows that run each other as sub-flows, back to the first (`a → b → a`).
    #[error("{}", subflows::cycle_text(.0))]
    SubflowCycle(Vec<CycleStep>),
}

fn cycle_text(steps: &[CycleStep]) -> String {
    let mut text = String::from("cycle across flows for the same business date: ");
    for step in steps {
        text.push_str(&format!(
            "{} ({}:{} waits for {}) → ",
            step.flow,
            step.file,
            step.line.unwrap_or(1),
            step.upstream
        ));
    }
    if let Some(first) = steps.first() {
        text.push_str(&first.flow);
    }
    text.push_str("; remove one of these `after`/`flow_succeeded` entries, or make one wait for an earlier date (`date: -1`)");
    text
}

/// Every flow of the estate, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Estate {
    flows: BTreeMap<String, EstateFlow>,
}

impl Estate {
    pub fn new(flows: impl IntoIterator<Item = EstateFlow>) -> Self {
        Self { flows: flows.into_iter().map(|f| (f.name.clone(), f)).collect() }
    }

    /// Adds or replaces one flow (a flow being applied replaces its stored version).
    pub fn insert(&mut self, flow: EstateFlow) {
        self.flows.insert(flow.name.clone(), flow);
    }

    pub fn get(&self, name: &str) -> Option<&EstateFlow> {
        self.flows.get(name)
    }

    pub fn flows(&self) -> impl Iterator<Item = &EstateFlow> {
        self.flows.values()
    }

    /// The problems of the estate: names of missing flows and nodes, then at most
    /// one cycle (the one found first, in name order).
    pub fn check(&self) -> Vec<EstateError> {
        let mut errors = self.dangling();
        errors.extend(self.cycle().map(EstateError::Cycle));
        errors.extend(
            self.flows.keys().find_map(|n| self.subflow_cycle_through(n)).map(EstateError::SubflowCycle),
        );
        errors
    }

    /// The problems `flow` takes part in (for `apply` of one file: problems of
    /// other flows alone are warnings, see `dangling`).
    pub fn check_flow(&self, flow: &str) -> Vec<EstateError> {
        let mut errors: Vec<EstateError> = self
            .dangling()
            .into_iter()
            .filter(|e| matches!(e, EstateError::UnknownFlow { flow: f, .. } | EstateError::UnknownNode { flow: f, .. } if f == flow))
            .collect();
        if let Some(cycle) = self.cycle_through(flow) {
            errors.push(EstateError::Cycle(cycle));
        }
        if let Some(cycle) = self.subflow_cycle_through(flow) {
            errors.push(EstateError::SubflowCycle(cycle));
        }
        errors
    }

    /// `after`/trigger entries naming a flow or node that does not exist.
    pub fn dangling(&self) -> Vec<EstateError> {
        let mut out = Vec::new();
        for f in self.flows.values() {
            for (_, a) in f.all_after() {
                self.check_edge(f, "after", &a.flow, a.line, a.node.as_deref(), &mut out);
            }
            for (up, line) in &f.triggered_by {
                self.check_edge(f, "flow_succeeded", up, *line, None, &mut out);
            }
            for (child, line) in &f.subflows {
                self.check_edge(f, "run.flow", child, *line, None, &mut out);
            }
        }
        out
    }

    fn check_edge(
        &self,
        f: &EstateFlow,
        field: &'static str,
        upstream: &str,
        line: Option<usize>,
        node: Option<&str>,
        out: &mut Vec<EstateError>,
    ) {
        let Some(up) = self.flows.get(upstream) else {
            let hint = crate::spec::suggest(upstream, self.flows.keys().map(String::as_str));
            out.push(EstateError::UnknownFlow {
                file: f.file.clone(),
                line,
                flow: f.name.clone(),
                field,
                upstream: upstream.to_string(),
                hint,
            });
            return;
        };
        if let Some(node) = node.filter(|n| !up.nodes.iter().any(|x| x == n)) {
            let hint = crate::spec::suggest(node, up.nodes.iter().map(String::as_str));
            out.push(EstateError::UnknownNode {
                file: f.file.clone(),
                line,
                flow: f.name.clone(),
                upstream: upstream.to_string(),
                node: node.to_string(),
                hint,
            });
        }
    }

    /// A cycle of same-date edges, if any: waits that can never be met. Edges to
    /// an earlier date (`date: -1`) never close a cycle.
    pub fn cycle(&self) -> Option<Vec<CycleStep>> {
        self.flows.keys().find_map(|name| self.cycle_through(name))
    }

    /// A cycle of same-date edges through `start`: a path back to it, shortest first.
    pub fn cycle_through(&self, start: &str) -> Option<Vec<CycleStep>> {
        // Breadth-first over upstream edges, remembering how each flow was reached.
        let mut came_from: BTreeMap<&str, (&str, Option<usize>)> = BTreeMap::new();
        let mut frontier = vec![start];
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for name in frontier {
                let Some(flow) = self.flows.get(name) else { continue };
                for e in flow.edges().filter(|e| e.same_date) {
                    if e.upstream == start {
                        return Some(self.unwind(start, name, e.line, &came_from));
                    }
                    if self.flows.contains_key(e.upstream) && !came_from.contains_key(e.upstream) {
                        came_from.insert(e.upstream, (name, e.line));
                        next.push(e.upstream);
                    }
                }
            }
            frontier = next;
        }
        None
    }

    /// The steps from `start` to `last` (which waits for `start` at `line`).
    fn unwind(
        &self,
        start: &str,
        last: &str,
        line: Option<usize>,
        came_from: &BTreeMap<&str, (&str, Option<usize>)>,
    ) -> Vec<CycleStep> {
        let step = |flow: &str, line, upstream: &str| CycleStep {
            flow: flow.to_string(),
            file: self.flows.get(flow).map(|f| f.file.clone()).unwrap_or_default(),
            line,
            upstream: upstream.to_string(),
        };
        let mut steps = vec![step(last, line, start)];
        let mut cur = last;
        while cur != start {
            let Some(&(waiter, line)) = came_from.get(cur) else { break };
            steps.push(step(waiter, line, cur));
            cur = waiter;
        }
        steps.reverse();
        steps
    }

    /// Flows that wait for `flow` directly (`after` or `flow_succeeded`).
    pub fn dependents_of(&self, flow: &str) -> BTreeSet<&str> {
        self.flows
            .values()
            .filter(|f| f.edges().any(|e| e.upstream == flow))
            .map(|f| f.name.as_str())
            .collect()
    }

    /// `flow` and every flow downstream of it, transitively.
    pub fn with_dependents(&self, flow: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::from([flow.to_string()]);
        let mut todo = vec![flow.to_string()];
        while let Some(f) = todo.pop() {
            for d in self.dependents_of(&f) {
                if seen.insert(d.to_string()) {
                    todo.push(d.to_string());
                }
            }
        }
        seen
    }

    /// Flows in an order where every flow comes after its same-date upstreams and
    /// the sub-flows it runs (names break ties); flows on a cycle come last, in
    /// name order.
    pub fn topo(&self) -> Vec<String> {
        let mut done: BTreeSet<&str> = BTreeSet::new();
        let mut order = Vec::new();
        loop {
            let ready: Vec<&str> = self
                .flows
                .values()
                .filter(|f| !done.contains(f.name.as_str()))
                .filter(|f| {
                    f.edges()
                        .filter(|e| e.same_date && self.flows.contains_key(e.upstream))
                        .all(|e| done.contains(e.upstream))
                        && f.subflows
                            .iter()
                            .filter(|(c, _)| self.flows.contains_key(c) && *c != f.name)
                            .all(|(c, _)| done.contains(c.as_str()))
                })
                .map(|f| f.name.as_str())
                .collect();
            if ready.is_empty() {
                break;
            }
            for r in ready {
                done.insert(r);
                order.push(r.to_string());
            }
        }
        order.extend(self.flows.keys().filter(|n| !done.contains(n.as_str())).cloned());
        order
    }
}

impl fmt::Display for CycleStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}:{}) waits for {}", self.flow, self.file, self.line.unwrap_or(1), self.upstream)
    }
}
