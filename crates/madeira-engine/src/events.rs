//! Event triggers (SPEC §6): an event starts every flow listening to its type,
//! the payload as params and `event:<type>:<id>` as idempotency key. For a paused
//! flow the trigger's `on_paused` decides: `queue` (default) keeps the event in
//! the store (`paused_events`, at most `max_queued` of its type) and `resume`
//! starts the kept events oldest first with their keys, so a replay never makes
//! a second run; `drop` drops it, audited. `EventDrainer` starts what a resume
//! left (a crash in the middle, a resume through another replica, a throttle
//! queue that was full) within `DRAIN_EVERY`.

use std::sync::Arc;
use std::time::Duration;

use madeira_core::keys::RunKey;
use madeira_core::{FlowDef, OnPaused, TriggerDef};
use madeira_store::{AuditRecord, Batch, QueueOutcome, QueuedEvent};
use serde_json::{Value as Json, json};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{EngineError, EngineHandle, TriggerOutcome, TriggerRequest, clock::now_ms};

/// How often every replica looks for unpaused flows with events still queued.
const DRAIN_EVERY: Duration = Duration::from_secs(2);
/// Queued events read per store round trip while draining.
const DRAIN_BATCH: u32 = 100;

/// A flow listening to an event type, as its latest version says.
#[derive(Debug, Clone)]
pub struct Listener {
    pub def: Arc<FlowDef>,
    pub paused: bool,
    pub on_paused: OnPaused,
    pub max_queued: u32,
}

/// An event kept for a paused flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedAnswer {
    pub flow: String,
    /// 1 for the oldest event waiting for the flow.
    pub position: u64,
    pub queued_at_ms: i64,
    pub max_queued: u32,
    /// False when this (type, id) was already waiting.
    pub created: bool,
}

/// What one event did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventOutcome {
    pub runs: Vec<TriggerOutcome>,
    pub queued: Vec<QueuedAnswer>,
    /// Paused flows whose trigger says `on_paused: drop`.
    pub dropped: Vec<String>,
}

/// What starting a flow's queued events did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Runs made (or found again by their key), in queue order.
    pub started: Vec<String>,
    /// Events still waiting (the flow paused again, or an error stopped the drain).
    pub remaining: u64,
    /// Why the drain stopped early; the drainer tries again.
    pub error: Option<String>,
}

impl EngineHandle {
    /// Every flow whose latest version listens to event `kind` (paused ones too).
    pub async fn event_listeners(&self, kind: &str) -> Result<Vec<Listener>, EngineError> {
        let mut out = Vec::new();
        for record in self.store.list_flows().await? {
            let def = self.flows.get(self.store.as_ref(), &record.name, record.latest_version).await?;
            if def.observe {
                continue;
            }
            let found = def.triggers.iter().find_map(|t| match t {
                TriggerDef::Event { event, on_paused, max_queued } if event == kind => {
                    Some((*on_paused, *max_queued))
                }
                _ => None,
            });
            if let Some((on_paused, max_queued)) = found {
                out.push(Listener { def, paused: record.paused, on_paused, max_queued });
            }
        }
        Ok(out)
    }

    /// The latest versions of the unpaused flows that listen to event `kind`.
    pub async fn event_flows(&self, kind: &str) -> Result<Vec<Arc<FlowDef>>, EngineError> {
        Ok(self.event_listeners(kind).await?.into_iter().filter(|l| !l.paused).map(|l| l.def).collect())
    }

    /// Every event type some flow listens to, paused flows included.
    pub async fn event_types(&self) -> Result<std::collections::BTreeSet<String>, EngineError> {
        let mut types = std::collections::BTreeSet::new();
        for record in self.store.list_flows().await? {
            let def = self.flows.get(self.store.as_ref(), &record.name, record.latest_version).await?;
            types.extend(def.triggers.iter().filter_map(|t| match t {
                TriggerDef::Event { event, .. } => Some(event.clone()),
                _ => None,
            }));
        }
        Ok(types)
    }

