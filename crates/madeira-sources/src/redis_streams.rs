//! Redis Streams (`redis`): a consumer group on a stream (created from the
//! stream's start with MKSTREAM), read with XREADGROUP as this replica's consumer.
//!
//! - An entry's body is its `payload` field (JSON); without one, its fields as a
//!   JSON object. Other fields are headers. Message id (default key): the
//!   `madeira_id` field of a copy, else the entry id.
//! - On connecting, the consumer first reads its own pending entries (those a
//!   killed predecessor of the same `replica_id` had in hand), and every 5 s
//!   claims entries idle for 30 s from other consumers (XAUTOCLAIM: a killed replica).
//! - Retry: after the delay, a copy with `madeira_deliveries` raised is XADDed and
//!   the original XACKed in one MULTI/EXEC; dead letters go to `<stream>.dead`
//!   with `madeira_reason` the same way.
//! - Lag: the group's `lag` from XINFO GROUPS (Redis ≥ 7).
//! - Reads are batches of `max_in_flight`: one batch may wait behind the messages
//!   in hand, so up to twice `max_in_flight` entries can be pending in the group.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamAutoClaimReply, StreamId, StreamInfoGroupsReply, StreamReadReply};

use crate::config::SourceConfig;
use crate::source::{Acker, Consumer, Delivery, Source, SourceError, Subscription};

pub const DELIVERIES_FIELD: &str = "madeira_deliveries";
pub const REASON_FIELD: &str = "madeira_reason";
pub const ID_FIELD: &str = "madeira_id";
/// Entries another consumer holds this long are claimed.
pub const CLAIM_IDLE: Duration = Duration::from_secs(30);
const CLAIM_EVERY: Duration = Duration::from_secs(5);
const BLOCK_MS: u64 = 1000;

pub struct RedisStreams {
    url: String,
}

impl RedisStreams {
    pub fn new(config: &SourceConfig) -> Self {
        Self { url: config.url.clone() }
    }
}

/// The dead-letter stream of `stream`.
pub fn dead_letter_stream(stream: &str) -> String {
    format!("{stream}.dead")
}

fn err(context: &str) -> impl Fn(redis::RedisError) -> SourceError + '_ {
    move |e| SourceError::new(context, e)
}

#[async_trait]
impl Source for RedisStreams {
    fn kind(&self) -> &'static str {
        "redis_streams"
    }

    async fn subscribe(&self, sub: &Subscription) -> Result<Box<dyn Consumer>, SourceError> {
        let stream =
            sub.stream.clone().ok_or_else(|| SourceError("a redis_streams trigger needs `stream`".into()))?;
        let group =
            sub.group.clone().ok_or_else(|| SourceError("a redis_streams trigger needs `group`".into()))?;
        let client = redis::Client::open(self.url.as_str()).map_err(err("redis URL"))?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_millis(BLOCK_MS + 5000)));
        let mut reader =
            client.get_multiplexed_async_connection_with_config(&config).await.map_err(err("connecting"))?;
        let writer =
            client.get_multiplexed_async_connection_with_config(&config).await.map_err(err("connecting"))?;
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&stream)
            .arg(&group)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut reader)
            .await;
        if let Err(e) = created
            && e.code() != Some("BUSYGROUP")
        {
            return Err(SourceError::new("creating the consumer group", e));
        }
        Ok(Box::new(RedisConsumer {
            reader,
            writer,
            stream,
            group,
            consumer: sub.replica.clone(),
            count: sub.max_in_flight.max(1),
            buffer: VecDeque::new(),
            own_pending_done: false,
            claimed_at: Instant::now(),
        }))
    }
}

struct RedisConsumer {
    reader: MultiplexedConnection,
    writer: MultiplexedConnection,
    stream: String,
    group: String,
    consumer: String,
    count: u32,
    buffer: VecDeque<StreamId>,
    own_pending_done: bool,
    claimed_at: Instant,
}

