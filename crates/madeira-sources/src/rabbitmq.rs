//! RabbitMQ (AMQP 0.9.1, `lapin`): a durable `queue` (declared; bound to
//! `exchange` with `binding_key` when given), prefetch = `max_in_flight`, manual
//! acks with publisher confirms on the same channel.
//!
//! - Message id (default key): the AMQP `message_id` property, else a hash of the body.
//! - Deliveries are counted in the `x-madeira-deliveries` header: a refused
//!   message is held for its delay, published again to the queue with the count
//!   raised, then the original is acked (a crash in between makes a second copy,
//!   which the run key turns into a `duplicate`).
//! - Dead letters go to the durable queue `<queue>.dead` with `x-madeira-reason`.
//! - An unavailable store: held for the delay, then `nack` with requeue (not counted).
//! - Lag: the queue's ready message count.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};

use crate::config::SourceConfig;
use crate::source::{Acker, Consumer, Delivery, Source, SourceError, Subscription};

/// The header counting deliveries of a republished message.
pub const DELIVERIES_HEADER: &str = "x-madeira-deliveries";
/// The header naming why a message was dead-lettered.
pub const REASON_HEADER: &str = "x-madeira-reason";

pub struct Rabbitmq {
    url: String,
}

impl Rabbitmq {
    pub fn new(config: &SourceConfig) -> Self {
        Self { url: config.url.clone() }
    }
}

/// The dead-letter queue of `queue`.
pub fn dead_letter_queue(queue: &str) -> String {
    format!("{queue}.dead")
}

fn err(context: &str) -> impl Fn(lapin::Error) -> SourceError + '_ {
    move |e| SourceError::new(context, e)
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions { durable: true, ..Default::default() }
}

