//! Sub-flow failures are one alert: a child run (`run: {flow}` node) that failed
//! has its failure alert, naming the child's failed node; the parent run that
//! failed because of it (its node's error names the child,
//! `madeira_core::subflow::failed_child`) joins that alert, listed under its holds
//! with the node (`Hold::parent_node`), and raises nothing of its own. The
//! parent's later SUCCESS (a rerun of its node starts a new child) counts as the
//! child's: the alert resolves once none of its failed runs is left.

use madeira_core::subflow::failed_child;

use crate::model::{Failure, Hold};

use super::{Aggregator, Changes};

impl Aggregator {
    /// `f` is a parent run whose every root cause is a failed child run with an
    /// open failure alert: it joins the first child's alert and is consumed. Any
    /// other failure is given back.
    pub(super) fn parent_failure(&mut self, f: Failure, now: i64, out: &mut Changes) -> Option<Failure> {
        let mut joined = Vec::new();
        for cause in &f.causes {
            let child = cause.error.as_deref().and_then(failed_child);
            match child.and_then(|c| Some((self.failure_alert_of(c)?, c.to_string()))) {
                Some((id, child)) => joined.push((id, child, cause.node.clone())),
                None => return Some(f),
            }
        }
        let Some((id, child, node)) = joined.into_iter().next() else { return Some(f) };
        let hold = Hold {
            flow: f.flow.clone(),
            biz_date: f.labels.get("biz_date").cloned().unwrap_or_default(),
            run_id: f.run_id.clone(),
            root_run: child,
            deadline_missed: None,
            parent_node: Some(node),
        };
        self.add_hold(&id, hold, now, out);
        out.grouped.push(id);
        None
    }

    /// The failed child runs whose parent `run_id` is listed on an open alert.
    pub(super) fn children_of(&self, run_id: &str) -> Vec<String> {
        self.alerts
            .values()
            .flat_map(|a| a.holds.iter())
            .filter(|h| h.parent_node.is_some() && h.run_id == run_id)
            .map(|h| h.root_run.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AlertStatus, Cause};

    fn failure(run: &str, flow: &str, node: &str, error: &str) -> Failure {
        let cause = Cause { node: node.into(), error: Some(error.into()), attempts: 1, skipped: vec![] };
        let labels = [("biz_date".to_string(), "2026-12-04".to_string())].into_iter().collect();
        Failure { run_id: run.into(), flow: flow.into(), labels, causes: vec![cause] }
    }

    #[test]
    fn a_parent_failing_with_its_child_joins_the_child_alert_and_resolves_with_it() {
        let mut agg = Aggregator::new(1_000);
        let mut out = Changes::default();
        agg.failure(failure("c1", "charge", "call_bank", "HTTP 503"), 0, &mut out);
        let parent = failure("p1", "orders", "charge", "child run c1 failed at node call_bank: HTTP 503");
        agg.failure(parent, 100, &mut out);
        assert_eq!(agg.open().count(), 1, "one alert for both");
        agg.flush_due(1_000, &mut out);
        let alert = agg.get(&out.fire[0]).expect("open");
        assert_eq!((alert.flow.as_deref(), alert.node.as_deref()), (Some("charge"), Some("call_bank")));
        assert_eq!(
            alert.holds.iter().map(Hold::label).collect::<Vec<_>>(),
            ["orders 2026-12-04 (parent: its node charge failed with it)"]
        );
        // The parent's rerun succeeds (through a new child): the alert resolves.
        let mut out = Changes::default();
        agg.run_succeeded("p1", 2_000, &mut out);
        assert_eq!(out.resolve.len(), 1, "{out:?}");
        assert_eq!(agg.open().count(), 0);
        assert_eq!(out.removed[0].status, AlertStatus::Resolved);
        // A parent whose child has no open alert pages on its own.
        let mut out = Changes::default();
        agg.failure(failure("p2", "orders", "charge", "child run gone failed at node x: y"), 3_000, &mut out);
        assert_eq!(agg.open().count(), 1);
    }
}
