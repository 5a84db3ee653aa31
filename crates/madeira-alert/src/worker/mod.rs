//! One delivery worker per channel: sends its queue in order within the channel's
//! rate limit; the last post the window allows is a digest of every message
//! waiting, sent `digest_wait` after the first of them queued (or as soon as the
//! window frees a second post), so a burst's overflow goes out within the window.
//! A failing receiver backs the whole channel off with jittered exponential delays
//! (a robot's "slow down" waits a whole window); every change of a delivery is
//! written to the store, so a restart picks up what was pending. Alertmanager
//! batches instead: each post carries every pending alert plus those still firing,
//! and firing ones are re-sent periodically (an update or a reminder is a re-post).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use madeira_core::RetryPolicy;
use madeira_store::{AlertBatch, AlertStore, DeliveryRow};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::channel::{self, Answer, Outgoing};
use crate::clock::Clock;
use crate::config::ChannelSpec;
use crate::metrics::AlertMetrics;
use crate::model::Alert;
use crate::render::{Content, Mentions};
use crate::window::Window;

mod batch;

/// What every worker shares.
pub(crate) struct Shared {
    pub store: Arc<dyn AlertStore>,
    pub clock: Arc<dyn Clock>,
    pub metrics: AlertMetrics,
    pub base: Option<String>,
    pub retry: RetryPolicy,
    pub give_up_after_ms: i64,
    pub resend_every_ms: i64,
}

/// The answer to `madeira alerts test CHANNEL`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TestOutcome {
    pub channel: String,
    pub delivered: bool,
    pub error: Option<String>,
}

pub(crate) enum Item {
    Alert(Arc<Alert>),
    Digest(Vec<Queued>),
    Test(oneshot::Sender<TestOutcome>),
}

/// A delivery waiting in a worker's queue.
pub(crate) struct Queued {
    pub row: DeliveryRow,
    pub item: Item,
    pub mentions: Mentions,
}

pub(crate) enum WorkerMsg {
    Deliver(Vec<Queued>),
    /// An alert already firing (after a restart), for Alertmanager's re-sends.
    Track(Arc<Alert>),
    /// Answer once everything received before is done and nothing is due now.
    Settle(oneshot::Sender<()>),
    /// This replica stopped aggregating alerts: forget queued deliveries and
    /// tracked alerts (the new leader sends them); keep test messages.
    Reset,
}

pub(crate) struct Worker {
    spec: ChannelSpec,
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<WorkerMsg>,
    http: reqwest::Client,
    queue: VecDeque<Queued>,
    window: Window,
    blocked_until: i64,
    failures: u32,
    firing: BTreeMap<String, Arc<Alert>>,
    next_resend: i64,
    settle: Vec<oneshot::Sender<()>>,
}

impl Worker {
    pub fn new(
        spec: ChannelSpec,
        shared: Arc<Shared>,
        http: reqwest::Client,
    ) -> (Self, mpsc::UnboundedSender<WorkerMsg>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let per_ms = i64::try_from(spec.rate_per.as_millis()).unwrap_or(60_000);
        let window = Window::new(spec.rate_count, per_ms);
        let worker = Self {
            spec,
            shared,
            rx,
            http,
            queue: VecDeque::new(),
            window,
            blocked_until: 0,
            failures: 0,
            firing: BTreeMap::new(),
            next_resend: 0,
            settle: Vec::new(),
        };
        (worker, tx)
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        loop {
            let now = self.shared.clock.now_ms();
            let wake = self.next_step(now);
            if wake.is_some_and(|t| t <= now) {
                self.step(now).await;
                continue;
            }
            for waiter in self.settle.drain(..) {
                let _ = waiter.send(());
            }
            let sleep = match wake {
                Some(at) => self.shared.clock.sleep_until(at),
                None => Box::pin(std::future::pending()),
            };
            tokio::select! {
                _ = cancel.cancelled() => break,
                msg = self.rx.recv() => match msg {
                    Some(msg) => {
                        self.accept(msg);
                        while let Ok(more) = self.rx.try_recv() {
                            self.accept(more);
                        }
                    }
                    None => break,
                },
                _ = sleep => {}
            }
        }
        debug!(channel = %self.spec.name, pending = self.queue.len(), "delivery worker stopped");
    }

    fn accept(&mut self, msg: WorkerMsg) {
        match msg {
            WorkerMsg::Deliver(items) => {
                for q in items {
                    if matches!(q.item, Item::Test(_)) {
                        self.queue.push_front(q);
                    } else {
                        self.queue.push_back(q);
                    }
                }
            }
            WorkerMsg::Settle(waiter) => self.settle.push(waiter),
            WorkerMsg::Reset => {
                self.queue.retain(|q| matches!(q.item, Item::Test(_)));
                self.firing.clear();
                self.blocked_until = 0;
                self.failures = 0;
            }
            WorkerMsg::Track(alert) => {
                if self.spec.kind.batches() {
                    self.firing.insert(alert.id.clone(), alert);
                    self.next_resend = self.shared.clock.now_ms() + self.shared.resend_every_ms;
                }
            }
        }
    }