impl RedisConsumer {
    async fn read(&mut self, from: &str, block: bool) -> Result<Vec<StreamId>, SourceError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP").arg(&self.group).arg(&self.consumer).arg("COUNT").arg(self.count);
        if block {
            cmd.arg("BLOCK").arg(BLOCK_MS);
        }
        cmd.arg("STREAMS").arg(&self.stream).arg(from);
        let reply: Option<StreamReadReply> =
            cmd.query_async(&mut self.reader).await.map_err(err("XREADGROUP"))?;
        Ok(reply.map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect()).unwrap_or_default())
    }

    async fn claim(&mut self) -> Result<Vec<StreamId>, SourceError> {
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(&self.stream)
            .arg(&self.group)
            .arg(&self.consumer)
            .arg(CLAIM_IDLE.as_millis() as u64)
            .arg("0-0")
            .arg("COUNT")
            .arg(self.count)
            .query_async(&mut self.writer)
            .await
            .map_err(err("XAUTOCLAIM"))?;
        Ok(reply.claimed)
    }

    fn delivery(&self, entry: StreamId) -> Delivery {
        let mut fields: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in &entry.map {
            if let Ok(text) = redis::from_redis_value_ref::<String>(v) {
                fields.insert(k.clone(), text);
            }
        }
        let body = match fields.get("payload") {
            Some(p) => p.clone().into_bytes(),
            None => serde_json::to_vec(&fields).unwrap_or_default(),
        };
        let deliveries = fields.get(DELIVERIES_FIELD).and_then(|n| n.parse::<u32>().ok()).unwrap_or(1).max(1);
        let id = fields.get(ID_FIELD).cloned().unwrap_or_else(|| entry.id.clone());
        let headers = crate::handle::header_map(
            fields.iter().filter(|(k, _)| *k != "payload").map(|(k, v)| (k.clone(), v.clone())),
        );
        let acker = RedisAcker {
            conn: self.writer.clone(),
            stream: self.stream.clone(),
            group: self.group.clone(),
            entry: entry.id,
            fields,
            id: id.clone(),
            deliveries,
        };
        Delivery { id, body, headers, subject: None, deliveries, acker: Box::new(acker) }
    }
}

#[async_trait]
impl Consumer for RedisConsumer {
    async fn next(&mut self) -> Result<Delivery, SourceError> {
        loop {
            if let Some(entry) = self.buffer.pop_front() {
                return Ok(self.delivery(entry));
            }
            if !self.own_pending_done {
                // Entries this consumer name had in hand before a restart (their ids only
                // once: XREADGROUP from 0 returns pending entries without re-reading new ones).
                let mine = self.read("0", false).await?;
                if mine.is_empty() {
                    self.own_pending_done = true;
                }
                // Pending entries that were deleted come back with no fields: ack and skip them.
                for entry in mine {
                    if entry.map.is_empty() {
                        let _: redis::RedisResult<()> = redis::cmd("XACK")
                            .arg(&self.stream)
                            .arg(&self.group)
                            .arg(&entry.id)
                            .query_async(&mut self.writer)
                            .await;
                    } else {
                        self.buffer.push_back(entry);
                    }
                }
                if !self.own_pending_done && self.buffer.is_empty() {
                    self.own_pending_done = true;
                }
                continue;
            }
            if self.claimed_at.elapsed() >= CLAIM_EVERY {
                self.claimed_at = Instant::now();
                let claimed = self.claim().await?;
                self.buffer.extend(claimed);
                if !self.buffer.is_empty() {
                    continue;
                }
            }
            let fresh = self.read(">", true).await?;
            self.buffer.extend(fresh);
        }
    }

    async fn lag(&mut self) -> Option<u64> {
        let reply: StreamInfoGroupsReply =
            redis::cmd("XINFO").arg("GROUPS").arg(&self.stream).query_async(&mut self.writer).await.ok()?;
        let group = reply.groups.into_iter().find(|g| g.name == self.group)?;
        group.lag.map(|l| l as u64)
    }
}

struct RedisAcker {
    conn: MultiplexedConnection,
    stream: String,
    group: String,
    entry: String,
    fields: BTreeMap<String, String>,
    id: String,
    deliveries: u32,
}

impl RedisAcker {
    /// XADDs a copy of the entry to `stream` with `extra` fields and XACKs the original, atomically.
    async fn move_to(&self, stream: &str, extra: &[(&str, String)]) -> Result<(), SourceError> {
        let mut fields = self.fields.clone();
        fields.insert(ID_FIELD.to_string(), self.id.clone());
        for (k, v) in extra {
            fields.insert((*k).to_string(), v.clone());
        }
        let mut add = redis::cmd("XADD");
        add.arg(stream).arg("*");
        for (k, v) in &fields {
            add.arg(k).arg(v);
        }
        let mut pipe = redis::pipe();
        pipe.atomic()
            .add_command(add)
            .ignore()
            .cmd("XACK")
            .arg(&self.stream)
            .arg(&self.group)
            .arg(&self.entry)
            .ignore();
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn).await.map_err(err("moving the entry"))
    }
}

#[async_trait]
impl Acker for RedisAcker {
    async fn ack(&self) -> Result<(), SourceError> {
        let mut conn = self.conn.clone();
        redis::cmd("XACK")
            .arg(&self.stream)
            .arg(&self.group)
            .arg(&self.entry)
            .query_async::<()>(&mut conn)
            .await
            .map_err(err("XACK"))
    }

    async fn retry(&self, delay: Duration, reason: &str, counted: bool) -> Result<(), SourceError> {
        tokio::time::sleep(delay).await;
        let deliveries = if counted { self.deliveries + 1 } else { self.deliveries };
        self.move_to(
            &self.stream,
            &[(DELIVERIES_FIELD, deliveries.to_string()), (REASON_FIELD, reason.to_string())],
        )
        .await
    }

    async fn dead_letter(&self, reason: &str) -> Result<(), SourceError> {
        self.move_to(&dead_letter_stream(&self.stream), &[(REASON_FIELD, reason.to_string())]).await
    }
}
