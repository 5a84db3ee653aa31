//! One failed run is one incident. A run already on an open failure alert that
//! fails again with another root cause (an operator reran or marked a node
//! successful, and the run went on to fail elsewhere) does not page anew:
//! - if the alert counts only that run and no open alert has the new root cause,
//!   the alert follows the run: it now names the new root cause (later runs that
//!   fail that way join it) and, once fired, says what changed in one `update`
//!   sent at once — "root cause moved" when the new root cause is a node the
//!   alert named as skipped because of the old one, "new root cause" otherwise;
//! - if other runs still fail the old way, the run leaves the alert (which stays
//!   for them) and joins the open alert of its new root cause, or opens one whose
//!   `firing` message says which alert the run came from and what changed;
//! - if the run was the alert's only one and another open alert already has the
//!   new root cause, the run joins that one and the alert it left resolves,
//!   saying where the run went.

use crate::model::{AlertStatus, Cause, Failure};

use super::{Aggregator, Changes, RUN_FAILED, describe_causes};

impl Aggregator {
    /// Handles `f` when its run is on an open failure alert with another key;
    /// gives `f` back when it is not (a first failure, or the same root cause).
    pub(super) fn moved(&mut self, f: Failure, key: &str, now: i64, out: &mut Changes) -> Option<Failure> {
        let from = self.by_run.get(&f.run_id).and_then(|ids| {
            ids.iter()
                .find(|id| self.alerts.get(*id).is_some_and(|a| a.alertname == RUN_FAILED && a.key != key))
        });
        let Some(from) = from.cloned() else { return Some(f) };
        let target = self.by_key.get(key).cloned();
        let Some(alert) = self.alerts.get_mut(&from) else { return Some(f) };
        let (what, change) = describe_change(&alert.causes, &f.causes);
        if alert.runs.len() == 1 && target.is_none() {
            // The alert follows its only run.
            self.by_key.remove(&alert.key);
            alert.key = key.to_string();
            alert.node = nodes(&f.causes);
            alert.summary = format!("flow {} failed: root cause {}", f.flow, describe_causes(&f.causes));
            alert.causes = f.causes;
            alert.updated_at = now;
            alert.moved = Some(format!("{what} in run {}: {change}", f.run_id));
            if alert.status == AlertStatus::Firing {
                alert.announced_at = Some(now);
                alert.announced_count = Some(alert.count);
                alert.added = 0;
                alert.announced_holds = Some(alert.holds_changes);
                alert.holds_added = 0;
                out.update.push(from.clone());
            }
            self.by_key.insert(key.to_string(), from.clone());
            self.reschedule(&from);
            out.touched.push(from);
            return None;
        }
        // The run leaves the alert; it joins (or opens) the one of its new root cause.
        alert.runs.retain(|r| *r != f.run_id);
        alert.updated_at = now;
        let emptied = alert.runs.is_empty();
        if let Some(ids) = self.by_run.get_mut(&f.run_id) {
            ids.retain(|id| *id != from);
        }
        let run_id = f.run_id.clone();
        let holds = self.take_holds(&from, &run_id);
        self.failure(f, now, out);
        let to = self.by_key.get(key).cloned().unwrap_or_default();
        self.give_holds(&to, holds, now, out);
        if emptied {
            if let Some(alert) = self.alerts.get_mut(&from) {
                alert.moved = Some(format!("run {run_id} now fails as alert {to}: {change}"));
            }
            self.close(&from, now, out);
        } else {
            out.touched.push(from.clone());
            if target.is_none()
                && let Some(alert) = self.alerts.get_mut(&to)
            {
                alert.moved = Some(format!("run {run_id} was on alert {from}: {change}"));
            }
        }
        None
    }
}

fn nodes(causes: &[Cause]) -> Option<String> {
    let node = causes.iter().map(|c| c.node.as_str()).collect::<Vec<_>>().join(", ");
    (!node.is_empty()).then_some(node)
}

