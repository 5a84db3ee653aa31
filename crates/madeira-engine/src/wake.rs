//! Cross-replica wake-ups over Redis pub/sub: a replica that queued work for
//! another (a forwarded operator action) publishes on `madeira:wake:<replica>`, and
//! the holder's subscriber wakes its inbox at once; a replica that gave back a
//! global throttle permit publishes on `madeira:permits`, and every replica retries
//! its waiters for that node. Redis is an accelerator, never
//! the source of truth: while it is unreachable (or not configured) the inbox polls
//! the store every `poll` instead, so results stay the same and only latency
//! grows. Both connections reconnect with backoff.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::envelope::Envelope;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The channel a replica listens on.
pub(crate) fn channel(replica: &str) -> String {
    format!("madeira:wake:{replica}")
}

/// Where freed permits are announced, as `<node index> <flow>`.
const PERMITS: &str = "madeira:permits";

/// Cheap to clone: publish wake-ups, and learn when this replica is woken.
#[derive(Clone)]
pub(crate) struct Wake {
    inner: Arc<Inner>,
}

struct Inner {
    url: Option<String>,
    publish: mpsc::Sender<(String, String)>,
    /// True while the subscriber is connected: the inbox may then poll slowly.
    subscribed: AtomicBool,
    woken: Notify,
}

/// The receiving end of `Wake::notify`, run by `Wake::spawn`.
pub(crate) struct Publisher(mpsc::Receiver<(String, String)>);

impl Wake {
    pub fn new(url: Option<String>) -> (Self, Publisher) {
        let (publish, rx) = mpsc::channel(4096);
        let inner = Inner { url, publish, subscribed: AtomicBool::new(false), woken: Notify::new() };
        (Self { inner: Arc::new(inner) }, Publisher(rx))
    }

    /// Asks `replica` to look at its inbox now (best effort: dropped when Redis is
    /// down or absent; the target's polling finds the work anyway).
    pub fn notify(&self, replica: &str) {
        if self.inner.url.is_some() {
            let _ = self.inner.publish.try_send((channel(replica), "1".into()));
        }
    }

    /// Tells every replica a permit of `(flow, node)` was given back (best effort).
    pub fn permit_freed(&self, flow: &str, node: usize) {
        if self.inner.url.is_some() {
            let _ = self.inner.publish.try_send((PERMITS.into(), format!("{node} {flow}")));
        }
    }

    /// Resolves when this replica was woken through Redis.
    pub async fn woken(&self) {
        self.inner.woken.notified().await;
    }

    /// Whether wake-ups currently arrive (Redis configured and subscribed).
    pub fn live(&self) -> bool {
        self.inner.subscribed.load(Ordering::Relaxed)
    }

    /// Starts the publisher and the subscriber for `me` (nothing without Redis).
    pub fn spawn(
        &self,
        me: &str,
        publisher: Publisher,
        engine: mpsc::Sender<Envelope>,
        cancel: CancellationToken,
    ) -> Vec<JoinHandle<()>> {
        let Some(url) = self.inner.url.clone() else {
            return Vec::new();
        };
        let client = match redis::Client::open(url.as_str()) {
            Ok(client) => client,
            Err(e) => {
                warn!(error = %e, "redis url rejected; coordinating through the store only");
                return Vec::new();
            }
        };
        let span = info_span!("wake", replica = %me);
        let publish =
            tokio::spawn(publish_loop(client.clone(), publisher.0, cancel.clone()).instrument(span.clone()));
        let subscribe = tokio::spawn(
            subscribe_loop(client, channel(me), self.inner.clone(), engine, cancel).instrument(span),
        );
        vec![publish, subscribe]
    }
}

async fn publish_loop(
    client: redis::Client,
    mut rx: mpsc::Receiver<(String, String)>,
    cancel: CancellationToken,
) {
    let mut conn: Option<redis::aio::MultiplexedConnection> = None;
    loop {
        let (target, payload) = tokio::select! {
            _ = cancel.cancelled() => return,
            next = rx.recv() => match next { Some(next) => next, None => return },
        };
        if conn.is_none() {
            conn = tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
                .await
                .ok()
                .and_then(Result::ok);
        }
        let Some(c) = conn.as_mut() else {
            debug!(target = %target, "redis unreachable; wake-up dropped (the target polls)");
            continue;
        };
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(&target).arg(&payload);
        let sent = publish.query_async::<i64>(c);
        match tokio::time::timeout(CONNECT_TIMEOUT, sent).await {
            Ok(Ok(_)) => {}
            _ => {
                debug!(target = %target, "redis publish failed; reconnecting on the next wake-up");
                conn = None;
            }
        }
    }
}

async fn subscribe_loop(
    client: redis::Client,
    channel: String,
    inner: Arc<Inner>,
    engine: mpsc::Sender<Envelope>,
    cancel: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let connected = async {
            let mut pubsub =
                tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub()).await.ok()?.ok()?;
            pubsub.subscribe(&[channel.as_str(), PERMITS]).await.ok()?;
            Some(pubsub)
        };
        let pubsub = tokio::select! {
            _ = cancel.cancelled() => return,
            pubsub = connected => pubsub,
        };
        if let Some(pubsub) = pubsub {
            info!(channel = %channel, "subscribed to wake-ups");
            inner.subscribed.store(true, Ordering::Relaxed);
            // Anything published while we were away is found by this first look.
            inner.woken.notify_one();
            backoff = Duration::from_millis(100);
            let mut messages = pubsub.into_on_message();
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    msg = messages.next() => match msg {
                        Some(msg) if msg.get_channel_name() == PERMITS => {
                            if let Some(poll) = permit_poll(&msg.get_payload::<String>().unwrap_or_default()) {
                                let _ = engine.try_send(poll);
                            }
                        }
                        Some(_) => inner.woken.notify_one(),
                        None => break,
                    },
                }
            }
            inner.subscribed.store(false, Ordering::Relaxed);
            warn!(channel = %channel, "redis subscription lost; polling the store until it is back");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// `<node index> <flow>` from the permits channel.
fn permit_poll(payload: &str) -> Option<Envelope> {
    let (node, flow) = payload.split_once(' ')?;
    Some(Envelope::PermitPoll { flow: flow.to_string(), node: node.parse().ok()? })
}
