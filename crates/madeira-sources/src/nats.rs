//! NATS JetStream (`async-nats`): a durable pull consumer (created when missing,
//! with `subject` as its filter) on an existing `stream`, explicit acks, at most
//! `max_in_flight` unacknowledged (`max_ack_pending`).
//!
//! - Message id (default key): the `Nats-Msg-Id` header, else the stream sequence.
//! - Deliveries: JetStream's own count (`delivered`). Retry: a delayed NAK
//!   (`Nak(delay)`), so nothing is held meanwhile; JetStream counts every
//!   redelivery, including those after a store outage.
//! - Dead letters are published to `<stream>.dead` (capture it with a stream of
//!   your own) with the `Madeira-Reason` header; then the original is terminated
//!   (`Term`: never redelivered). When no stream captures the dead-letter subject
//!   the message is still terminated, with a warning in the log.
//! - A message unacked for `ACK_WAIT` (its consumer was killed) is redelivered.
//! - Lag: the consumer's `num_pending`.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::PullConsumer, consumer::pull};
use async_trait::async_trait;
use futures::StreamExt;

use crate::config::SourceConfig;
use crate::source::{Acker, Consumer, Delivery, Source, SourceError, Subscription};

/// How long JetStream waits for an ack before delivering a message again.
pub const ACK_WAIT: Duration = Duration::from_secs(10);
pub const REASON_HEADER: &str = "Madeira-Reason";

pub struct Nats {
    url: String,
}

impl Nats {
    pub fn new(config: &SourceConfig) -> Self {
        Self { url: config.url.clone() }
    }
}

/// The subject dead letters of `stream` are published to.
pub fn dead_letter_subject(stream: &str) -> String {
    format!("{stream}.dead")
}

fn err<E: std::fmt::Display>(context: &str) -> impl Fn(E) -> SourceError + '_ {
    move |e| SourceError::new(context, e)
}

#[async_trait]
impl Source for Nats {
    fn kind(&self) -> &'static str {
        "nats"
    }

    async fn subscribe(&self, sub: &Subscription) -> Result<Box<dyn Consumer>, SourceError> {
        let stream_name =
            sub.stream.clone().ok_or_else(|| SourceError("a nats trigger needs `stream`".into()))?;
        let durable =
            sub.consumer.clone().ok_or_else(|| SourceError("a nats trigger needs `consumer`".into()))?;
        let options = async_nats::ConnectOptions::new().connection_timeout(Duration::from_secs(5));
        let client = options.connect(self.url.as_str()).await.map_err(err("connecting"))?;
        let context = jetstream::new(client);
        let stream = context.get_stream(&stream_name).await.map_err(err("getting the stream"))?;
        let config = pull::Config {
            durable_name: Some(durable.clone()),
            filter_subject: sub.subject.clone().unwrap_or_default(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: ACK_WAIT,
            max_deliver: -1,
            max_ack_pending: i64::from(sub.max_in_flight.max(1)),
            ..Default::default()
        };
        let consumer: PullConsumer =
            stream.get_or_create_consumer(&durable, config).await.map_err(err("creating the consumer"))?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(sub.max_in_flight.max(1) as usize)
            .heartbeat(Duration::from_secs(5))
            .messages()
            .await
            .map_err(err("pulling"))?;
        Ok(Box::new(NatsConsumer { context, consumer, messages, stream: stream_name }))
    }
}

struct NatsConsumer {
    context: jetstream::Context,
    consumer: PullConsumer,
    messages: pull::Stream,
    stream: String,
}

#[async_trait]
impl Consumer for NatsConsumer {
    async fn next(&mut self) -> Result<Delivery, SourceError> {
        let message = match self.messages.next().await {
            Some(Ok(m)) => m,
            Some(Err(e)) => return Err(SourceError::new("pulling", e)),
            None => return Err(SourceError("the pull subscription ended".into())),
        };
        let info = message.info().map_err(err("message info"))?;
        let (sequence, delivered) = (info.stream_sequence, info.delivered);
        let mut headers = BTreeMap::new();
        if let Some(map) = &message.headers {
            for (name, values) in map.iter() {
                if let Some(v) = values.first() {
                    headers.insert(AsRef::<str>::as_ref(name).to_string(), v.as_str().to_string());
                }
            }
        }
        let headers = crate::handle::header_map(headers);
        let id = headers.get("nats-msg-id").cloned().unwrap_or_else(|| sequence.to_string());
        let deliveries = u32::try_from(delivered.max(1)).unwrap_or(u32::MAX);
        Ok(Delivery {
            id,
            body: message.payload.to_vec(),
            headers,
            subject: Some(message.subject.to_string()),
            deliveries,
            acker: Box::new(NatsAcker {
                context: self.context.clone(),
                stream: self.stream.clone(),
                message,
            }),
        })
    }

    async fn lag(&mut self) -> Option<u64> {
        self.consumer.info().await.ok().map(|i| i.num_pending)
    }
}

struct NatsAcker {
    context: jetstream::Context,
    stream: String,
    message: jetstream::Message,
}

#[async_trait]
impl Acker for NatsAcker {
    async fn ack(&self) -> Result<(), SourceError> {
        // A double ack waits for the server's confirmation that the ack was recorded.
        self.message.double_ack().await.map_err(err("ack"))
    }

    async fn retry(&self, delay: Duration, _reason: &str, _counted: bool) -> Result<(), SourceError> {
        self.message.ack_with(AckKind::Nak(Some(delay))).await.map_err(err("nak"))
    }

    async fn dead_letter(&self, reason: &str) -> Result<(), SourceError> {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(original) = &self.message.headers {
            for (name, values) in original.iter() {
                for v in values {
                    headers.append(name.clone(), v.clone());
                }
            }
        }
        headers.insert(REASON_HEADER, reason.replace(['\r', '\n'], " "));
        let subject = dead_letter_subject(&self.stream);
        let published = match self
            .context
            .publish_with_headers(subject.clone(), headers, self.message.payload.clone())
            .await
        {
            Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = published {
            tracing::warn!(subject = %subject, error = %e, "dead letter not stored (no stream captures the subject?); terminating the message anyway");
        }
        self.message.ack_with(AckKind::Term).await.map_err(err("term"))
    }
}
