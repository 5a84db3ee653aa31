//! Root causes of a failed run: the FAILED nodes that fail the run on their own,
//! each with the nodes skipped because of it (SPEC §7: one alert per root cause,
//! skipped nodes never alert separately).

use std::collections::VecDeque;

use crate::model::DepKind;
use crate::plan::RunSnapshot;
use crate::state::NodeState;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootCause {
    pub node: String,
    pub error: Option<String>,
    pub attempts: u32,
    /// Nodes skipped (transitively) because this one failed, in topological order.
    pub skipped: Vec<String>,
}

/// The untolerated FAILED nodes of `snap` in topological order.
pub fn root_causes(snap: &RunSnapshot) -> Vec<RootCause> {
    let flow = &snap.flow;
    flow.topo
        .iter()
        .copied()
        .filter(|&i| {
            snap.nodes[i].state == NodeState::Failed
                && (flow.downstream[i].is_empty()
                    || flow.downstream[i].iter().any(|(_, k)| *k == DepKind::Strong))
        })
        .map(|i| RootCause {
            node: flow.nodes[i].id.clone(),
            error: snap.nodes[i].reason.clone(),
            attempts: snap.nodes[i].attempt,
            skipped: skipped_because_of(snap, i),
        })
        .collect()
}

fn skipped_because_of(snap: &RunSnapshot, root: usize) -> Vec<String> {
    let flow = &snap.flow;
    let mut hit = vec![false; flow.nodes.len()];
    let mut queue = VecDeque::from([root]);
    while let Some(u) = queue.pop_front() {
        for (d, _) in &flow.downstream[u] {
            let n = &snap.nodes[*d];
            let by_upstream = n.state == NodeState::Skipped
                && matches!(n.reason.as_deref(), Some("upstream_failed" | "upstream_skipped"));
            if by_upstream && !hit[*d] {
                hit[*d] = true;
                queue.push_back(*d);
            }
        }
    }
    flow.topo.iter().filter(|i| hit[**i]).map(|i| flow.nodes[*i].id.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DepKind::{Strong, Weak};
    use crate::plan::tests::flow;
    use crate::plan::{Command, PlanCtx, apply};

    #[test]
    fn names_the_failed_node_and_what_it_skipped() {
        let f = flow(vec![
            (vec![], false, 1, None),
            (vec![(0, Strong)], false, 1, None),
            (vec![(1, Strong)], false, 1, None),
            (vec![(0, Weak)], false, 1, None),
        ]);
        let ctx = PlanCtx { now_ms: 0, jitter_unit: 0.0 };
        let mut snap = RunSnapshot::new("r".into(), f, serde_json::json!({}));
        apply(&mut snap, &Command::Start, &ctx).expect("start");
        apply(&mut snap, &Command::Dispatch { node: 0 }, &ctx).expect("dispatch");
        let failed = Command::AttemptFailed { node: 0, attempt: 1, error: "503".into(), retryable: false };
        apply(&mut snap, &failed, &ctx).expect("fail");
        let causes = root_causes(&snap);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].node, "n0");
        assert_eq!(causes[0].error.as_deref(), Some("503"));
        assert_eq!(causes[0].skipped, vec!["n1".to_string(), "n2".to_string()]);
    }
}
