//! Alerts follow the estate: a run held (`after`) behind a failed run is listed on
//! the failure alert that counts that run — one alert per flow and root cause, as
//! ever — and raises nothing of its own. A run newly held, or a held run whose
//! deadline passed (its `MadeiraDeadlineMissed`, `Raise::held_by`), is a change
//! of the alert, announced in an `update` at most every `group_interval` (a
//! pending alert's first message lists them all). The alert resolves as before,
//! when its failed runs succeed; the held runs are then released by the store.
//! A run moving to another alert (`moved`) takes the runs held behind it along.

use tracing::debug;

use crate::model::{Held, Hold, Raise};

use super::{Aggregator, Changes, RUN_FAILED};

impl Aggregator {
    /// The open failure alert counting `run_id`, if any.
    pub(super) fn failure_alert_of(&self, run_id: &str) -> Option<String> {
        self.by_run
            .get(run_id)?
            .iter()
            .find(|id| self.alerts.get(*id).is_some_and(|a| a.alertname == RUN_FAILED))
            .cloned()
    }

    /// Run `h.run_id` is held behind the failed run `h.root_run`: the failure
    /// alert counting that run lists it. False when no open alert counts it
    /// (told before that alert, or after it resolved): nothing is raised then.
    pub fn held(&mut self, h: Held, now: i64, out: &mut Changes) -> bool {
        let Some(id) = self.failure_alert_of(&h.root_run) else {
            debug!(run_id = %h.run_id, root_run = %h.root_run, "held run: no open failure alert counts its root run");
            return false;
        };
        let hold = Hold {
            flow: h.flow,
            biz_date: h.biz_date,
            run_id: h.run_id,
            root_run: h.root_run,
            deadline_missed: None,
            parent_node: None,
        };
        self.add_hold(&id, hold, now, out);
        true
    }

    /// `r` about a run held behind a failed run (`held_by`) whose failure alert
    /// is open: it joins that alert (its hold is marked with `r.summary`) and is
    /// consumed; any other raise is given back.
    pub(super) fn raise_held(&mut self, r: Raise, now: i64, out: &mut Changes) -> Option<Raise> {
        let Some(id) = r.held_by.as_deref().and_then(|root| self.failure_alert_of(root)) else {
            return Some(r);
        };
        let hold = Hold {
            flow: r.flow.clone().unwrap_or_default(),
            biz_date: r.labels.get("biz_date").cloned().unwrap_or_default(),
            run_id: r.run_id.clone().unwrap_or_default(),
            root_run: r.held_by.clone().unwrap_or_default(),
            deadline_missed: Some(r.summary),
            parent_node: None,
        };
        self.add_hold(&id, hold, now, out);
        out.grouped.push(id);
        None
    }

    /// Adds (or updates) a hold of alert `id`; a change is announced as growth.
    pub(super) fn add_hold(&mut self, id: &str, hold: Hold, now: i64, out: &mut Changes) {
        let Some(alert) = self.alerts.get_mut(id) else { return };
        let same = |h: &Hold| {
            if hold.run_id.is_empty() {
                h.flow == hold.flow && h.biz_date == hold.biz_date
            } else {
                h.run_id == hold.run_id
            }
        };
        let changed = match alert.holds.iter_mut().find(|h| same(h)) {
            Some(known) if hold.deadline_missed.is_some() && known.deadline_missed.is_none() => {
                known.deadline_missed = hold.deadline_missed;
                true
            }
            Some(_) => false,
            None => {
                alert.holds.push(hold);
                true
            }
        };
        if changed {
            alert.holds_changes += 1;
            alert.updated_at = now;
            self.reschedule(id);
            out.touched.push(id.to_string());
        }
    }

    /// Takes from alert `id` the holds behind run `run_id` (the run leaves it).
    pub(super) fn take_holds(&mut self, id: &str, run_id: &str) -> Vec<Hold> {
        let Some(alert) = self.alerts.get_mut(id) else { return Vec::new() };
        let (taken, kept) = std::mem::take(&mut alert.holds).into_iter().partition(|h| h.root_run == run_id);
        alert.holds = kept;
        taken
    }

