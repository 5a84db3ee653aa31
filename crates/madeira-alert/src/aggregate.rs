//! Aggregation, pure and in memory: failures with the same grouping key (flow,
//! root-cause nodes, error class) join one open alert; a new alert waits
//! `group_wait` before it fires; a firing alert that grew is announced again at
//! most every `group_interval` (an update), and a critical one that did not is
//! reminded every `repeat_interval`; a run that later succeeds is taken off the
//! alerts that counted it, and an alert with no failed run left resolves. A run
//! is on one failure alert at a time: when it fails again with another root cause
//! (after a rerun or mark-success) its alert is updated, not paged anew (`moved`).
//! Runs of other flows held (`after`) behind a failed run are listed on that
//! run's alert (`holds`), each new one an update, and raise nothing of their own;
//! so is a parent run that failed with its child run (`subflows`).
//! Time is passed in; the alert task persists what changed and sends what must be sent.

use std::collections::{BTreeSet, HashMap};

use crate::model::{Alert, AlertStatus, Cause, Failure, Raise, Severity};

mod holds;
mod marks;
mod moved;
mod subflows;

pub use marks::MarkKind;

/// The alert name of a failed run.
const RUN_FAILED: &str = "MadeiraRunFailed";

/// What one or more events changed.
#[derive(Debug, Default)]
pub struct Changes {
    /// Alerts still open whose row must be written.
    pub touched: Vec<String>,
    /// Alerts that left memory as resolved (write them; send `resolved` for those in
    /// `resolve`).
    pub removed: Vec<Alert>,
    /// Alerts whose group_wait ended: send `firing`.
    pub fire: Vec<String>,
    /// Alerts resolved after they fired: send `resolved`.
    pub resolve: Vec<String>,
    /// Events that joined an alert already open (suppressed: grouped).
    pub grouped: Vec<String>,
    /// Firing alerts that grew since they were last announced: send `update`.
    pub update: Vec<String>,
    /// Critical alerts unresolved for `repeat_interval` since their last announcement:
    /// send `reminder`.
    pub remind: Vec<String>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.touched.is_empty() && self.removed.is_empty() && self.fire.is_empty()
    }
}

/// How often open alerts are announced again (`0`: never).
#[derive(Debug, Clone, Copy, Default)]
pub struct Intervals {
    pub group_wait_ms: i64,
    pub group_interval_ms: i64,
    pub repeat_interval_ms: i64,
}

#[derive(Debug)]
pub struct Aggregator {
    group_wait_ms: i64,
    group_interval_ms: i64,
    repeat_interval_ms: i64,
    alerts: HashMap<String, Alert>,
    by_key: HashMap<String, String>,
    by_run: HashMap<String, Vec<String>>,
    due: BTreeSet<(i64, String)>,
    /// Next update or reminder of firing alerts, and each one's entry in it.
    announce: BTreeSet<(i64, String)>,
    announce_at: HashMap<String, i64>,
}

impl Aggregator {
    /// Only `group_wait`: firing alerts are never announced again.
    pub fn new(group_wait_ms: i64) -> Self {
        Self::with_intervals(Intervals { group_wait_ms, ..Intervals::default() })
    }

    pub fn with_intervals(i: Intervals) -> Self {
        Self {
            group_wait_ms: i.group_wait_ms,
            group_interval_ms: i.group_interval_ms,
            repeat_interval_ms: i.repeat_interval_ms,
            alerts: HashMap::new(),
            by_key: HashMap::new(),
            by_run: HashMap::new(),
            due: BTreeSet::new(),
            announce: BTreeSet::new(),
            announce_at: HashMap::new(),
        }
    }

    pub fn get(&self, id: &str) -> Option<&Alert> {
        self.alerts.get(id)
    }

    pub fn open(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values()
    }

