//! Aggregation, pure and in memory: failures with the same grouping key (flow,
//! root-cause nodes, error class) join one open alert; a new alert waits
//! `group_wait` before it fires; a run that later succeeds is taken off the alerts
//! that counted it, and an alert with no failed run left resolves. Time is passed
//! in; the alert task persists what changed and sends what must be sent.

use std::collections::{BTreeSet, HashMap};

use crate::model::{Alert, AlertStatus, Cause, Failure, Raise, Severity};

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
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.touched.is_empty() && self.removed.is_empty() && self.fire.is_empty()
    }
}

#[derive(Debug)]
pub struct Aggregator {
    group_wait_ms: i64,
    alerts: HashMap<String, Alert>,
    by_key: HashMap<String, String>,
    by_run: HashMap<String, Vec<String>>,
    due: BTreeSet<(i64, String)>,
}

impl Aggregator {
    pub fn new(group_wait_ms: i64) -> Self {
        Self {
            group_wait_ms,
            alerts: HashMap::new(),
            by_key: HashMap::new(),
            by_run: HashMap::new(),
            due: BTreeSet::new(),
        }
    }

    pub fn get(&self, id: &str) -> Option<&Alert> {
        self.alerts.get(id)
    }

    pub fn open(&self) -> impl Iterator<Item = &Alert> {
        self.alerts.values()
    }

    /// When the next pending alert is due.
    pub fn next_due(&self) -> Option<i64> {
        self.due.first().map(|(at, _)| *at)
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
        self.alerts.insert(alert.id.clone(), alert);
    }

    /// A run ended FAILED.
    pub fn failure(&mut self, f: Failure, now: i64, out: &mut Changes) {
        let key = failure_key(&f);
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
            }
            out.touched.push(id);
            return;
        }
        let node = f.causes.iter().map(|c| c.node.as_str()).collect::<Vec<_>>().join(", ");
        let alert = self.new_alert(NewAlert {
            key,
            alertname: "MadeiraRunFailed",
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

    /// An alert from another source; grouped by its key while open.
    pub fn raise(&mut self, r: Raise, now: i64, out: &mut Changes) {
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
                self.close(&id, now, out);
            } else {
                out.touched.push(id);
            }
        }
    }

    /// Resolves the open alert with `key`, if any.
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

    /// Pending alerts whose group_wait ended become firing.
    pub fn flush_due(&mut self, now: i64, out: &mut Changes) {
        while let Some((at, id)) = self.due.first().cloned() {
            if at > now {
                break;
            }
            self.due.pop_first();
            if let Some(alert) = self.alerts.get_mut(&id) {
                alert.status = AlertStatus::Firing;
                alert.updated_at = now;
                out.touched.push(id.clone());
                out.fire.push(id);
            }
        }
    }

    fn close(&mut self, id: &str, now: i64, out: &mut Changes) {
        let Some(mut alert) = self.alerts.remove(id) else {
            return;
        };
        self.by_key.remove(&alert.key);
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

    #[test]
    fn error_class_ignores_numbers_and_case() {
        assert_eq!(error_class("HTTP 503 after 30012 ms\nstack"), "http # after # ms");
        assert_eq!(error_class("连接超时 10s"), "连接超时 #s");
    }
}
