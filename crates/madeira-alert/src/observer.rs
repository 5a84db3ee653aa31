//! `AlertObserver`: the engine's hooks turned into alert events, without blocking
//! the engine (an unbounded send; on a shared store they are written to the alert
//! inbox in the engine's own commit instead). A FAILED run becomes a failure with
//! its root causes; a SUCCESS run may resolve alerts that counted it; a confirmation past
//! `alert_after` raises a warning that an answer resolves; a cron tick that made
//! no run raises a critical alert that the flow's next success resolves; a node
//! stalled in INIT past its `stall_after` or RUNNING past its `warn_after` raises
//! a warning per flow and node that resolves once no run of it is still stuck
//! (these come from the engine's watch, not a commit: they go through the channel
//! on a shared store too, to its inbox within a cluster tick). A run held behind
//! a failed upstream run (`after`) is told as `Held`, listed on that run's
//! failure alert; its missed deadline carries `held_by` to join that alert.

use madeira_core::rootcause::root_causes;
use madeira_core::{RunSnapshot, RunState};
use madeira_engine::{AlertSource, BusinessAlert, EngineObserver, HeldRun, NodeWatch, RunEvent};
use tokio::sync::mpsc;

use crate::model::{Cause, Failure, Held, Raise, Severity};
use crate::task::{Event, Input};

pub struct AlertObserver {
    pub(crate) tx: mpsc::UnboundedSender<Input>,
    /// On a shared store: run ends and confirmations go to the alert inbox inside
    /// the engine's commit (`alert_event`), not through this process's channel.
    pub(crate) through_commit: bool,
}

impl AlertObserver {
    /// A FAILED run's failure; a SUCCESS run's success (and, for an observe-only
    /// flow, the end of its missed-run warning).
    fn run_events(snap: &RunSnapshot) -> Vec<Event> {
        let scheduled = snap.flow.observe
            || snap.flow.triggers.iter().any(|t| matches!(t, madeira_core::TriggerDef::Cron(_)));
        let recovers = scheduled.then(|| snap.flow.name.clone());
        match snap.state {
            RunState::Failed => vec![Event::Failed(failure_of(snap))],
            RunState::Success if snap.flow.observe => vec![
                Event::Succeeded { run_id: snap.run_id.clone(), recovers: recovers.clone() },
                Event::Resolve { key: missed_key(&snap.flow.name), cause: None },
            ],
            // A cron flow's success ends its "tick made no run" alert.
            RunState::Success
                if snap.flow.triggers.iter().any(|t| matches!(t, madeira_core::TriggerDef::Cron(_))) =>
            {
                vec![
                    Event::Succeeded { run_id: snap.run_id.clone(), recovers: recovers.clone() },
                    Event::Resolve { key: cron_key(&snap.flow.name), cause: None },
                ]
            }
            RunState::Success => {
                vec![Event::Succeeded { run_id: snap.run_id.clone(), recovers: recovers.clone() }]
            }
            _ => Vec::new(),
        }
    }

    fn missed_event(flow: &str, scheduled_at_ms: i64, what: &str) -> Event {
        let at = chrono::DateTime::from_timestamp_millis(scheduled_at_ms)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        Event::Raise(Box::new(Raise {
            key: missed_key(flow),
            alertname: "MadeiraMissedRun".into(),
            severity: Severity::Warning,
            flow: Some(flow.to_string()),
            node: None,
            labels: Default::default(),
            summary: format!("flow {flow}: the run scheduled at {at} {what}"),
            description: None,
            run_id: None,
            fallback_note: None,
            held_by: None,
        }))
    }

    fn business_event(alert: &BusinessAlert<'_>) -> Event {
        let labels = match alert.biz_date {
            "" => Default::default(),
            date => [("biz_date".to_string(), date.to_string())].into_iter().collect(),
        };
        Event::Raise(Box::new(Raise {
            key: alert.key.to_string(),
            alertname: alert.alertname.to_string(),
            severity: if alert.critical { Severity::Critical } else { Severity::Warning },
            flow: Some(alert.flow.to_string()),
            node: alert.node.map(str::to_string),
            labels,
            summary: alert.summary.to_string(),
            description: None,
            run_id: alert.run_id.map(str::to_string),
            fallback_note: None,
            held_by: alert.held_by.map(str::to_string),
        }))
    }

