//! Keeps one consumer task per (flow, message trigger) of the latest flow versions:
//! started when a flow with a message trigger is applied or resumed, stopped when
//! it is replaced, deleted or paused (`on_paused: queue`, the default: messages stay
//! in the broker), kept with every message acked as `filtered` under `on_paused:
//! drop`. Each task connects, consumes with at most `max_in_flight` messages in
//! hand, and reconnects with jittered backoff when the broker goes away.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use madeira_core::{MessageTriggerDef, OnPaused};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::handle::{Handler, Runs, Warnings};
use crate::source::{Source, Subscription};
use crate::status::{SourceState, Statuses};

/// One message trigger of a flow's latest version.
#[derive(Debug, Clone)]
pub struct TriggerSpec {
    pub flow: String,
    /// Position among the flow's triggers.
    pub index: usize,
    pub paused: bool,
    pub def: Arc<MessageTriggerDef>,
}

/// Lists the message triggers to consume (the binary reads them from the store).
#[async_trait]
pub trait Catalog: Send + Sync {
    async fn triggers(&self) -> Result<Vec<TriggerSpec>, String>;
}

pub struct Supervisor {
    pub sources: HashMap<String, Arc<dyn Source>>,
    pub catalog: Arc<dyn Catalog>,
    pub runs: Arc<dyn Runs>,
    pub warnings: Arc<dyn Warnings>,
    pub statuses: Statuses,
    /// This replica's name (the Redis Streams consumer name).
    pub replica: String,
    /// How often the flow list is read again.
    pub poll: Duration,
}

struct Running {
    signature: String,
    cancel: CancellationToken,
    source: String,
}

impl Supervisor {
    /// Runs until `cancel`; then stops every consumer, letting messages in hand finish.
    pub async fn run(self, cancel: CancellationToken) {
        let mut running: HashMap<String, Running> = HashMap::new();
        let mut tasks = JoinSet::new();
        loop {
            match self.catalog.triggers().await {
                Ok(triggers) => self.reconcile(triggers, &mut running, &mut tasks, &cancel),
                Err(e) => {
                    tracing::warn!(error = %e, "message triggers: cannot list flows; keeping the consumers as they are")
                }
            }
            while tasks.try_join_next().is_some() {}
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(self.poll) => {}
            }
        }
        for r in running.values() {
            r.cancel.cancel();
        }
        while tasks.join_next().await.is_some() {}
    }

    fn reconcile(
        &self,
        triggers: Vec<TriggerSpec>,
        running: &mut HashMap<String, Running>,
        tasks: &mut JoinSet<()>,
        cancel: &CancellationToken,
    ) {
        let mut wanted = HashMap::new();
        for t in triggers {
            let id = format!("{}#{}", t.flow, t.index);
            let consuming = !t.paused || t.def.on_paused == OnPaused::Drop;
            if !consuming {
                if running.get(&id).is_none_or(|r| !r.signature.starts_with("paused")) {
                    if let Some(r) = running.remove(&id) {
                        r.cancel.cancel();
                    }
                    self.statuses.add_consumer(&t.def.source, &id, &t.flow, consumes(&t.def));
                    self.statuses.set_state(&t.def.source, &id, SourceState::Paused, None);
                    let paused = Running {
                        signature: "paused".into(),
                        cancel: CancellationToken::new(),
                        source: t.def.source.clone(),
                    };
                    running.insert(id.clone(), paused);
                }
                wanted.insert(id, ());
                continue;
            }
            let signature = format!("{}|{:?}", t.paused, t.def);
            wanted.insert(id.clone(), ());
            if running.get(&id).is_some_and(|r| r.signature == signature) {
                continue;
            }
            if let Some(r) = running.remove(&id) {
                r.cancel.cancel();
            }
            let Some(source) = self.sources.get(&t.def.source).cloned() else {
                // Applying checks the name; a source removed from the config since lands here.
                tracing::warn!(flow = %t.flow, source = %t.def.source, "message trigger names a source the server config no longer has");
                continue;
            };
            let token = cancel.child_token();
            running.insert(
                id.clone(),
                Running { signature, cancel: token.clone(), source: t.def.source.clone() },
            );
            self.statuses.add_consumer(&t.def.source, &id, &t.flow, consumes(&t.def));
            let handler = Arc::new(Handler {
                source: t.def.source.clone(),
                consumer_id: id.clone(),
                flow: t.flow.clone(),
                def: t.def.clone(),
                runs: self.runs.clone(),
                warnings: self.warnings.clone(),
                statuses: self.statuses.clone(),
                drop_all: t.paused,
            });
            let sub = subscription(&t.def, &self.replica);
            tasks.spawn(consume(handler, source, sub, token));
        }
        let gone: Vec<String> = running.keys().filter(|id| !wanted.contains_key(*id)).cloned().collect();
        for id in gone {
            if let Some(r) = running.remove(&id) {
                r.cancel.cancel();
                self.statuses.remove_consumer(&r.source, &id);
            }
        }
    }
}

