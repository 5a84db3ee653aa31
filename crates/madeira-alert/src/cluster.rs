//! Alerts across replicas sharing one store. Every replica appends the alert
//! events of its own runs to the store's inbox; one replica at a time — the holder
//! of the `alerts` lease — aggregates the inbox, writes alerts and deliveries under
//! that lease (the write also deletes the events it consumed, so a crash in
//! between loses nothing and counts nothing twice) and sends them. When the leader
//! dies, another replica takes the lease once it runs out, reloads the open alerts
//! and pending deliveries, and carries on from the first unconsumed event.

use std::time::Duration;

use tracing::{error, info, warn};

use crate::aggregate::{Aggregator, Changes};
use crate::task::{AlertTask, Cluster, Event, Input, POLL_MS, ROLE};
use crate::worker::WorkerMsg;

/// How often a follower asks for the lease (it only gets it once the leader's ran out).
const CAMPAIGN_MS: i64 = 1000;
/// Most inbox events aggregated into one store write.
const INBOX_BATCH: u32 = 1024;
/// Most events kept while the store cannot take them (the oldest go first, logged).
const OUTBOX_MAX: usize = 100_000;

impl AlertTask {
    /// Shares aggregation with the other replicas of the store: `replica` is this
    /// replica's name, `lease` how long the aggregating replica's hold lasts
    /// without renewal (a killed leader is replaced after it).
    pub fn clustered(mut self, replica: impl Into<String>, lease: Duration) -> Self {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(15_000).max(POLL_MS * 4);
        self.cluster = Some(Cluster {
            replica: replica.into(),
            lease_ms,
            leading: false,
            campaign_at: 0,
            lease_until: 0,
            outbox: Vec::new(),
        });
        self
    }

    /// True when this replica aggregates: always alone, only as the leader in a cluster.
    pub(crate) fn aggregating(&self) -> bool {
        self.cluster.as_ref().is_none_or(|c| c.leading)
    }

    /// Queues an event for the inbox.
    pub(crate) fn queue_for_inbox(&mut self, event: &Event) {
        let Some(cluster) = &mut self.cluster else { return };
        if cluster.outbox.len() >= OUTBOX_MAX {
            error!(kept = OUTBOX_MAX, "the store has refused alert events for long: dropping the oldest");
            cluster.outbox.remove(0);
        }
        match serde_json::to_value(event) {
            Ok(body) => cluster.outbox.push(body),
            Err(e) => error!(error = %e, "cannot encode an alert event"),
        }
    }

    /// Appends the queued events to the store's inbox; kept for the next try on error.
    pub(crate) async fn flush_outbox(&mut self) {
        let now = self.shared.clock.now_ms();
        let Some(cluster) = &mut self.cluster else { return };
        if cluster.outbox.is_empty() {
            return;
        }
        match self.shared.store.push_alert_events(&cluster.outbox, now).await {
            Ok(()) => cluster.outbox.clear(),
            Err(e) => {
                warn!(error = %e, pending = cluster.outbox.len(), "cannot queue alert events; retrying")
            }
        }
    }

    /// One round: flush the outbox, keep or seek the lease, and as the leader
    /// aggregate what the inbox holds.
    pub(crate) async fn cluster_tick(&mut self) {
        self.flush_outbox().await;
        let now = self.shared.clock.now_ms();
        if self.cluster.as_ref().is_some_and(|c| now >= c.campaign_at) {
            self.campaign(now).await;
        }
        // Stop before the lease can run out unrenewed: another replica may take it then.
        if self.cluster.as_ref().is_some_and(|c| c.leading && now + 2 * POLL_MS >= c.lease_until) {
            self.step_down("its alerts lease is about to run out unrenewed");
        }
        if self.cluster.as_ref().is_some_and(|c| c.leading) {
            self.consume_inbox().await;
        }
    }

    /// At shutdown: queues what the channel still holds, pushes it, and gives the
    /// lease up so another replica leads at once.
    pub(crate) async fn leave_cluster(&mut self) {
        if self.cluster.is_none() {
            return;
        }
        while let Ok(input) = self.rx.try_recv() {
            if let Input::Event(event) = input {
                self.queue_for_inbox(&event);
            }
        }
        self.flush_outbox().await;
        let Some(c) = &self.cluster else { return };
        if c.leading {
            let now = self.shared.clock.now_ms();
            if let Err(e) = self.shared.store.lead(ROLE, &c.replica, now, -1).await {
                warn!(error = %e, "cannot give the alerts lease up; another replica takes it when it runs out");
            }
        }
    }

    async fn campaign(&mut self, now: i64) {
        let Some(c) = &self.cluster else { return };
        let (replica, lease_ms, was_leading) = (c.replica.clone(), c.lease_ms, c.leading);
        let answer = self.shared.store.lead(ROLE, &replica, now, lease_ms).await;
        let Some(c) = &mut self.cluster else { return };
        match answer {
            Ok(true) => {
                c.leading = true;
                c.campaign_at = now + lease_ms / 3;
                c.lease_until = now + lease_ms;
                if !was_leading {
                    info!(replica = %replica, "this replica now aggregates and sends the cluster's alerts");
                    if !self.recover().await {
                        self.step_down("it cannot load the open alerts");
                    }
                }
            }
            Ok(false) => {
                c.campaign_at = now + CAMPAIGN_MS;
                if was_leading {
                    self.step_down("another replica holds the alerts lease");
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot reach the store for the alerts lease");
                c.campaign_at = now + CAMPAIGN_MS.min(lease_ms / 3);
                if was_leading && now >= c.lease_until {
                    self.step_down("the alerts lease ran out");
                }
            }
        }
    }

    /// Stops aggregating: forgets the in-memory alerts and the workers' queues
    /// (the store keeps them for the next leader).
    pub(crate) fn step_down(&mut self, why: &str) {
        let Some(c) = &mut self.cluster else { return };
        if c.leading {
            warn!(replica = %c.replica, why, "this replica no longer aggregates alerts");
        }
        c.leading = false;
        self.agg = Aggregator::with_intervals(self.intervals);
        for worker in self.workers.values() {
            let _ = worker.send(WorkerMsg::Reset);
        }
    }

    /// Aggregates the inbox in order, one fenced store write per batch of events.
    async fn consume_inbox(&mut self) {
        loop {
            let events = match self.shared.store.alert_events(INBOX_BATCH).await {
                Ok(events) => events,
                Err(e) => {
                    warn!(error = %e, "cannot read the alert inbox");
                    return;
                }
            };
            if events.is_empty() {
                return;
            }
            let full = events.len() >= INBOX_BATCH as usize;
            let consumed: Vec<i64> = events.iter().map(|e| e.seq).collect();
            let now = self.shared.clock.now_ms();
            let mut out = Changes::default();
            for event in events {
                let seq = event.seq;
                match serde_json::from_value::<Event>(event.body) {
                    Ok(event) => self.aggregate(event, now, &mut out),
                    Err(e) => error!(seq, error = %e, "skipping an unreadable alert event"),
                }
            }
            self.agg.flush_due(now, &mut out);
            if !self.apply(out, consumed).await || !full {
                return;
            }
        }
    }
}