    fn held_event(h: &HeldRun<'_>) -> Event {
        Event::Held(Held {
            run_id: h.run_id.to_string(),
            flow: h.flow.to_string(),
            biz_date: h.biz_date.to_string(),
            root_run: h.root_run.to_string(),
            root_flow: h.root_flow.to_string(),
            root_node: h.root_node.map(str::to_string),
        })
    }

    fn cron_event(flow: &str, scheduled_at_ms: i64, error: &str) -> Event {
        let at = chrono::DateTime::from_timestamp_millis(scheduled_at_ms)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        Event::Raise(Box::new(Raise {
            key: cron_key(flow),
            alertname: "MadeiraCronRunNotCreated".into(),
            severity: Severity::Critical,
            flow: Some(flow.to_string()),
            node: None,
            labels: Default::default(),
            summary: format!("flow {flow}: the cron tick at {at} made no run: {error}"),
            description: None,
            run_id: None,
            fallback_note: None,
            held_by: None,
        }))
    }

    fn overdue_event(snap: &RunSnapshot, node: &str) -> Event {
        let manual = snap.flow.node_index(node).and_then(|i| match &snap.flow.nodes[i].action {
            madeira_core::NodeAction::Manual(m) => Some(m),
            _ => None,
        });
        let prompt = manual.map(|m| {
            madeira_core::prompt::render(&m.prompt, |path| madeira_core::prompt::lookup_in(snap, path))
        });
        let fallback_note =
            manual.filter(|m| m.fallback.is_some()).and_then(|m| m.fallback_after).map(|after| {
                format!(
                    "no one confirmed within {}: the fallback ran, check its result",
                    short_duration(after)
                )
            });
        Event::Raise(Box::new(Raise {
            key: confirm_key(&snap.run_id, node),
            alertname: "MadeiraConfirmOverdue".into(),
            severity: Severity::Warning,
            flow: Some(snap.flow.name.clone()),
            node: Some(node.to_string()),
            labels: snap.flow.labels.clone(),
            summary: format!(
                "flow {}: node {node} is waiting for a confirmation past its alert_after",
                snap.flow.name
            ),
            description: prompt,
            run_id: Some(snap.run_id.clone()),
            fallback_note,
            held_by: None,
        }))
    }
}

impl AlertObserver {
    fn watch_event(w: &NodeWatch<'_>, slow: bool) -> Event {
        let key = if slow { slow_key(w.flow, w.node) } else { stall_key(w.flow, w.node) };
        if !w.active {
            return Event::Leave { key, run_id: w.run_id.to_string() };
        }
        let after = short_duration(w.after);
        let (alertname, summary) = if slow {
            (
                "MadeiraNodeSlow",
                format!(
                    "flow {}: node {} has been RUNNING for more than {after} (its warn_after); it is not stopped",
                    w.flow, w.node
                ),
            )
        } else {
            let why = w.reason.map(|r| format!(": {r}")).unwrap_or_default();
            (
                "MadeiraNodeStalled",
                format!(
                    "flow {}: node {} has waited in INIT for its executor for more than {after}{why}",
                    w.flow, w.node
                ),
            )
        };
        Event::Raise(Box::new(Raise {
            key,
            alertname: alertname.into(),
            severity: Severity::Warning,
            flow: Some(w.flow.to_string()),
            node: Some(w.node.to_string()),
            labels: w.labels.clone(),
            summary,
            description: None,
            run_id: Some(w.run_id.to_string()),
            fallback_note: None,
            held_by: None,
        }))
    }
}

/// The grouping key of a flow's node stalled in INIT (open while a run of it is).
pub fn stall_key(flow: &str, node: &str) -> String {
    format!("node_stalled|{flow}|{node}")
}

/// The grouping key of a flow's node running past its `warn_after`.
pub fn slow_key(flow: &str, node: &str) -> String {
    format!("node_slow|{flow}|{node}")
}

