//! Sub-flow edges of the estate: which flows a flow's nodes run as children
//! (`run: {flow}`), and the cycle check that refuses a flow running itself
//! through its sub-flows (`a → b → a`), printed with files and lines. These
//! edges are not waits: they take no part in `after` resolution, backfill or
//! the map.

use std::collections::BTreeMap;

use crate::model::{ExecutorDef, FlowDef, NodeAction};

use super::{CycleStep, Estate};

/// The sub-flows `def`'s nodes run, with the line of each `flow:`.
pub(super) fn of(def: &FlowDef) -> Vec<(String, Option<usize>)> {
    def.nodes
        .iter()
        .filter_map(|n| match &n.action {
            NodeAction::Run(ExecutorDef::Subflow(s)) => Some((s.flow.clone(), s.line)),
            _ => None,
        })
        .collect()
}

pub(super) fn cycle_text(steps: &[CycleStep]) -> String {
    let mut text = String::from("sub-flow cycle: ");
    for step in steps {
        text.push_str(&format!(
            "{} ({}:{} runs {}) → ",
            step.flow,
            step.file,
            step.line.unwrap_or(1),
            step.upstream
        ));
    }
    if let Some(first) = steps.first() {
        text.push_str(&first.flow);
    }
    text.push_str(
        "; a flow cannot run itself through its sub-flows: remove one of these `run: {flow: …}` nodes",
    );
    text
}

impl Estate {
    /// A chain of sub-flows from `start` back to itself, shortest first.
    pub fn subflow_cycle_through(&self, start: &str) -> Option<Vec<CycleStep>> {
        let mut came_from: BTreeMap<&str, (&str, Option<usize>)> = BTreeMap::new();
        let mut frontier = vec![start];
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for name in frontier {
                let Some(flow) = self.flows.get(name) else { continue };
                for (child, line) in &flow.subflows {
                    if child == start {
                        return Some(self.unwind(start, name, *line, &came_from));
                    }
                    if self.flows.contains_key(child) && !came_from.contains_key(child.as_str()) {
                        came_from.insert(child, (name, *line));
                        next.push(child.as_str());
                    }
                }
            }
            frontier = next;
        }
        None
    }
}