#[async_trait]
impl Source for Rabbitmq {
    fn kind(&self) -> &'static str {
        "rabbitmq"
    }

    async fn subscribe(&self, sub: &Subscription) -> Result<Box<dyn Consumer>, SourceError> {
        let queue =
            sub.queue.clone().ok_or_else(|| SourceError("a rabbitmq trigger needs `queue`".into()))?;
        let connection = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .map_err(err("connecting"))?;
        let channel = connection.create_channel().await.map_err(err("opening a channel"))?;
        channel.confirm_select(ConfirmSelectOptions::default()).await.map_err(err("confirm.select"))?;
        let prefetch = u16::try_from(sub.max_in_flight).unwrap_or(u16::MAX);
        channel.basic_qos(prefetch, BasicQosOptions::default()).await.map_err(err("basic.qos"))?;
        let declared = channel
            .queue_declare(queue.as_str().into(), durable(), FieldTable::default())
            .await
            .map_err(err("declaring the queue"))?;
        channel
            .queue_declare(dead_letter_queue(&queue).into(), durable(), FieldTable::default())
            .await
            .map_err(err("declaring the dead-letter queue"))?;
        if let (Some(exchange), Some(key)) = (&sub.exchange, &sub.binding_key) {
            channel
                .queue_bind(
                    queue.as_str().into(),
                    exchange.as_str().into(),
                    key.as_str().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(err("binding the queue"))?;
        }
        let tag = format!("madeira-{}-{}", sub.replica, std::process::id());
        let consumer = channel
            .basic_consume(
                queue.as_str().into(),
                tag.into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(err("basic.consume"))?;
        Ok(Box::new(RabbitConsumer {
            _connection: connection,
            channel,
            consumer,
            queue,
            lag: Some(u64::from(declared.message_count())),
        }))
    }
}

struct RabbitConsumer {
    _connection: Connection,
    channel: Channel,
    consumer: lapin::Consumer,
    queue: String,
    lag: Option<u64>,
}

#[async_trait]
impl Consumer for RabbitConsumer {
    async fn next(&mut self) -> Result<Delivery, SourceError> {
        let delivery = match self.consumer.next().await {
            Some(Ok(d)) => d,
            Some(Err(e)) => return Err(SourceError::new("consuming", e)),
            None => return Err(SourceError("the broker cancelled the consumer".into())),
        };
        let table = delivery.properties.headers().clone().unwrap_or_default();
        let headers = crate::handle::header_map(
            table.inner().iter().filter_map(|(k, v)| text(v).map(|t| (k.as_str().to_string(), t))),
        );
        let deliveries =
            headers.get(DELIVERIES_HEADER).and_then(|n| n.parse::<u32>().ok()).unwrap_or(1).max(1);
        let id = match delivery.properties.message_id() {
            Some(id) if !id.as_str().is_empty() => id.as_str().to_string(),
            _ => format!("body-{:016x}", fnv1a(&delivery.data)),
        };
        let acker = RabbitAcker {
            channel: self.channel.clone(),
            acker: delivery.acker.clone(),
            queue: self.queue.clone(),
            body: delivery.data.clone(),
            properties: delivery.properties.clone(),
            deliveries,
        };
        Ok(Delivery {
            id,
            body: delivery.data,
            headers,
            subject: Some(delivery.routing_key.as_str().to_string()),
            deliveries,
            acker: Box::new(acker),
        })
    }

    async fn lag(&mut self) -> Option<u64> {
        let passive = QueueDeclareOptions { passive: true, ..Default::default() };
        if let Ok(q) =
            self.channel.queue_declare(self.queue.as_str().into(), passive, FieldTable::default()).await
        {
            self.lag = Some(u64::from(q.message_count()));
        }
        self.lag
    }
}

/// A header value as text, when it is text or a number.
fn text(v: &AMQPValue) -> Option<String> {
    Some(match v {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.as_str().to_string(),
        AMQPValue::Boolean(b) => b.to_string(),
        AMQPValue::ShortShortInt(n) => n.to_string(),
        AMQPValue::ShortShortUInt(n) => n.to_string(),
        AMQPValue::ShortInt(n) => n.to_string(),
        AMQPValue::ShortUInt(n) => n.to_string(),
        AMQPValue::LongInt(n) => n.to_string(),
        AMQPValue::LongUInt(n) => n.to_string(),
        AMQPValue::LongLongInt(n) => n.to_string(),
        _ => return None,
    })
}

/// FNV-1a, 64 bits: a stable id for messages without `message_id`.
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

struct RabbitAcker {
    channel: Channel,
    acker: lapin::Acker,
    queue: String,
    body: Vec<u8>,
    properties: BasicProperties,
    deliveries: u32,
}

impl RabbitAcker {
    /// Publishes a copy to `queue` with `extra` headers and waits for the broker's confirm.
    async fn publish_copy(&self, queue: &str, extra: &[(&str, String)]) -> Result<(), SourceError> {
        let mut table: BTreeMap<ShortString, AMQPValue> =
            self.properties.headers().clone().unwrap_or_default().inner().clone();
        for (k, v) in extra {
            table.insert((*k).into(), AMQPValue::LongString(LongString::from(v.clone())));
        }
        let mut properties =
            self.properties.clone().with_headers(FieldTable::from(table)).with_delivery_mode(2);
        if self.properties.message_id().is_none() {
            // Keep the id the copy's key is made from.
            properties = properties.with_message_id(format!("body-{:016x}", fnv1a(&self.body)).into());
        }
        let confirm = self
            .channel
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), &self.body, properties)
            .await
            .map_err(err("publishing"))?
            .await
            .map_err(err("publish confirm"))?;
        match confirm {
            Confirmation::Nack(_) => Err(SourceError("the broker refused the copy (nack)".into())),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Acker for RabbitAcker {
    async fn ack(&self) -> Result<(), SourceError> {
        self.acker.ack(BasicAckOptions::default()).await.map(|_| ()).map_err(err("ack"))
    }

    async fn retry(&self, delay: Duration, reason: &str, counted: bool) -> Result<(), SourceError> {
        tokio::time::sleep(delay).await;
        if !counted {
            let requeue = BasicNackOptions { multiple: false, requeue: true };
            return self.acker.nack(requeue).await.map(|_| ()).map_err(err("nack"));
        }
        let next = (self.deliveries + 1).to_string();
        self.publish_copy(&self.queue, &[(DELIVERIES_HEADER, next), (REASON_HEADER, reason.to_string())])
            .await?;
        self.ack().await
    }

    async fn dead_letter(&self, reason: &str) -> Result<(), SourceError> {
        let dead = dead_letter_queue(&self.queue);
        let extra = [(REASON_HEADER, reason.to_string()), ("x-madeira-queue", self.queue.clone())];
        self.publish_copy(&dead, &extra).await?;
        self.ack().await
    }
}