/// `36h`, `90m`, `45s`: the largest whole unit.
fn short_duration(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0 => format!("{}ms", d.as_millis()),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// The grouping key of a flow's missed cron runs (open until a run of it succeeds).
pub fn missed_key(flow: &str) -> String {
    format!("missed_run|{flow}")
}

/// The grouping key of a flow's cron ticks that made no run (open until a run of it succeeds).
pub fn cron_key(flow: &str) -> String {
    format!("cron_not_created|{flow}")
}

/// The grouping key of an overdue confirmation.
pub fn confirm_key(run_id: &str, node: &str) -> String {
    format!("confirm_overdue|{run_id}|{node}")
}

/// What aggregation needs of a FAILED run.
pub fn failure_of(snap: &RunSnapshot) -> Failure {
    Failure {
        run_id: snap.run_id.clone(),
        flow: snap.flow.name.clone(),
        labels: {
            let mut labels = snap.flow.labels.clone();
            if let Some(date) = &snap.biz_date {
                labels.insert("biz_date".into(), date.clone());
            }
            labels
        },
        causes: root_causes(snap)
            .into_iter()
            .map(|c| Cause { node: c.node, error: c.error, attempts: c.attempts, skipped: c.skipped })
            .collect(),
    }
}

impl EngineObserver for AlertObserver {
    fn run_finished(&self, snap: &RunSnapshot) {
        if !self.through_commit {
            for event in Self::run_events(snap) {
                let _ = self.tx.send(Input::Event(event));
            }
        }
    }

    fn observed_missed(&self, flow: &str, scheduled_at_ms: i64, what: &str) {
        if !self.through_commit {
            let _ = self.tx.send(Input::Event(Self::missed_event(flow, scheduled_at_ms, what)));
        }
    }

    fn cron_not_created(&self, flow: &str, scheduled_at_ms: i64, error: &str) {
        if !self.through_commit {
            let _ = self.tx.send(Input::Event(Self::cron_event(flow, scheduled_at_ms, error)));
        }
    }

    fn business_alert(&self, alert: &BusinessAlert<'_>) {
        if !self.through_commit {
            let _ = self.tx.send(Input::Event(Self::business_event(alert)));
        }
    }

    fn run_held(&self, held: &HeldRun<'_>) {
        if !self.through_commit {
            let _ = self.tx.send(Input::Event(Self::held_event(held)));
        }
    }

    fn confirm_overdue(&self, snap: &RunSnapshot, node: &str) {
        if !self.through_commit {
            let _ = self.tx.send(Input::Event(Self::overdue_event(snap, node)));
        }
    }

    fn node_stalled(&self, watch: &NodeWatch<'_>) {
        let _ = self.tx.send(Input::Event(Self::watch_event(watch, false)));
    }

    fn node_slow(&self, watch: &NodeWatch<'_>) {
        let _ = self.tx.send(Input::Event(Self::watch_event(watch, true)));
    }

    fn transitions(&self, events: &[RunEvent]) {
        if self.through_commit {
            return;
        }
        for e in events {
            if e.from == "MANUAL_CONFIRM"
                && let Some(node) = &e.node
            {
                let key = confirm_key(&e.run_id, node);
                let _ = self.tx.send(Input::Event(Event::Resolve { key, cause: Some(e.cause.clone()) }));
            }
        }
    }

    fn alert_events(&self, source: AlertSource<'_>) -> Vec<String> {
        if !self.through_commit {
            return Vec::new();
        }
        let events = match source {
            AlertSource::RunFinished(snap) => Self::run_events(snap),
            AlertSource::ConfirmOverdue(snap, node) => vec![Self::overdue_event(snap, node)],
            AlertSource::ConfirmLeft { run_id, node, cause } => {
                vec![Event::Resolve { key: confirm_key(run_id, node), cause: Some(cause.to_string()) }]
            }
            AlertSource::ObservedMissed { flow, scheduled_at_ms, what } => {
                vec![Self::missed_event(flow, scheduled_at_ms, what)]
            }
            AlertSource::CronNotCreated { flow, scheduled_at_ms, error } => {
                vec![Self::cron_event(flow, scheduled_at_ms, error)]
            }
            AlertSource::Business(alert) => vec![Self::business_event(&alert)],
            AlertSource::Held(held) => vec![Self::held_event(&held)],
        };
        events
            .iter()
            .filter_map(|event| match serde_json::to_string(event) {
                Ok(text) => Some(text),
                Err(e) => {
                    tracing::error!(error = %e, "cannot encode an alert event");
                    None
                }
            })
            .collect()
    }
}