    /// When the next pending alert, update or reminder is due.
    pub fn next_due(&self) -> Option<i64> {
        let first = |set: &BTreeSet<(i64, String)>| set.first().map(|(at, _)| *at);
        match (first(&self.due), first(&self.announce)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When a firing alert is next announced: `group_interval` after its last
    /// announcement if it grew since, else (critical only) `repeat_interval` after it.
    fn next_announcement(&self, alert: &Alert) -> Option<i64> {
        if alert.status != AlertStatus::Firing {
            return None;
        }
        let last = alert.announced_at.unwrap_or(alert.notify_at);
        // A silence holds every announcement until it ends (`marks`).
        let not_before = alert.silenced.as_ref().and_then(|s| s.until).unwrap_or(i64::MIN);
        if grew(alert) && self.group_interval_ms > 0 {
            return Some(last.saturating_add(self.group_interval_ms).max(not_before));
        }
        // An acknowledged alert is not reminded of (`marks`).
        (alert.severity == Severity::Critical && self.repeat_interval_ms > 0 && alert.acknowledged.is_none())
            .then(|| last.saturating_add(self.repeat_interval_ms).max(not_before))
    }

    /// Puts the alert's next announcement in the schedule (or takes it out).
    fn reschedule(&mut self, id: &str) {
        if let Some(at) = self.announce_at.remove(id) {
            self.announce.remove(&(at, id.to_string()));
        }
        if let Some(at) = self.alerts.get(id).and_then(|a| self.next_announcement(a)) {
            self.announce.insert((at, id.to_string()));
            self.announce_at.insert(id.to_string(), at);
        }
    }

    /// Takes back an alert loaded from the store after a restart.
    pub fn restore(&mut self, alert: Alert) {
        match alert.status {
            AlertStatus::Resolved => return,
            AlertStatus::Pending => {
                self.due.insert((alert.notify_at, alert.id.clone()));
            }
            AlertStatus::Firing => {}
        }
        self.index(&alert);
        let id = alert.id.clone();
        self.alerts.insert(alert.id.clone(), alert);
        self.reschedule(&id);
    }

    /// A run ended FAILED.
    pub fn failure(&mut self, f: Failure, now: i64, out: &mut Changes) {
        let Some(f) = self.parent_failure(f, now, out) else { return };
        let key = failure_key(&f);
        let Some(f) = self.moved(f, &key, now, out) else { return };
        if let Some(id) = self.by_key.get(&key).cloned()
            && let Some(alert) = self.alerts.get_mut(&id)
        {
            alert.causes = f.causes;
            alert.updated_at = now;
            if !alert.runs.contains(&f.run_id) {
                alert.runs.push(f.run_id.clone());
                alert.count += 1;
                self.by_run.entry(f.run_id).or_default().push(id.clone());
                out.grouped.push(id.clone());
                self.reschedule(&id);
            }
            out.touched.push(id);
            return;
        }
        let node = f.causes.iter().map(|c| c.node.as_str()).collect::<Vec<_>>().join(", ");
        let alert = self.new_alert(NewAlert {
            key,
            alertname: RUN_FAILED,
            severity: Severity::Critical,
            summary: format!("flow {} failed: root cause {}", f.flow, describe_causes(&f.causes)),
            flow: Some(f.flow),
            node: (!node.is_empty()).then_some(node),
            labels: f.labels,
            description: None,
            causes: f.causes,
            run_id: Some(f.run_id),
            fallback_note: None,
            now,
        });
        self.insert_new(alert, out);
    }

    /// An alert from another source; grouped by its key while open. One about a
    /// run held behind a failed run (`held_by`) joins that run's failure alert.
    pub fn raise(&mut self, r: Raise, now: i64, out: &mut Changes) {
        let Some(r) = self.raise_held(r, now, out) else { return };
        if let Some(id) = self.by_key.get(&r.key).cloned()
            && let Some(alert) = self.alerts.get_mut(&id)
        {
            alert.count += 1;
            alert.updated_at = now;
            if let Some(run) = r.run_id
                && !alert.runs.contains(&run)
            {
                alert.runs.push(run.clone());
                self.by_run.entry(run).or_default().push(id.clone());
            }
            out.grouped.push(id.clone());
            self.reschedule(&id);
            out.touched.push(id);
            return;
        }
        let alert = self.new_alert(NewAlert {
            key: r.key,
            alertname: &r.alertname,
            severity: r.severity,
            summary: r.summary,
            flow: r.flow,
            node: r.node,
            labels: r.labels,
            description: r.description,
            causes: Vec::new(),
            run_id: r.run_id,
            fallback_note: r.fallback_note,
            now,
        });
        self.insert_new(alert, out);
    }

    /// A run ended SUCCESS: it no longer counts against the alerts that held it.
    pub fn run_succeeded(&mut self, run_id: &str, now: i64, out: &mut Changes) {
        // A parent listed on its failed child's alert: the child counts as fixed too.
        for child in self.children_of(run_id) {
            self.run_succeeded(&child, now, out);
        }
        let Some(ids) = self.by_run.remove(run_id) else {
            return;
        };
        for id in ids {
            let Some(alert) = self.alerts.get_mut(&id) else {
                continue;
            };
            let before = alert.runs.len();
            alert.runs.retain(|r| r != run_id);
            alert.fixed += (before - alert.runs.len()) as u64;
            alert.updated_at = now;
            if alert.runs.is_empty() {
                alert.resolved_by_run = Some(run_id.to_string());
                alert.moved = None;
                self.close(&id, now, out);
            } else {
                out.touched.push(id);
            }
        }
    }

    /// A later run (`run_id`) of a scheduled flow succeeded: the job works again,
    /// so the flow's open failure alerts resolve, naming that run.
    pub fn flow_recovered(&mut self, flow: &str, run_id: &str, now: i64, out: &mut Changes) {
        let ids: Vec<String> = self
            .alerts
            .values()
            .filter(|a| a.alertname == RUN_FAILED && a.flow.as_deref() == Some(flow))
            .map(|a| a.id.clone())
            .collect();
        for id in ids {
            if let Some(alert) = self.alerts.get_mut(&id) {
                alert.recovered_by = Some(run_id.to_string());
                alert.moved = None;
                alert.resolved_by_run = Some(run_id.to_string());
            }
            self.close(&id, now, out);
        }
    }

    /// Run `run_id` no longer counts on the open alert with `key` (a stalled or
    /// slow node moved on); the alert resolves when no run is left on it.
    pub fn leave(&mut self, key: &str, run_id: &str, now: i64, out: &mut Changes) {
        let Some(id) = self.by_key.get(key).cloned() else { return };
        let Some(alert) = self.alerts.get_mut(&id) else { return };
        if !alert.runs.iter().any(|r| r == run_id) {
            return;
        }
        alert.runs.retain(|r| r != run_id);
        alert.updated_at = now;
        let empty = alert.runs.is_empty();
        if let Some(ids) = self.by_run.get_mut(run_id) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.by_run.remove(run_id);
            }
        }
        if empty {
            self.close(&id, now, out);
        } else {
            out.touched.push(id);
        }
    }

