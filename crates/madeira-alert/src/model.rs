//! The alert as data: severity, lifecycle status, the root causes it names, the
//! runs it counts and the runs of other flows held behind them; the events that
//! feed aggregation; conversion to and from the store's rows.

use std::collections::BTreeMap;
use std::fmt;

use madeira_store::AlertRow;
use serde::{Deserialize, Serialize};

use crate::AlertError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `Pending` gathers related failures until `notify_at`; `Firing` was sent;
/// `Resolved` is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStatus {
    Pending,
    Firing,
    Resolved,
}

impl AlertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Pending => "pending",
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

/// A root cause as the alert shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    pub node: String,
    pub error: Option<String>,
    pub attempts: u32,
    /// Nodes skipped because this one failed.
    pub skipped: Vec<String>,
}

/// One alert: a group of failures with one root cause (or another source).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub id: String,
    /// Grouping key: failures with the same key join the open alert.
    pub key: String,
    /// `MadeiraRunFailed`, `MadeiraConfirmOverdue`, `MadeiraCronMissed`, ...
    pub alertname: String,
    pub severity: Severity,
    pub status: AlertStatus,
    pub flow: Option<String>,
    pub node: Option<String>,
    /// The flow's labels (routing and Alertmanager labels).
    pub labels: BTreeMap<String, String>,
    pub summary: String,
    /// Free text for non-run sources.
    pub description: Option<String>,
    /// Root causes, as seen in the latest failed run.
    pub causes: Vec<Cause>,
    /// Failed runs counted by this alert that have not succeeded since.
    pub runs: Vec<String>,
    /// Events grouped into this alert (failed runs, overdue confirmations...).
    pub count: u64,
    /// Runs of `runs` that later succeeded (rerun, mark-success).
    pub fixed: u64,
    pub created_at: i64,
    pub notify_at: i64,
    pub updated_at: i64,
    pub resolved_at: Option<i64>,
    /// From the raise: the `resolved` message when a fallback ends it.
    #[serde(default)]
    pub fallback_note: Option<String>,
    /// Set when it was resolved by a fallback: what the `resolved` message says.
    #[serde(default)]
    pub resolution: Option<String>,
    /// Set when a later run of the flow succeeded (a scheduled job that works
    /// again): that run's id, named by the `resolved` message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_by: Option<String>,
    /// The run whose success resolved it (a rerun, a mark-success, a later run):
    /// a `resolved` payload links it when no failed run is left on the alert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by_run: Option<String>,
    /// What a run's later failure changed (after a rerun or mark-success of that
    /// run, its root cause moved or is new): said by the next message — the
    /// `update` of the alert that followed the run, the `firing` of the alert the
    /// run moved to, or the `resolved` of the alert it left. Cleared by the next
    /// update or reminder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<String>,
    /// When it was last announced (the first `firing` message, an update or a
    /// reminder). Kept in the store so a new alert leader neither repeats nor
    /// forgets the next update (`None` before it fired).
    #[serde(default)]
    pub announced_at: Option<i64>,
    /// `count` as of that announcement (`None`: as `count`, for alerts stored before
    /// updates existed).
    #[serde(default)]
    pub announced_count: Option<u64>,
    /// Events grouped into it between the previous announcement and the latest
    /// (what an update message reports as new; 0 for a first message or a reminder).
    #[serde(default)]
    pub added: u64,
    /// Someone took it on: no more reminders (updates when it grows still go out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged: Option<Mark>,
    /// Muted until `Mark::until`: no update or reminder before then (its
    /// resolution is still sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silenced: Option<Mark>,
    /// Runs of other flows held (`after`) behind the failed runs it counts, in
    /// the order they were told; its messages list them ("holds: …").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<Hold>,
    /// Changes to `holds` so far (a run newly held, a held run's missed deadline).
    #[serde(default)]
    pub holds_changes: u64,
    /// `holds_changes` as of the last announcement (`None`: as `holds_changes`).
    #[serde(default)]
    pub announced_holds: Option<u64>,
    /// Hold changes between the previous announcement and the latest (as `added`).
    #[serde(default)]
    pub holds_added: u64,
}

/// A run of another flow held behind a failed run an alert counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub flow: String,
    pub biz_date: String,
    pub run_id: String,
    /// The failed run it is held behind (one of the alert's runs).
    pub root_run: String,
    /// Its deadline passed while it was held: what the deadline check said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_missed: Option<String>,
    /// Not a held run but the parent whose `run: {flow}` node (this one) started
    /// the failed child run `root_run`: the parent's failure joined the child's alert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_node: Option<String>,
}

impl Hold {
    /// `warehouse-clean 2026-12-04` (with `, deadline missed` once it is), or a
    /// parent's `orders 2026-12-04 (parent: its node charge failed with it)`.
    pub fn label(&self) -> String {
        if let Some(node) = &self.parent_node {
            return format!("{} {} (parent: its node {node} failed with it)", self.flow, self.biz_date);
        }
        let missed = if self.deadline_missed.is_some() { " (deadline missed)" } else { "" };
        format!("{} {}{missed}", self.flow, self.biz_date)
    }
}

/// A run held behind a failed run (`madeira_engine::HeldRun`), as aggregation
/// takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub run_id: String,
    pub flow: String,
    pub biz_date: String,
    pub root_run: String,
    pub root_flow: String,
    #[serde(default)]
    pub root_node: Option<String>,
}

/// An operator's acknowledgement or silence of an alert: who, when, why, and
/// (a silence) until when. Audited where it is asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub by: String,
    pub at: i64,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
}

impl Alert {
    pub fn to_row(&self) -> AlertRow {
        AlertRow {
            id: self.id.clone(),
            key: self.key.clone(),
            severity: self.severity.as_str().to_string(),
            status: self.status.as_str().to_string(),
            flow: self.flow.clone(),
            node: self.node.clone(),
            details: serde_json::to_value(self).unwrap_or_default(),
            created_at: self.created_at,
            notify_at: self.notify_at,
            updated_at: self.updated_at,
            resolved_at: self.resolved_at,
        }
    }

    pub fn from_row(row: &AlertRow) -> Result<Self, AlertError> {
        serde_json::from_value(row.details.clone())
            .map_err(|e| AlertError::Corrupt { id: row.id.clone(), detail: e.to_string() })
    }

    /// The most recent failed run still outstanding.
    pub fn latest_run(&self) -> Option<&str> {
        self.runs.last().map(String::as_str)
    }

    /// The run a message links: the newest failed run still on it, else the run
    /// whose success resolved it.
    pub fn link_run(&self) -> Option<&str> {
        self.latest_run().or(self.resolved_by_run.as_deref())
    }
}

/// A run that ended FAILED, reduced to what aggregation needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    pub run_id: String,
    pub flow: String,
    pub labels: BTreeMap<String, String>,
    pub causes: Vec<Cause>,
}

/// An alert from another source (overdue confirmation, missed cron run, lost
/// sidecar): events with the same `key` are grouped while it is open.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Raise {
    pub key: String,
    pub alertname: String,
    pub severity: Severity,
    pub flow: Option<String>,
    pub node: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub summary: String,
    pub description: Option<String>,
    /// The run concerned, if any (named in the message and its links).
    pub run_id: Option<String>,
    /// What the `resolved` message says when a fallback ended the condition
    /// (an overdue confirmation whose `fallback_after` ran the fallback).
    #[serde(default)]
    pub fallback_note: Option<String>,
    /// The FAILED run that holds `run_id` (`after`) and is its root cause: the
    /// alert joins that run's failure alert, listed under its holds, when one is
    /// open (a held flow does not page on its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
}