/// What a trigger consumes, for `GET /sources`.
fn consumes(def: &MessageTriggerDef) -> String {
    let parts = [
        ("queue", &def.queue),
        ("exchange", &def.exchange),
        ("binding_key", &def.binding_key),
        ("stream", &def.stream),
        ("consumer", &def.consumer),
        ("subject", &def.subject),
        ("group", &def.group),
    ];
    parts.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} {v}"))).collect::<Vec<_>>().join(", ")
}

pub(crate) fn subscription(def: &MessageTriggerDef, replica: &str) -> Subscription {
    Subscription {
        queue: def.queue.clone(),
        exchange: def.exchange.clone(),
        binding_key: def.binding_key.clone(),
        stream: def.stream.clone(),
        consumer: def.consumer.clone(),
        subject: def.subject.clone(),
        group: def.group.clone(),
        replica: replica.to_string(),
        max_in_flight: def.max_in_flight,
    }
}

/// How long messages in hand may finish after the consumer is stopped.
const DRAIN: Duration = Duration::from_secs(10);

/// One trigger's consumer: (re)connect with backoff, take messages while fewer than
/// `max_in_flight` are in hand, handle each in its own task.
async fn consume(
    handler: Arc<Handler>,
    source: Arc<dyn Source>,
    sub: Subscription,
    cancel: CancellationToken,
) {
    let (name, id) = (handler.source.clone(), handler.consumer_id.clone());
    let statuses = handler.statuses.clone();
    let permits = Arc::new(Semaphore::new(sub.max_in_flight.max(1) as usize));
    let mut tasks = JoinSet::new();
    let mut backoff = Backoff::default();
    'connect: while !cancel.is_cancelled() {
        statuses.set_state(&name, &id, SourceState::Connecting, None);
        let subscribed = tokio::select! {
            _ = cancel.cancelled() => break,
            s = source.subscribe(&sub) => s,
        };
        let mut consumer = match subscribed {
            Ok(c) => c,
            Err(e) => {
                let wait = backoff.next_wait();
                tracing::warn!(source = %name, consumer = %id, error = %e, retry_in = ?wait, "message source unreachable");
                statuses.set_state(&name, &id, SourceState::Down, Some(e.0));
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
        };
        tracing::info!(source = %name, consumer = %id, "message source connected");
        statuses.set_state(&name, &id, SourceState::Up, None);
        backoff.reset();
        let lag = consumer.lag().await;
        statuses.set_lag(&name, &id, lag);
        let mut lag_at = Instant::now();
        loop {
            while tasks.try_join_next().is_some() {}
            let permit = tokio::select! {
                _ = cancel.cancelled() => break 'connect,
                p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break 'connect },
            };
            let next = tokio::select! {
                _ = cancel.cancelled() => break 'connect,
                d = consumer.next() => d,
            };
            match next {
                Ok(delivery) => {
                    let h = handler.clone();
                    tasks.spawn(async move {
                        let _permit = permit;
                        h.handle(delivery).await;
                    });
                }
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(source = %name, consumer = %id, error = %e, retry_in = ?wait, "message source lost; reconnecting");
                    statuses.set_state(&name, &id, SourceState::Down, Some(e.0));
                    tokio::select! {
                        _ = cancel.cancelled() => break 'connect,
                        _ = tokio::time::sleep(wait) => continue 'connect,
                    }
                }
            }
            if lag_at.elapsed() > Duration::from_secs(1) {
                lag_at = Instant::now();
                let lag = consumer.lag().await;
                statuses.set_lag(&name, &id, lag);
            }
        }
    }
    let _ = tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await;
}