    /// Resolves the open alert with `key`; a `fallback` cause makes its
    /// `resolved` message say the fallback ran (its `fallback_note`).
    pub fn resolve_key(&mut self, key: &str, cause: Option<&str>, now: i64, out: &mut Changes) {
        if let Some(id) = self.by_key.get(key).cloned() {
            if cause == Some("fallback")
                && let Some(alert) = self.alerts.get_mut(&id)
            {
                alert.resolution = alert.fallback_note.clone();
            }
            self.close(&id, now, out);
        }
    }

    /// Pending alerts whose group_wait ended become firing; firing ones whose
    /// update or reminder is due are announced again.
    pub fn flush_due(&mut self, now: i64, out: &mut Changes) {
        while let Some((at, id)) = self.due.first().cloned() {
            if at > now {
                break;
            }
            self.due.pop_first();
            if let Some(alert) = self.alerts.get_mut(&id) {
                alert.status = AlertStatus::Firing;
                alert.updated_at = now;
                alert.announced_at = Some(now);
                alert.announced_count = Some(alert.count);
                alert.added = 0;
                alert.announced_holds = Some(alert.holds_changes);
                alert.holds_added = 0;
                out.touched.push(id.clone());
                out.fire.push(id.clone());
                self.reschedule(&id);
            }
        }
        while let Some((at, id)) = self.announce.first().cloned() {
            if at > now {
                break;
            }
            self.announce.pop_first();
            self.announce_at.remove(&id);
            if let Some(alert) = self.alerts.get_mut(&id) {
                let before = alert.announced_count.unwrap_or(alert.count);
                alert.added = alert.count.saturating_sub(before);
                alert.announced_at = Some(now);
                alert.announced_count = Some(alert.count);
                let holds_before = alert.announced_holds.unwrap_or(alert.holds_changes);
                alert.holds_added = alert.holds_changes.saturating_sub(holds_before);
                alert.announced_holds = Some(alert.holds_changes);
                alert.updated_at = now;
                alert.moved = None;
                out.touched.push(id.clone());
                if alert.added > 0 || alert.holds_added > 0 {
                    out.update.push(id.clone());
                } else {
                    out.remind.push(id.clone());
                }
                self.reschedule(&id);
            }
        }
    }

