//! The lease task: every third of the lease it renews the leases of the runs this
//! replica holds and takes over RUNNING runs whose holder stopped renewing (a
//! replica killed, partitioned or stuck), handing each to the engine as a
//! `Resume`. Error policy: log and try again at the next tick (a replica that
//! cannot renew loses its runs to the others, and its commits are then fenced).
//! A renewal that comes more than a lease after the last one (the process was
//! frozen, or the store out of reach) asks the engine to check which runs it
//! still holds (`Envelope::CheckHeld`) before it acts on them again. Only
//! durations of this process's monotonic clock are used here; the lease itself
//! is measured by the database's clock (`madeira_store::Lease`).

use std::sync::Arc;
use std::time::Duration;

use madeira_store::{Lease, LeaseStore};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::clock::now_ms;
use crate::envelope::Envelope;

/// Most runs taken over per tick.
const TAKEOVER_BATCH: u32 = 512;

/// Who this replica is and how long its hold on a run lasts without renewal.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    pub owner: String,
    pub lease: Duration,
}

impl Holder {
    pub fn lease_now(&self) -> Lease {
        let now = now_ms();
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX / 4);
        Lease { owner: self.owner.clone(), now_ms: now, until_ms: now + lease_ms }
    }
}

pub(crate) fn spawn(
    store: Arc<dyn LeaseStore>,
    holder: Holder,
    tx: mpsc::Sender<Envelope>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    let span = info_span!("lease", replica = %holder.owner);
    tokio::spawn(
        async move {
            let mut tick = tokio::time::interval((holder.lease / 3).max(Duration::from_millis(50)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut renewed = std::time::Instant::now();
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let asked = std::time::Instant::now();
                match store.renew_leases(&holder.lease_now()).await {
                    Ok(_) => {
                        // From the last renewal sent to this one's answer: a
                        // renewal held up by a partition counts its wait too.
                        let gap = renewed.elapsed();
                        renewed = asked;
                        if gap > holder.lease {
                            warn!(
                                unrenewed_ms = u64::try_from(gap.as_millis()).unwrap_or(u64::MAX),
                                "leases went unrenewed longer than they last; checking which runs this replica still holds"
                            );
                            if tx.send(Envelope::CheckHeld).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => warn!(error = %e, "cannot renew leases"),
                }
                match store.claim_expired(&holder.lease_now(), TAKEOVER_BATCH).await {
                    Ok(ids) => {
                        if !ids.is_empty() {
                            info!(runs = ids.len(), "took over runs whose lease expired");
                        }
                        for run_id in ids {
                            if tx.send(Envelope::Resume { run_id }).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => warn!(error = %e, "cannot take over expired runs"),
                }
            }
        }
        .instrument(span),
    )
}