    /// Starts every unpaused flow listening to `kind` and keeps (or drops) the
    /// event for each paused one. A redelivered id returns the same runs and
    /// queue entries. Flows refusing by `on_overlap: skip` are left out. A paused
    /// flow whose queue is full refuses the whole event after the flows before it
    /// took it: a retry of the same id is safe (it makes no second run).
    pub async fn fire_event(
        &self,
        kind: &str,
        id: &str,
        payload: Json,
        actor: &str,
    ) -> Result<EventOutcome, EngineError> {
        madeira_core::text::check_text("type", kind).map_err(EngineError::BadText)?;
        madeira_core::text::check_text("id", id).map_err(EngineError::BadText)?;
        madeira_core::text::check_json("payload", &payload).map_err(EngineError::BadText)?;
        let mut outcome = EventOutcome::default();
        for listener in self.event_listeners(kind).await? {
            let flow = listener.def.name.clone();
            if listener.paused
                && self.keep_for_paused(&listener, kind, id, &payload, actor, &mut outcome).await?
            {
                continue;
            }
            match self.trigger(event_request(&flow, kind, id, payload.clone(), actor)).await {
                Ok(run) => outcome.runs.push(run),
                Err(EngineError::OverlapSkipped { .. }) => {}
                // Paused since the listeners were read: kept or dropped as for a
                // paused flow (or, resumed again meanwhile, started after all).
                Err(EngineError::Paused(_))
                    if !listener.paused
                        && !self
                            .keep_for_paused(&listener, kind, id, &payload, actor, &mut outcome)
                            .await? =>
                {
                    match self.trigger(event_request(&flow, kind, id, payload.clone(), actor)).await {
                        Ok(run) => outcome.runs.push(run),
                        Err(EngineError::OverlapSkipped { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(EngineError::Paused(_)) if !listener.paused => {}
                Err(e) => return Err(e),
            }
        }
        Ok(outcome)
    }

    /// For a paused flow, as its trigger's `on_paused` says: drops the event or
    /// keeps it. False when it was not kept because the flow is not paused (any
    /// more) or the event's run exists already: the caller triggers as usual.
    async fn keep_for_paused(
        &self,
        listener: &Listener,
        kind: &str,
        id: &str,
        payload: &Json,
        actor: &str,
        outcome: &mut EventOutcome,
    ) -> Result<bool, EngineError> {
        let flow = listener.def.name.clone();
        if listener.on_paused == OnPaused::Drop {
            self.audit_dropped(&flow, kind, id, actor).await?;
            outcome.dropped.push(flow);
            return Ok(true);
        }
        let event = QueuedEvent {
            id: 0,
            flow: flow.clone(),
            event_type: kind.to_string(),
            event_id: id.to_string(),
            payload: payload.clone(),
            actor: actor.to_string(),
            queued_at: now_ms(),
        };
        match self.store.queue_event(&event, listener.max_queued).await? {
            QueueOutcome::Queued { position, queued_at, .. } => {
                outcome.queued.push(queued(listener, position, queued_at, true));
                Ok(true)
            }
            QueueOutcome::AlreadyQueued { position, queued_at, .. } => {
                outcome.queued.push(queued(listener, position, queued_at, false));
                Ok(true)
            }
            QueueOutcome::Full { queued } => Err(EngineError::PausedQueueFull {
                flow,
                event_type: kind.to_string(),
                queued,
                limit: listener.max_queued,
            }),
            QueueOutcome::FlowNotFound => Ok(true),
            // Its run exists already, or the flow was resumed: trigger as usual.
            QueueOutcome::Existing { .. } | QueueOutcome::NotPaused => Ok(false),
        }
    }

    async fn audit_dropped(&self, flow: &str, kind: &str, id: &str, actor: &str) -> Result<(), EngineError> {
        let audit = AuditRecord {
            at: now_ms(),
            actor: actor.to_string(),
            action: "event_dropped".into(),
            run_id: None,
            node: None,
            reason: Some(format!(
                "flow {flow} is paused and its `event: {kind}` trigger says on_paused: drop"
            )),
            details: Some(json!({"flow": flow, "type": kind, "id": id})),
        };
        self.store.commit(&Batch { audit: vec![audit], ..Default::default() }).await?;
        Ok(())
    }

    /// Events waiting for a paused flow, per flow that has any.
    pub async fn queued_event_counts(&self) -> Result<std::collections::BTreeMap<String, u64>, EngineError> {
        Ok(self.store.queued_event_counts().await?.into_iter().collect())
    }

    /// Starts `flow`'s queued events, oldest first, each with its key (a run that
    /// key already made is found, not made again), unless the flow is paused.
    /// Stops at the first error other than `on_overlap: skip` (left queued).
    pub async fn drain_events(&self, flow: &str) -> DrainReport {
        let _one_at_a_time = self.event_drain.lock().await;
        self.drain_locked(flow).await
    }

    /// `drain_events` with `event_drain` already held.
    pub(crate) async fn drain_locked(&self, flow: &str) -> DrainReport {
        let mut report = DrainReport::default();
        if let Err(e) = self.drain_into(flow, &mut report).await {
            warn!(flow = %flow, error = %e, "queued events not all started; trying again shortly");
            report.error = Some(e.to_string());
        }
        report.remaining = self.queued_count(flow).await;
        if !report.started.is_empty() {
            info!(flow = %flow, started = report.started.len(), remaining = report.remaining, "started queued events");
        }
        report
    }

    /// Events waiting for `flow` (0 when the store cannot say).
    pub(crate) async fn queued_count(&self, flow: &str) -> u64 {
        match self.store.queued_event_counts().await {
            Ok(counts) => counts.into_iter().find(|(f, _)| f == flow).map_or(0, |(_, n)| n),
            Err(_) => 0,
        }
    }

    async fn drain_into(&self, flow: &str, report: &mut DrainReport) -> Result<(), EngineError> {
        loop {
            match self.store.get_flow(flow).await? {
                Some(record) if !record.paused => {}
                _ => return Ok(()),
            }
            let batch = self.store.queued_events(flow, DRAIN_BATCH).await?;
            if batch.is_empty() {
                return Ok(());
            }
            let mut done = Vec::with_capacity(batch.len());
            let mut failed = None;
            for event in batch {
                let request =
                    event_request(flow, &event.event_type, &event.event_id, event.payload, &event.actor);
                match self.trigger(request).await {
                    Ok(run) => report.started.push(run.run_id),
                    // As for a live event: the overlap policy declined it.
                    Err(EngineError::OverlapSkipped { .. }) => {}
                    Err(EngineError::FlowNotFound(_)) => {}
                    // Paused again meanwhile: this one and the rest stay queued.
                    Err(EngineError::Paused(_)) => break,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
                done.push(event.id);
            }
            self.store.remove_queued_events(&done).await?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }
}

fn queued(listener: &Listener, position: u64, queued_at_ms: i64, created: bool) -> QueuedAnswer {
    QueuedAnswer {
        flow: listener.def.name.clone(),
        position,
        queued_at_ms,
        max_queued: listener.max_queued,
        created,
    }
}

fn event_request(flow: &str, kind: &str, id: &str, payload: Json, actor: &str) -> TriggerRequest {
    TriggerRequest {
        flow: flow.to_string(),
        params: payload,
        idempotency_key: Some(RunKey::Event { kind: kind.to_string(), id: id.to_string() }.into()),
        trigger: "event".into(),
        actor: actor.to_string(),
        version: None,
        biz_date: None,
        at_ms: None,
    }
}

/// Starts the queued events of unpaused flows every `DRAIN_EVERY`: what a crash,
/// a resume through another replica or an error left (a resume here starts them
/// itself, in `EngineHandle::set_paused`). One grouped count per sweep.
pub struct EventDrainer {
    engine: EngineHandle,
}

impl EventDrainer {
    pub fn new(engine: EngineHandle) -> Self {
        Self { engine }
    }

    pub async fn run(self, cancel: CancellationToken) {
        let mut every = tokio::time::interval(DRAIN_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = every.tick() => self.sweep().await,
            }
        }
    }

    async fn sweep(&self) {
        let counts = match self.engine.store.queued_event_counts().await {
            Ok(counts) => counts,
            Err(e) => {
                warn!(error = %e, "cannot read the queued events; trying again shortly");
                return;
            }
        };
        for (flow, _) in counts {
            self.engine.drain_events(&flow).await;
        }
    }
}