    /// When the worker has something to do next (`None`: wait for messages).
    fn next_step(&mut self, now: i64) -> Option<i64> {
        if matches!(self.queue.front(), Some(Queued { item: Item::Test(_), .. })) {
            return Some(now);
        }
        let mut next = None;
        if let Some(front) = self.queue.front() {
            let since = front.row.created_at;
            let first = self.window.free_at(now).max(self.blocked_until);
            let second = self.window.free_for(now, 2);
            next = Some(if self.spec.kind.batches() || second <= first {
                first
            } else {
                // `first` is the window's last post: let the digest gather, but not
                // past the moment the window frees another one.
                first.max(since.saturating_add(self.digest_wait_ms()).min(second))
            });
        } else if self.spec.kind.batches() && !self.firing.is_empty() {
            next = Some(self.next_resend.max(self.blocked_until).max(self.window.free_at(now)));
        }
        next
    }

    async fn step(&mut self, now: i64) {
        if matches!(self.queue.front(), Some(Queued { item: Item::Test(_), .. })) {
            if let Some(test) = self.queue.pop_front() {
                self.send_test(test, now).await;
            }
            return;
        }
        if self.spec.kind.batches() {
            self.send_batch(now).await;
            return;
        }
        let available = self.window.available(now);
        if self.queue.len() > available && available <= 1 && self.queue.len() > 1 {
            self.merge(now).await;
        }
        if let Some(front) = self.queue.pop_front() {
            self.send_one(front, now).await;
        }
    }

    /// Merges every queued message into one digest at the front of the queue.
    async fn merge(&mut self, now: i64) {
        let mut digest_row = None;
        let mut members = Vec::new();
        let mut rows = Vec::new();
        for q in self.queue.drain(..) {
            match q.item {
                Item::Digest(inner) if digest_row.is_none() => {
                    digest_row = Some(q.row);
                    members.extend(inner);
                }
                Item::Digest(inner) => {
                    let mut row = q.row;
                    row.status = "merged".into();
                    rows.push(row);
                    members.extend(inner);
                }
                _ => members.push(q),
            }
        }
        let row = digest_row.unwrap_or_else(|| DeliveryRow {
            id: uuid::Uuid::now_v7().to_string(),
            alert_id: None,
            channel: self.spec.name.clone(),
            kind: "digest".into(),
            status: "pending".into(),
            attempts: 0,
            last_error: None,
            digest_id: None,
            created_at: now,
            sent_at: None,
        });
        let mut newly = 0;
        for r in &mut rows {
            r.digest_id = Some(row.id.clone());
        }
        for m in &mut members {
            if m.row.status != "merged" {
                newly += 1;
            }
            m.row.status = "merged".into();
            m.row.digest_id = Some(row.id.clone());
            rows.push(m.row.clone());
        }
        rows.push(row.clone());
        self.shared.metrics.suppressed(&self.spec.name, "merged", newly);
        info!(channel = %self.spec.name, merged = members.len(), "rate limit reached: merging into a digest");
        self.save(rows).await;
        let mut mentions = Mentions::default();
        for m in &members {
            merge_mentions(&mut mentions, &m.mentions);
        }
        self.queue.push_front(Queued { row, item: Item::Digest(members), mentions });
    }

    async fn send_one(&mut self, mut q: Queued, now: i64) {
        let content = content_of(&q);
        let answer = self.post(&content, &q.mentions, now).await;
        let delivered = answer == Answer::Ok;
        let mut rows = Vec::new();
        if delivered {
            self.count_sent(&q);
        }
        let give_up = self.record(&mut q.row, &answer, now);
        if let Item::Digest(members) = &mut q.item {
            for m in members.iter_mut() {
                if delivered {
                    m.row.sent_at = Some(now);
                }
                if give_up {
                    m.row.status = "failed".into();
                }
                rows.push(m.row.clone());
            }
        }
        rows.push(q.row.clone());
        self.save(rows).await;
        if !delivered && !give_up {
            self.queue.push_front(q);
        }
    }

    /// Updates a delivery after an attempt and the channel's backoff; returns true
    /// when the delivery is given up.
    fn record(&mut self, row: &mut DeliveryRow, answer: &Answer, now: i64) -> bool {
        row.attempts += 1;
        match answer {
            Answer::Ok => {
                row.status = "sent".into();
                row.sent_at = Some(now);
                row.last_error = None;
                false
            }
            Answer::SlowDown(e) | Answer::Failed(e) => {
                row.last_error = Some(self.spec.scrubber.scrub(e));
                if now - row.created_at > self.shared.give_up_after_ms {
                    row.status = "failed".into();
                    error!(channel = %self.spec.name, delivery = %row.id, "delivery given up after retrying too long");
                    return true;
                }
                false
            }
        }
    }