    fn close(&mut self, id: &str, now: i64, out: &mut Changes) {
        let Some(mut alert) = self.alerts.remove(id) else {
            return;
        };
        self.by_key.remove(&alert.key);
        if let Some(at) = self.announce_at.remove(id) {
            self.announce.remove(&(at, id.to_string()));
        }
        for run in &alert.runs {
            if let Some(ids) = self.by_run.get_mut(run) {
                ids.retain(|i| i != id);
                if ids.is_empty() {
                    self.by_run.remove(run);
                }
            }
        }
        if alert.status == AlertStatus::Pending {
            self.due.remove(&(alert.notify_at, alert.id.clone()));
        } else {
            out.resolve.push(alert.id.clone());
        }
        alert.status = AlertStatus::Resolved;
        alert.resolved_at = Some(now);
        alert.updated_at = now;
        out.removed.push(alert);
    }

    fn new_alert(&self, n: NewAlert<'_>) -> Alert {
        Alert {
            id: uuid::Uuid::now_v7().to_string(),
            key: n.key,
            alertname: n.alertname.to_string(),
            severity: n.severity,
            status: AlertStatus::Pending,
            flow: n.flow,
            node: n.node,
            labels: n.labels,
            summary: n.summary,
            description: n.description,
            causes: n.causes,
            runs: n.run_id.into_iter().collect(),
            count: 1,
            fixed: 0,
            created_at: n.now,
            notify_at: n.now + self.group_wait_ms,
            updated_at: n.now,
            resolved_at: None,
            fallback_note: n.fallback_note,
            resolution: None,
            recovered_by: None,
            resolved_by_run: None,
            moved: None,
            announced_at: None,
            announced_count: None,
            acknowledged: None,
            silenced: None,
            added: 0,
            holds: Vec::new(),
            holds_changes: 0,
            announced_holds: None,
            holds_added: 0,
        }
    }

    fn insert_new(&mut self, alert: Alert, out: &mut Changes) {
        self.due.insert((alert.notify_at, alert.id.clone()));
        self.index(&alert);
        out.touched.push(alert.id.clone());
        self.alerts.insert(alert.id.clone(), alert);
    }

    fn index(&mut self, alert: &Alert) {
        self.by_key.insert(alert.key.clone(), alert.id.clone());
        for run in &alert.runs {
            self.by_run.entry(run.clone()).or_default().push(alert.id.clone());
        }
    }
}

struct NewAlert<'a> {
    key: String,
    alertname: &'a str,
    severity: Severity,
    summary: String,
    flow: Option<String>,
    node: Option<String>,
    labels: std::collections::BTreeMap<String, String>,
    description: Option<String>,
    causes: Vec<Cause>,
    run_id: Option<String>,
    fallback_note: Option<String>,
    now: i64,
}

/// Whether a firing alert changed since it was last announced: more runs, or
/// more (or changed) runs held behind them.
fn grew(alert: &Alert) -> bool {
    alert.count > alert.announced_count.unwrap_or(alert.count)
        || alert.holds_changes > alert.announced_holds.unwrap_or(alert.holds_changes)
}

