//! Message triggers (SPEC §6.1): consume RabbitMQ queues, NATS JetStream durable
//! consumers and Redis Streams consumer groups, and turn each message into exactly
//! one run. At least once in (a message is acknowledged only after its run is
//! committed, or found by its key `message:<source>:<key>`), exactly one run out
//! (the store's unique idempotency key is the final guard against redeliveries,
//! restarts and competing replicas).
//!
//! One module per broker behind the [`Source`] trait (`rabbitmq`, `nats`,
//! `redis_streams`); Kafka or RocketMQ would be one more module each. The
//! [`Supervisor`] keeps one consumer task per (flow, message trigger), reconnecting
//! with jittered backoff; [`handle`] decides each message's fate; the binary gives
//! it a [`Runs`] implementation over the engine.

pub mod backoff;
pub mod config;
pub mod handle;
pub mod metrics;
pub mod nats;
pub mod rabbitmq;
pub mod redis_streams;
pub mod source;
pub mod status;
pub mod supervisor;

pub use config::{SourceConfig, SourceKind};
pub use handle::{Made, Outcome, Refusal, RunRequest, Runs, Warnings};
pub use metrics::SourceMetrics;
pub use source::{Acker, Consumer, Delivery, Source, SourceError, Subscription};
pub use status::{SourceState, Statuses};
pub use supervisor::{Catalog, Supervisor, TriggerSpec};

/// Largest message body accepted, in bytes; larger ones are dead-lettered.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// Opens the broker client for one configured source.
pub fn open(config: &SourceConfig) -> std::sync::Arc<dyn Source> {
    match config.kind {
        SourceKind::Rabbitmq => std::sync::Arc::new(rabbitmq::Rabbitmq::new(config)),
        SourceKind::Nats => std::sync::Arc::new(nats::Nats::new(config)),
        SourceKind::RedisStreams => std::sync::Arc::new(redis_streams::RedisStreams::new(config)),
    }
}
