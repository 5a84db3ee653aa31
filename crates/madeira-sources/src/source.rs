//! The broker abstraction: a [`Source`] subscribes to what one trigger consumes
//! and yields [`Delivery`]s; each delivery's [`Acker`] acknowledges it, asks for
//! it again later (counted as one more delivery, or not), or moves it to the
//! dead-letter destination with the reason. A new broker is one module
//! implementing these three traits.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

/// A broker problem; the consumer reconnects with backoff after one.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

impl SourceError {
    pub fn new(context: &str, e: impl std::fmt::Display) -> Self {
        Self(format!("{context}: {e}"))
    }
}

/// What one trigger consumes, in broker terms (see `MessageTriggerDef`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Subscription {
    pub queue: Option<String>,
    pub exchange: Option<String>,
    pub binding_key: Option<String>,
    pub stream: Option<String>,
    pub consumer: Option<String>,
    pub subject: Option<String>,
    pub group: Option<String>,
    /// This replica's name (Redis Streams consumer name).
    pub replica: String,
    /// Unacknowledged messages at most (prefetch / max ack pending / batch size).
    pub max_in_flight: u32,
}

/// One received message.
pub struct Delivery {
    /// The broker's id (AMQP `message_id` or delivery tag, JetStream stream
    /// sequence, Redis entry id of the first delivery): the default run key.
    pub id: String,
    pub body: Vec<u8>,
    pub headers: BTreeMap<String, String>,
    /// Routing key or subject, when the broker has one.
    pub subject: Option<String>,
    /// How many times this message was delivered, this one included (≥ 1).
    pub deliveries: u32,
    pub acker: Box<dyn Acker>,
}

#[async_trait]
pub trait Acker: Send + Sync {
    /// Done with it: the run exists (or it was filtered).
    async fn ack(&self) -> Result<(), SourceError>;
    /// Deliver it again after `delay`; `counted`: as one more delivery (a refusal),
    /// or not (the store was unavailable: not the message's fault).
    async fn retry(&self, delay: Duration, reason: &str, counted: bool) -> Result<(), SourceError>;
    /// Move it to the dead-letter destination with `reason`, then acknowledge it.
    async fn dead_letter(&self, reason: &str) -> Result<(), SourceError>;
}

#[async_trait]
pub trait Consumer: Send {
    /// The next message; an error means the connection is gone (reconnect).
    async fn next(&mut self) -> Result<Delivery, SourceError>;
    /// Messages waiting in the broker for this subscription, when it can say.
    async fn lag(&mut self) -> Option<u64>;
}

#[async_trait]
pub trait Source: Send + Sync {
    /// `rabbitmq`, `nats`, `redis_streams`.
    fn kind(&self) -> &'static str;
    /// Connects and subscribes (declaring what must exist: queue, group, consumer).
    async fn subscribe(&self, sub: &Subscription) -> Result<Box<dyn Consumer>, SourceError>;
}