/// `("root cause moved" | "new root cause", what changed)` from the causes an
/// alert named to a run's new ones: "moved" when every new root cause is a node
/// an old one had skipped.
fn describe_change(old: &[Cause], new: &[Cause]) -> (&'static str, String) {
    let mut parts = Vec::new();
    let mut moved = true;
    for o in old {
        match new.iter().find(|n| n.node == o.node) {
            None => parts.push(format!("node `{}` no longer fails", o.node)),
            Some(n) => {
                let class = |c: &Cause| super::error_class(c.error.as_deref().unwrap_or(""));
                if class(n) != class(o) {
                    moved = false;
                    parts.push(format!("node `{}` now fails with another error", o.node));
                }
            }
        }
    }
    for n in new.iter().filter(|n| !old.iter().any(|o| o.node == n.node)) {
        match old.iter().find(|o| o.skipped.contains(&n.node)) {
            Some(o) => {
                parts.push(format!("node `{}` (skipped before because of `{}`) failed", n.node, o.node))
            }
            None => {
                moved = false;
                parts.push(format!("node `{}` failed", n.node));
            }
        }
    }
    let what = if moved { "root cause moved" } else { "new root cause" };
    (what, parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause(node: &str, error: &str, skipped: &[&str]) -> Cause {
        Cause {
            node: node.into(),
            error: Some(error.into()),
            attempts: 1,
            skipped: skipped.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn failure(run: &str, causes: Vec<Cause>) -> Failure {
        Failure { run_id: run.into(), flow: "settle".into(), labels: Default::default(), causes }
    }

    /// The run was its alert's only one, and another alert already has its new
    /// root cause: it joins that one; the alert it left resolves saying so.
    #[test]
    fn a_lone_run_moving_to_an_open_alert_joins_it_and_its_old_alert_resolves_once() {
        let mut agg = Aggregator::new(1_000);
        let mut out = Changes::default();
        agg.failure(failure("r1", vec![cause("pull", "503", &["book"])]), 0, &mut out);
        agg.failure(failure("r2", vec![cause("book", "mismatch", &[])]), 0, &mut out);
        agg.flush_due(1_000, &mut out);
        let (old, new) = (out.fire[0].clone(), out.fire[1].clone());
        let mut out = Changes::default();
        agg.failure(failure("r1", vec![cause("book", "mismatch", &[])]), 2_000, &mut out);
        assert_eq!(out.resolve, vec![old.clone()]);
        assert_eq!((out.fire.len(), out.update.len()), (0, 0), "no page, no immediate update");
        let moved = out.removed[0].moved.as_deref().unwrap_or_default();
        assert_eq!(
            moved,
            format!(
                "run r1 now fails as alert {new}: node `pull` no longer fails; node `book` (skipped before because of `pull`) failed"
            )
        );
        assert_eq!(
            agg.get(&new).map(|a| (a.runs.clone(), a.count)),
            Some((vec!["r2".into(), "r1".into()], 2))
        );
        // Its success resolves the alert it is on now, once.
        let mut out = Changes::default();
        agg.run_succeeded("r1", 3_000, &mut out);
        agg.run_succeeded("r2", 3_000, &mut out);
        assert_eq!(out.resolve, vec![new]);
        assert_eq!(out.removed[0].moved, None, "resolved by its runs, not by a move");
    }

    #[test]
    fn a_skipped_node_failing_is_a_move_anything_else_is_new() {
        let old = [cause("pull", "HTTP 503", &["book", "notify"])];
        let (what, change) = describe_change(&old, &[cause("book", "mismatch", &["notify"])]);
        assert_eq!(what, "root cause moved");
        assert_eq!(
            change,
            "node `pull` no longer fails; node `book` (skipped before because of `pull`) failed"
        );
        let (what, change) = describe_change(&old, &[cause("audit", "x", &[])]);
        assert_eq!(
            (what, change.as_str()),
            ("new root cause", "node `pull` no longer fails; node `audit` failed")
        );
        let (what, change) = describe_change(&old, &[cause("pull", "disk full", &[])]);
        assert_eq!((what, change.as_str()), ("new root cause", "node `pull` now fails with another error"));
    }
}
