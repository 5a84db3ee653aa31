//! `AlertObserver`: the engine's hooks turned into alert events, without blocking
//! the engine (an unbounded send; on a shared store they are written to the alert
//! inbox in the engine's own commit instead). A FAILED run becomes a failure with
//! its root causes; a SUCCESS run may resolve alerts that counted it; a confirmation past
//! `alert_after` raises a warning that an answer resolves.

use madeira_core::rootcause::root_causes;
use madeira_core::{RunSnapshot, RunState};
use madeira_engine::{AlertSource, EngineObserver, RunEvent};
use tokio::sync::mpsc;

use crate::model::{Cause, Failure, Raise, Severity};
use crate::task::{Event, Input};

pub struct AlertObserver {
    pub(crate) tx: mpsc::UnboundedSender<Input>,
    /// On a shared store: run ends and confirmations go to the alert inbox inside
    /// the engine's commit (`alert_event`), not through this process's channel.
    pub(crate) through_commit: bool,
}

impl AlertObserver {
    fn run_event(snap: &RunSnapshot) -> Option<Event> {
        match snap.state {
            RunState::Failed => Some(Event::Failed(failure_of(snap))),
            RunState::Success => Some(Event::Succeeded { run_id: snap.run_id.clone() }),
            _ => None,
        }
    }

    fn overdue_event(snap: &RunSnapshot, node: &str) -> Event {
        let prompt = snap.flow.node_index(node).and_then(|i| match &snap.flow.nodes[i].action {
            madeira_core::NodeAction::Manual(m) => Some(m.prompt.clone()),
            _ => None,
        });
        Event::Raise(Raise {
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
        })
    }
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
        labels: snap.flow.labels.clone(),
        causes: root_causes(snap)
            .into_iter()
            .map(|c| Cause { node: c.node, error: c.error, attempts: c.attempts, skipped: c.skipped })
            .collect(),
    }
}

impl EngineObserver for AlertObserver {
    fn run_finished(&self, snap: &RunSnapshot) {
        if let (false, Some(event)) = (self.through_commit, Self::run_event(snap)) {
            let _ = self.tx.send(Input::Event(event));
        }
    }

    fn confirm_overdue(&self, snap: &RunSnapshot, node: &str) {
        if !self.through_commit {
            let _ = self.tx.send(Input::Event(Self::overdue_event(snap, node)));
        }
    }

    fn transitions(&self, events: &[RunEvent]) {
        if self.through_commit {
            return;
        }
        for e in events {
            if e.from == "MANUAL_CONFIRM"
                && let Some(node) = &e.node
            {
                let _ = self.tx.send(Input::Event(Event::Resolve { key: confirm_key(&e.run_id, node) }));
            }
        }
    }

    fn alert_event(&self, source: AlertSource<'_>) -> Option<String> {
        if !self.through_commit {
            return None;
        }
        let event = match source {
            AlertSource::RunFinished(snap) => Self::run_event(snap)?,
            AlertSource::ConfirmOverdue(snap, node) => Self::overdue_event(snap, node),
            AlertSource::ConfirmLeft { run_id, node } => Event::Resolve { key: confirm_key(run_id, node) },
        };
        match serde_json::to_string(&event) {
            Ok(text) => Some(text),
            Err(e) => {
                tracing::error!(error = %e, "cannot encode an alert event");
                None
            }
        }
    }
}
