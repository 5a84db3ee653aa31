//! `AlertHandle`: the cheap-to-clone way the engine (through `AlertObserver`), the
//! API, the CLI and other sources (missed cron runs, lost sidecars) reach the
//! alert task — raise or resolve an alert, list alerts with their deliveries, send
//! a test message.

use std::sync::Arc;
use std::time::Duration;

use madeira_store::{AlertQuery, AlertStore};
use serde_json::{Value as Json, json};
use tokio::sync::{mpsc, oneshot};

use crate::aggregate::MarkKind;
use crate::channel::ChannelKind;
use crate::model::{Mark, Raise};
use crate::observer::AlertObserver;
use crate::task::{Event, Input};
use crate::worker::TestOutcome;
use crate::{AlertError, view};

#[derive(Clone)]
pub struct AlertHandle {
    pub(crate) tx: mpsc::UnboundedSender<Input>,
    pub(crate) store: Arc<dyn AlertStore>,
    pub(crate) channels: Arc<Vec<(String, ChannelKind)>>,
}

impl AlertHandle {
    /// The engine observer feeding this component (failed and succeeded runs,
    /// overdue confirmations).
    pub fn observer(&self) -> Arc<dyn madeira_engine::EngineObserver> {
        Arc::new(AlertObserver { tx: self.tx.clone(), through_commit: false })
    }

    /// The observer for replicas of a shared store (with `AlertTask::clustered`):
    /// runs' ends reach the store's alert inbox in the engine's commit.
    pub fn cluster_observer(&self) -> Arc<dyn madeira_engine::EngineObserver> {
        Arc::new(AlertObserver { tx: self.tx.clone(), through_commit: true })
    }

    /// Raises an alert from another source; events with the same key are grouped
    /// while it is open. Never blocks.
    pub fn raise(&self, alert: Raise) {
        let _ = self.tx.send(Input::Event(Event::Raise(Box::new(alert))));
    }

    /// Resolves the open alert with `key` (sends `resolved` if it was sent).
    pub fn resolve(&self, key: &str) {
        let _ = self.tx.send(Input::Event(Event::Resolve { key: key.to_string(), cause: None }));
    }

    /// Waits until every event sent before this call has been aggregated and every
    /// channel has done what is due now (tests and benchmarks step a manual clock
    /// with it).
    pub async fn settled(&self) -> Result<(), AlertError> {
        let (reply, done) = oneshot::channel();
        self.tx.send(Input::Settle(reply)).map_err(|_| AlertError::ShuttingDown)?;
        done.await.map_err(|_| AlertError::ShuttingDown)
    }

    /// Configured channels: name and type (never their URLs).
    pub fn channels(&self) -> Vec<Json> {
        self.channels.iter().map(|(name, kind)| json!({"name": name, "type": kind.as_str()})).collect()
    }

    /// Alerts, newest first, each with its deliveries.
    pub async fn list(&self, query: &AlertQuery) -> Result<Json, AlertError> {
        let rows = self.store.list_alerts(query).await?;
        let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        let deliveries = self.store.deliveries_of(&ids).await?;
        let alerts: Vec<Json> = rows
            .iter()
            .map(|row| {
                let mine: Vec<_> =
                    deliveries.iter().filter(|d| d.alert_id.as_ref() == Some(&row.id)).collect();
                view::alert_json(row, &mine)
            })
            .collect();
        Ok(json!({"alerts": alerts, "channels": self.channels()}))
    }

    /// The flow of the open (pending or firing) alert `id`; `NotFound` when there
    /// is no such alert, `NotOpen` when it is resolved.
    pub async fn open_alert_flow(&self, id: &str) -> Result<Option<String>, AlertError> {
        match self.store.alert_status(id).await? {
            None => Err(AlertError::NotFound(id.to_string())),
            Some((status, flow)) if matches!(status.as_str(), "pending" | "firing") => Ok(flow),
            Some(_) => Err(AlertError::NotOpen(id.to_string())),
        }
    }

    /// Acknowledges or silences the open alert `id` (the caller checked it with
    /// `open_alert_flow` and audited it); applied by the aggregating replica,
    /// through the inbox in a cluster. Answers once the alert task took it.
    pub async fn mark(&self, id: &str, kind: MarkKind, mark: Mark) -> Result<(), AlertError> {
        let event = Event::Mark { id: id.to_string(), what: kind, mark };
        self.tx.send(Input::Event(event)).map_err(|_| AlertError::ShuttingDown)?;
        self.settled().await
    }

    /// Sends a test message on `channel` now and reports how the receiver answered.
    pub async fn test(&self, channel: &str) -> Result<TestOutcome, AlertError> {
        if !self.channels.iter().any(|(name, _)| name == channel) {
            let known: Vec<_> = self.channels.iter().map(|(n, _)| n.as_str()).collect();
            return Err(AlertError::UnknownChannel { name: channel.to_string(), known: known.join(", ") });
        }
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Input::Test { channel: channel.to_string(), reply })
            .map_err(|_| AlertError::ShuttingDown)?;
        match tokio::time::timeout(Duration::from_secs(60), answer).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(_)) => Err(AlertError::ShuttingDown),
            Err(_) => Err(AlertError::TestTimedOut(channel.to_string())),
        }
    }
}