    /// Gives `holds` to alert `id` (where their run went).
    pub(super) fn give_holds(&mut self, id: &str, holds: Vec<Hold>, now: i64, out: &mut Changes) {
        for hold in holds {
            self.add_hold(id, hold, now, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Intervals;
    use super::*;
    use crate::model::{AlertStatus, Cause, Failure, Severity};

    const MIN: i64 = 60_000;

    fn failure(run: &str, flow: &str) -> Failure {
        let cause =
            Cause { node: "pull".into(), error: Some("upstream down".into()), attempts: 1, skipped: vec![] };
        Failure { run_id: run.into(), flow: flow.into(), labels: Default::default(), causes: vec![cause] }
    }

    fn held(run: &str, flow: &str, root: &str) -> Held {
        Held {
            run_id: run.into(),
            flow: flow.into(),
            biz_date: "2026-12-04".into(),
            root_run: root.into(),
            root_flow: "payments-pull".into(),
            root_node: Some("pull".into()),
        }
    }

    fn agg() -> Aggregator {
        Aggregator::with_intervals(Intervals {
            group_wait_ms: 1_000,
            group_interval_ms: 5 * MIN,
            repeat_interval_ms: 240 * MIN,
        })
    }

    fn missed(run: &str, flow: &str, held_by: &str) -> Raise {
        Raise {
            key: format!("deadline:{flow}:2026-12-04"),
            alertname: "MadeiraDeadlineMissed".into(),
            severity: Severity::Critical,
            flow: Some(flow.into()),
            node: None,
            labels: [("biz_date".to_string(), "2026-12-04".to_string())].into_iter().collect(),
            summary: format!("flow {flow}: not SUCCESS by 03:00"),
            description: None,
            run_id: Some(run.into()),
            fallback_note: None,
            held_by: Some(held_by.into()),
        }
    }

    #[test]
    fn held_runs_are_listed_on_the_failure_alert_and_a_new_one_is_one_update() {
        let mut agg = agg();
        let mut out = Changes::default();
        agg.failure(failure("a1", "payments-pull"), 0, &mut out);
        assert!(agg.held(held("b1", "warehouse-clean", "a1"), 10, &mut out));
        agg.flush_due(1_000, &mut out);
        let id = out.fire[0].clone();
        let alert = agg.get(&id).expect("open");
        assert_eq!(alert.holds.len(), 1, "the first message lists what is held already");
        assert_eq!((alert.holds_added, alert.announced_holds), (0, Some(1)));
        // Told twice (a failure and a creation may both see it): listed once.
        let mut out = Changes::default();
        assert!(agg.held(held("b1", "warehouse-clean", "a1"), 20, &mut out));
        assert!(out.touched.is_empty(), "nothing changed");
        // Another flow held behind it: one update, at group_interval after the firing.
        agg.held(held("c1", "finance-settle", "a1"), 2 * MIN, &mut out);
        agg.held(held("d1", "risk-report", "a1"), 3 * MIN, &mut out);
        agg.flush_due(5 * MIN, &mut out);
        assert!(out.update.is_empty());
        agg.flush_due(5 * MIN + 1_000, &mut out);
        assert_eq!(out.update, vec![id.clone()], "one update for both");
        let alert = agg.get(&id).expect("open");
        let flows: Vec<&str> = alert.holds.iter().map(|h| h.flow.as_str()).collect();
        assert_eq!(flows, ["warehouse-clean", "finance-settle", "risk-report"]);
        assert_eq!((alert.count, alert.added, alert.holds_added), (1, 0, 2));
        // The upstream's success resolves the alert, once.
        let mut out = Changes::default();
        agg.run_succeeded("a1", 6 * MIN, &mut out);
        assert_eq!(out.resolve, vec![id]);
        assert_eq!(out.removed[0].holds.len(), 3);
    }

    #[test]
    fn a_held_runs_missed_deadline_joins_the_failure_alert_instead_of_paging() {
        let mut agg = agg();
        let mut out = Changes::default();
        agg.failure(failure("a1", "payments-pull"), 0, &mut out);
        agg.held(held("b1", "warehouse-clean", "a1"), 0, &mut out);
        agg.flush_due(1_000, &mut out);
        let id = out.fire[0].clone();
        let mut out = Changes::default();
        agg.raise(missed("b1", "warehouse-clean", "a1"), 2 * MIN, &mut out);
        // One for a flow not told as held yet: listed with its miss.
        agg.raise(missed("c1", "finance-settle", "a1"), 2 * MIN, &mut out);
        assert_eq!(agg.open().count(), 1, "no alert of their own");
        agg.flush_due(5 * MIN + 1_000, &mut out);
        assert_eq!(out.update, vec![id.clone()]);
        let alert = agg.get(&id).expect("open");
        let labels: Vec<String> = alert.holds.iter().map(Hold::label).collect();
        assert_eq!(
            labels,
            ["warehouse-clean 2026-12-04 (deadline missed)", "finance-settle 2026-12-04 (deadline missed)"]
        );
        // With no failure alert open for its root run, a miss pages on its own.
        let mut out = Changes::default();
        agg.raise(missed("x1", "other", "gone"), 6 * MIN, &mut out);
        assert_eq!(agg.open().count(), 2);
        assert!(!agg.held(held("y1", "other", "gone"), 6 * MIN, &mut out), "nothing to list it on");
    }

    #[test]
    fn a_run_leaving_its_alert_takes_its_held_runs_along() {
        let mut agg = agg();
        let mut out = Changes::default();
        agg.failure(failure("a1", "payments-pull"), 0, &mut out);
        agg.failure(failure("a2", "payments-pull"), 0, &mut out);
        agg.held(held("b1", "warehouse-clean", "a1"), 0, &mut out);
        agg.held(held("b2", "warehouse-clean", "a2"), 0, &mut out);
        agg.flush_due(1_000, &mut out);
        let old = out.fire[0].clone();
        // a1 fails elsewhere after a rerun: it leaves (a2 still fails the old way).
        let mut moved = failure("a1", "payments-pull");
        moved.causes[0].node = "book".into();
        let mut out = Changes::default();
        agg.failure(moved, 2_000, &mut out);
        let new = agg.open().find(|a| a.id != old).map(|a| a.id.clone()).expect("a new alert");
        let holds = |id: &str| -> Vec<String> {
            agg.get(id).map(|a| a.holds.iter().map(|h| h.run_id.clone()).collect()).unwrap_or_default()
        };
        assert_eq!((holds(&old), holds(&new)), (vec!["b2".to_string()], vec!["b1".to_string()]));
        assert_eq!(agg.get(&new).map(|a| a.status), Some(AlertStatus::Pending));
    }
}