    /// Posts one message; counts it against the window when the receiver answered.
    async fn post(&mut self, content: &Content, mentions: &Mentions, now: i64) -> Answer {
        let out = Outgoing { content, mentions, now_ms: now, base: self.shared.base.as_deref() };
        let answer = match channel::build(&self.spec, &out) {
            Err(e) => Answer::Failed(e),
            Ok(req) => {
                let mut call = self.http.post(req.url).timeout(self.spec.timeout).body(req.body);
                for (name, value) in req.headers {
                    call = call.header(name, value);
                }
                match call.send().await {
                    Err(e) => Answer::Failed(describe(e)),
                    Ok(resp) => {
                        self.window.record(now);
                        let status = resp.status().as_u16();
                        let text = resp.text().await.unwrap_or_default();
                        channel::read_answer(self.spec.kind, status, &text)
                    }
                }
            }
        };
        self.after(&answer, now);
        answer
    }

    fn after(&mut self, answer: &Answer, now: i64) {
        let channel = &self.spec.name;
        match answer {
            Answer::Ok => {
                self.failures = 0;
                self.blocked_until = 0;
            }
            Answer::SlowDown(e) => {
                self.failures += 1;
                self.blocked_until = now + self.window_ms();
                self.shared.metrics.failure(channel);
                self.shared.metrics.suppressed(channel, "rate_limited", 1);
                warn!(channel = %channel, answer = %self.spec.scrubber.scrub(e), "receiver says slow down; waiting a window");
            }
            Answer::Failed(e) => {
                self.failures += 1;
                let delay = self.shared.retry.delay(self.failures, rand::random::<f64>());
                self.blocked_until = now + i64::try_from(delay.as_millis()).unwrap_or(60_000);
                self.shared.metrics.failure(channel);
                warn!(
                    channel = %channel,
                    error = %self.spec.scrubber.scrub(e),
                    retry_in_ms = self.blocked_until - now,
                    "alert delivery failed; will retry"
                );
            }
        }
    }

    fn digest_wait_ms(&self) -> i64 {
        i64::try_from(self.spec.digest_wait.as_millis()).unwrap_or(10_000)
    }

    fn window_ms(&self) -> i64 {
        i64::try_from(self.spec.rate_per.as_millis()).unwrap_or(60_000)
    }

    fn count_sent(&self, q: &Queued) {
        let m = &self.shared.metrics;
        match &q.item {
            Item::Alert(_) if q.row.kind == "resolved" => m.sent(&self.spec.name, "resolved", 1),
            Item::Alert(a) => m.sent(&self.spec.name, a.severity.as_str(), 1),
            Item::Digest(members) => members.iter().for_each(|member| self.count_sent(member)),
            Item::Test(_) => m.sent(&self.spec.name, "test", 1),
        }
    }

    async fn save(&self, deliveries: Vec<DeliveryRow>) {
        let batch = AlertBatch { deliveries, ..AlertBatch::default() };
        if let Err(e) = self.shared.store.write_alerts(&batch).await {
            error!(channel = %self.spec.name, error = %e, "cannot save delivery state");
        }
    }
}

fn content_of(q: &Queued) -> Content {
    match &q.item {
        Item::Alert(a) if q.row.kind == "resolved" => Content::Resolved(a.clone()),
        Item::Alert(a) if q.row.kind == "update" => Content::Update(a.clone()),
        Item::Alert(a) if q.row.kind == "reminder" => Content::Reminder(a.clone()),
        Item::Alert(a) => Content::Firing(a.clone()),
        Item::Digest(members) => Content::Digest(
            members
                .iter()
                .filter_map(|m| match &m.item {
                    Item::Alert(a) => Some(a.clone()),
                    _ => None,
                })
                .collect(),
        ),
        Item::Test(_) => Content::Test { channel: q.row.channel.clone() },
    }
}

fn merge_mentions(into: &mut Mentions, from: &Mentions) {
    for u in &from.users {
        if !into.users.contains(u) {
            into.users.push(u.clone());
        }
    }
    for m in &from.mobiles {
        if !into.mobiles.contains(m) {
            into.mobiles.push(m.clone());
        }
    }
    into.all |= from.all;
}

/// A transport error without its URL (which holds the key), with its causes.
fn describe(e: reqwest::Error) -> String {
    let timeout = e.is_timeout();
    let connect = e.is_connect();
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    if timeout {
        text.push_str(" (timed out)");
    } else if connect {
        text.push_str(" (cannot connect)");
    }
    text
}
