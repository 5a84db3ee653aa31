//! Alertmanager's batched posts (every pending alert plus those still firing, and
//! periodic re-sends) and test messages (one attempt, answered to the caller).

use std::sync::Arc;

use super::{Item, Queued, TestOutcome, Worker};
use crate::channel::Answer;
use crate::model::{Alert, AlertStatus};
use crate::render::{Content, Mentions};

impl Worker {
    pub(super) async fn send_batch(&mut self, now: i64) {
        let mut items: Vec<Queued> = self.queue.drain(..).collect();
        for q in &items {
            if let Item::Alert(alert) = &q.item {
                match alert.status {
                    AlertStatus::Resolved => self.firing.remove(&alert.id),
                    _ => self.firing.insert(alert.id.clone(), alert.clone()),
                };
            }
        }
        let mut alerts: Vec<Arc<Alert>> = items
            .iter()
            .filter_map(|q| match &q.item {
                Item::Alert(a) if a.status == AlertStatus::Resolved => Some(a.clone()),
                _ => None,
            })
            .collect();
        alerts.extend(self.firing.values().cloned());
        let answer = self.post(&Content::Digest(alerts), &Mentions::default(), now).await;
        let delivered = answer == Answer::Ok;
        let mut rows = Vec::new();
        let mut give_up = false;
        for q in &mut items {
            if delivered {
                self.count_sent(q);
            }
            give_up |= self.record(&mut q.row, &answer, now);
            rows.push(q.row.clone());
        }
        if delivered || items.is_empty() {
            self.next_resend = now + self.shared.resend_every_ms;
        }
        self.save(rows).await;
        if !delivered && !give_up {
            self.queue.extend(items.into_iter().filter(|q| q.row.status == "pending"));
        }
    }

    pub(super) async fn send_test(&mut self, mut q: Queued, now: i64) {
        let answer = self.post(&Content::Test { channel: self.spec.name.clone() }, &q.mentions, now).await;
        let (delivered, error) = match &answer {
            Answer::Ok => (true, None),
            Answer::SlowDown(e) | Answer::Failed(e) => (false, Some(self.spec.scrubber.scrub(e))),
        };
        q.row.attempts += 1;
        q.row.status = if delivered { "sent" } else { "failed" }.into();
        q.row.sent_at = delivered.then_some(now);
        q.row.last_error = error.clone();
        if delivered {
            self.shared.metrics.sent(&self.spec.name, "test", 1);
        } else {
            self.shared.metrics.failure(&self.spec.name);
        }
        self.save(vec![q.row.clone()]).await;
        if let Item::Test(reply) = q.item {
            let _ = reply.send(TestOutcome { channel: self.spec.name.clone(), delivered, error });
        }
    }
}
