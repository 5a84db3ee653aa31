//! After a restart: turns the stored open deliveries back into worker queues —
//! pending alert deliveries, and pending digests with the deliveries merged into
//! them — and marks failed what can no longer be sent (a channel removed from the
//! config, a test interrupted by the restart).

use std::collections::HashMap;
use std::sync::Arc;

use madeira_store::DeliveryRow;
use tokio::sync::mpsc;

use crate::model::Alert;
use crate::render::Mentions;
use crate::route::Router;
use crate::worker::{Item, Queued, WorkerMsg};

type Queues = HashMap<String, Vec<Queued>>;

pub(crate) fn rebuild(
    rows: Vec<DeliveryRow>,
    alerts: &HashMap<String, Arc<Alert>>,
    router: &Router,
    workers: &HashMap<String, mpsc::UnboundedSender<WorkerMsg>>,
) -> (Queues, Vec<DeliveryRow>) {
    let mentions_for = |alert: &Alert, channel: &str| {
        router.route(alert).into_iter().find(|(c, _)| c == channel).map(|(_, m)| m).unwrap_or_default()
    };
    let mut members: HashMap<String, Vec<Queued>> = HashMap::new();
    let mut pending = Vec::new();
    let mut failed = Vec::new();
    for row in rows {
        let fail = |mut row: DeliveryRow, why: &str| {
            row.status = "failed".into();
            row.last_error = Some(why.to_string());
            row
        };
        if !workers.contains_key(&row.channel) {
            let why = format!("channel `{}` is no longer configured", row.channel);
            failed.push(fail(row, &why));
            continue;
        }
        let merged = row.status == "merged";
        match (row.status.as_str(), row.kind.as_str()) {
            (_, "test") => failed.push(fail(row, "interrupted by a restart")),
            ("pending", "digest") => pending.push(Entry::Row(row)),
            _ => {
                let Some(alert) = row.alert_id.as_ref().and_then(|id| alerts.get(id)).cloned() else {
                    failed.push(fail(row, "its alert is no longer stored"));
                    continue;
                };
                let mentions = mentions_for(&alert, &row.channel);
                let q = Queued { item: Item::Alert(alert), mentions, row };
                match q.row.digest_id.clone() {
                    Some(digest) if merged => members.entry(digest).or_default().push(q),
                    _ => pending.push(Entry::Queued(q)),
                }
            }
        }
    }
    let mut queues: Queues = HashMap::new();
    for entry in pending {
        let q = match entry {
            Entry::Row(row) => {
                let inner = members.remove(&row.id).unwrap_or_default();
                let mut mentions = Mentions::default();
                for m in &inner {
                    mentions.users.extend(m.mentions.users.iter().cloned());
                    mentions.mobiles.extend(m.mentions.mobiles.iter().cloned());
                    mentions.all |= m.mentions.all;
                }
                mentions.users.dedup();
                mentions.mobiles.dedup();
                Queued { row, item: Item::Digest(inner), mentions }
            }
            Entry::Queued(q) => q,
        };
        queues.entry(q.row.channel.clone()).or_default().push(q);
    }
    (queues, failed)
}

enum Entry {
    Row(DeliveryRow),
    Queued(Queued),
}