fn describe_causes(causes: &[Cause]) -> String {
    if causes.is_empty() {
        return "unknown".into();
    }
    causes
        .iter()
        .map(|c| {
            format!("node {} ({} attempt{})", c.node, c.attempts, if c.attempts == 1 { "" } else { "s" })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn failure_key(f: &Failure) -> String {
    let causes: Vec<String> = f
        .causes
        .iter()
        .map(|c| format!("{}:{}", c.node, error_class(c.error.as_deref().unwrap_or(""))))
        .collect();
    format!("run_failed|{}|{}", f.flow, causes.join(","))
}

/// The class of an error message: its first line, lowercased, every run of digits
/// collapsed to `#`, at most 120 characters — so "HTTP 503 after 30012 ms" and
/// "HTTP 502 after 29870 ms" are the same class.
pub fn error_class(error: &str) -> String {
    let line = error.lines().next().unwrap_or("").trim();
    let mut class = String::with_capacity(line.len().min(120));
    let mut in_digits = false;
    for ch in line.chars().take(120) {
        if ch.is_ascii_digit() {
            if !in_digits {
                class.push('#');
            }
            in_digits = true;
        } else {
            in_digits = false;
            class.extend(ch.to_lowercase());
        }
    }
    class
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(run: &str, node: &str, error: &str) -> Failure {
        Failure {
            run_id: run.into(),
            flow: "settle".into(),
            labels: Default::default(),
            causes: vec![Cause {
                node: node.into(),
                error: Some(error.into()),
                attempts: 3,
                skipped: vec![],
            }],
        }
    }

    #[test]
    fn same_node_and_error_class_group_into_one_alert_until_group_wait() {
        let mut agg = Aggregator::new(1_000);
        let mut out = Changes::default();
        agg.failure(failure("r1", "pull", "HTTP 503 after 30 ms"), 0, &mut out);
        agg.failure(failure("r2", "pull", "HTTP 502 after 41 ms"), 500, &mut out);
        agg.failure(failure("r3", "pull", "disk full"), 600, &mut out);
        assert_eq!(out.grouped.len(), 1);
        agg.flush_due(999, &mut out);
        assert!(out.fire.is_empty());
        agg.flush_due(1_000, &mut out);
        assert_eq!(out.fire.len(), 1);
        let alert = agg.get(&out.fire[0]).expect("alert");
        assert_eq!((alert.count, alert.runs.len(), alert.status), (2, 2, AlertStatus::Firing));
        agg.flush_due(1_600, &mut out);
        assert_eq!(out.fire.len(), 2, "the other error class is its own alert");
    }

    #[test]
    fn resolves_once_every_counted_run_succeeded_and_drops_unsent_ones_quietly() {
        let mut agg = Aggregator::new(1_000);
        let mut out = Changes::default();
        agg.failure(failure("r1", "pull", "boom"), 0, &mut out);
        agg.failure(failure("r2", "pull", "boom"), 1, &mut out);
        agg.flush_due(1_000, &mut out);
        agg.run_succeeded("r1", 2_000, &mut out);
        assert!(out.resolve.is_empty());
        agg.run_succeeded("r2", 3_000, &mut out);
        assert_eq!(out.resolve.len(), 1);
        assert_eq!(out.removed[0].fixed, 2);
        assert_eq!(out.removed[0].resolved_at, Some(3_000));

        let mut out = Changes::default();
        agg.failure(failure("r3", "pull", "boom"), 4_000, &mut out);
        agg.run_succeeded("r3", 4_500, &mut out);
        assert!(out.resolve.is_empty(), "never sent, so no resolved message");
        assert_eq!(out.removed.len(), 1);
        assert_eq!(agg.next_due(), None);
    }

    /// A scheduled job that failed and then ran fine: its next run's success
    /// resolves the failure alert, which names that run; other flows' stay.
    #[test]
    fn a_later_success_of_the_flow_resolves_its_failure_alerts() {
        let mut agg = Aggregator::new(1_000);
        let mut out = Changes::default();
        agg.failure(failure("r1", "pull", "boom"), 0, &mut out);
        let mut other = failure("o1", "pull", "boom");
        other.flow = "other".into();
        agg.failure(other, 0, &mut out);
        agg.flush_due(1_000, &mut out);
        assert_eq!(out.fire.len(), 2);
        let mut out = Changes::default();
        agg.flow_recovered("settle", "r2", 2_000, &mut out);
        assert_eq!(out.resolve.len(), 1, "one resolved message");
        assert_eq!(out.removed[0].flow.as_deref(), Some("settle"));
        assert_eq!(out.removed[0].recovered_by.as_deref(), Some("r2"));
        let text = crate::render::render(
            &crate::render::Content::Resolved(std::sync::Arc::new(out.removed[0].clone())),
            None,
        )
        .plain();
        assert!(text.contains("a later run of the flow succeeded (r2)"), "{text}");
        agg.flow_recovered("settle", "r3", 3_000, &mut out);
        assert_eq!(out.resolve.len(), 1, "nothing left to resolve");
    }

    const MIN: i64 = 60_000;

    fn intervals() -> Aggregator {
        Aggregator::with_intervals(Intervals {
            group_wait_ms: 1_000,
            group_interval_ms: 5 * MIN,
            repeat_interval_ms: 240 * MIN,
        })
    }

    #[test]
    fn a_grown_alert_is_updated_at_most_every_group_interval_with_its_new_count() {
        let mut agg = intervals();
        let mut out = Changes::default();
        agg.failure(failure("r1", "pull", "boom"), 0, &mut out);
        agg.flush_due(1_000, &mut out);
        assert_eq!(out.fire.len(), 1);
        let id = out.fire[0].clone();
        for (i, at) in [(2, MIN), (3, 2 * MIN), (4, 3 * MIN)] {
            agg.failure(failure(&format!("r{i}"), "pull", "boom"), at, &mut out);
        }
        agg.flush_due(5 * MIN, &mut out);
        assert!(out.update.is_empty(), "not before group_interval after the first message");
        assert_eq!(agg.next_due(), Some(5 * MIN + 1_000));
        agg.flush_due(5 * MIN + 1_000, &mut out);
        assert_eq!(out.update, vec![id.clone()]);
        let alert = agg.get(&id).expect("open");
        assert_eq!((alert.count, alert.added, alert.latest_run()), (4, 3, Some("r4")));
        // Nothing new: the next announcement is the reminder, 4h after the update.
        let mut out = Changes::default();
        agg.flush_due(100 * MIN, &mut out);
        assert!(out.update.is_empty() && out.remind.is_empty());
        // A failure long after the last message is announced at once.
        agg.failure(failure("r5", "pull", "boom"), 120 * MIN, &mut out);
        agg.flush_due(120 * MIN, &mut out);
        assert_eq!((out.update.len(), agg.get(&id).map(|a| a.added)), (1, Some(1)));
    }

    #[test]
    fn critical_alerts_are_reminded_every_repeat_interval_and_warnings_are_not() {
        let mut agg = intervals();
        let mut out = Changes::default();
        agg.failure(failure("r1", "pull", "boom"), 0, &mut out);
        let warning = Raise {
            key: "lost|billing".into(),
            alertname: "MadeiraSidecarLost".into(),
            severity: Severity::Warning,
            flow: None,
            node: None,
            labels: Default::default(),
            summary: "lost".into(),
            description: None,
            run_id: None,
            fallback_note: None,
            held_by: None,
        };
        agg.raise(warning, 0, &mut out);
        agg.flush_due(1_000, &mut out);
        assert_eq!(out.fire.len(), 2);
        let mut out = Changes::default();
        agg.flush_due(240 * MIN + 999, &mut out);
        assert!(out.remind.is_empty());
        agg.flush_due(240 * MIN + 1_000, &mut out);
        assert_eq!(out.remind.len(), 1, "only the critical one");
        let alert = agg.get(&out.remind[0]).expect("open");
        assert_eq!(
            (alert.severity, alert.added, alert.announced_at),
            (Severity::Critical, 0, Some(240 * MIN + 1_000))
        );
        assert_eq!(agg.next_due(), Some(480 * MIN + 1_000));
    }

    #[test]
    fn a_restored_alert_keeps_its_schedule_so_a_new_leader_neither_repeats_nor_forgets() {
        let mut agg = intervals();
        let mut out = Changes::default();
        agg.failure(failure("r1", "pull", "boom"), 0, &mut out);
        agg.flush_due(1_000, &mut out);
        agg.failure(failure("r2", "pull", "boom"), 2 * MIN, &mut out);
        let stored = agg.get(&out.fire[0]).expect("open").clone();
        // The row as written, read back by another replica's aggregator.
        let row = stored.to_row();
        let mut next = intervals();
        next.restore(Alert::from_row(&row).expect("row"));
        assert_eq!(next.next_due(), Some(5 * MIN + 1_000), "the update still due, not sent again at once");
        let mut out = Changes::default();
        next.flush_due(5 * MIN + 1_000, &mut out);
        assert_eq!(out.update.len(), 1);
        let row = next.get(&out.update[0]).expect("open").to_row();
        let mut third = intervals();
        third.restore(Alert::from_row(&row).expect("row"));
        let mut out = Changes::default();
        third.flush_due(6 * MIN, &mut out);
        assert!(out.update.is_empty() && out.remind.is_empty(), "the update is not repeated");
        assert_eq!(third.next_due(), Some(245 * MIN + 1_000));
    }

    #[test]
    fn error_class_ignores_numbers_and_case() {
        assert_eq!(error_class("HTTP 503 after 30012 ms\nstack"), "http # after # ms");
        assert_eq!(error_class("连接超时 10s"), "连接超时 #s");
    }
}
