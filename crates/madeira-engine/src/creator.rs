//! Run creation, group-committed: concurrent triggers are collected and created in
//! one store transaction (idempotency key and `on_overlap` still decided inside it,
//! run by run), so a burst of triggers costs one durable commit, not one each. A
//! run the store admitted to start (written ADMITTED, `start`) is written held by
//! this replica's lease in that same transaction (no claim of its own) and goes
//! straight to the engine with its fresh snapshot and trace as `Envelope::Start`,
//! whose `Command::Start` takes it RUNNING in the engine's next group commit.
//! Killed between the two commits, the run stays ADMITTED, and
//! recovery starts it.
//!
//! Nothing is answered before its commit. A batch the store refuses is tried
//! again run by run, so one row the database cannot take (a poison row) fails
//! only its own request; when the store cannot write at all, every request of
//! the batch gets `StoreError::Unavailable` (503) and no run is announced.

use std::sync::Arc;

use madeira_core::{FlowDef, RunSnapshot};
use madeira_store::{CreateOutcome, NewRun, Store};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::EngineError;
use crate::envelope::Envelope;
use crate::health::StoreHealth;
use crate::lease::Holder;

const MAX_BATCH: usize = 512;

pub(crate) struct CreateRequest {
    pub run: NewRun,
    pub flow: Arc<FlowDef>,
    pub reply: oneshot::Sender<Result<CreateOutcome, EngineError>>,
}

pub(crate) async fn run(
    store: Arc<dyn Store>,
    health: Arc<StoreHealth>,
    mut rx: mpsc::Receiver<CreateRequest>,
    engine: mpsc::Sender<Envelope>,
    holder: Holder,
    waited: crate::waited::Waited,
    cancel: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            _ = cancel.cancelled() => return,
            request = rx.recv() => match request {
                Some(r) => r,
                None => return,
            },
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        // Runs admitted to start are written held by this replica's lease, so
        // they need no claim transaction (one commit per batch, not one per run).
        let lease = holder.lease_now();
        let runs: Vec<NewRun> =
            batch.iter().map(|r| NewRun { lease: Some(lease.clone()), ..r.run.clone() }).collect();
        // Known before the waits are written: a success committed meanwhile looks them up.
        waited.add(&runs);
        let created = match store.create_runs(&runs).await {
            Ok(outcomes) => Ok(outcomes.into_iter().map(Ok).collect::<Vec<_>>()),
            Err(e) if runs.len() > 1 && !e.is_unavailable() => {
                warn!(error = %e, runs = runs.len(), "a batch of run creations was refused; creating them one by one");
                let mut each = Vec::with_capacity(runs.len());
                for run in &runs {
                    each.push(store.create_run(run).await);
                }
                Ok(each)
            }
            Err(e) => Err(e),
        };
        if let Ok(outcomes) = &created
            && outcomes.iter().any(Result::is_ok)
        {
            health.wrote();
        }
        match created {
            Ok(outcomes) => {
                let mut replies = Vec::with_capacity(outcomes.len());
                let mut ok = Vec::with_capacity(outcomes.len());
                for (request, outcome) in batch.into_iter().zip(outcomes) {
                    match outcome {
                        Ok(outcome) => ok.push((request, outcome)),
                        Err(e) => {
                            health.failed("creating a run", &e);
                            error!(error = %e, flow = %request.run.flow, "creating a run failed");
                            replies.push((request.reply, not_created(&e)));
                        }
                    }
                }
                for (reply, e) in replies {
                    let _ = reply.send(Err(e));
                }
                let (batch, outcomes): (Vec<_>, Vec<_>) = ok.into_iter().unzip();
                for (request, outcome) in batch.into_iter().zip(outcomes) {
                    if let CreateOutcome::Created { run_id, start: true, .. } = &outcome {
                        let fresh = Some({
                            let trace = crate::trace::RunTrace::from_new(&request.run);
                            let mut snap = RunSnapshot::new(run_id.clone(), request.flow, request.run.params);
                            snap.biz_date = request.run.biz_date;
                            Box::new((snap, trace))
                        });
                        let start = Envelope::Start { run_id: run_id.clone(), fresh };
                        if engine.send(start).await.is_err() {
                            let _ = request.reply.send(Err(EngineError::ShuttingDown));
                            continue;
                        }
                    }
                    let _ = request.reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                health.failed("creating runs", &e);
                error!(error = %e, runs = runs.len(), "creating runs failed");
                for request in batch {
                    let _ = request.reply.send(Err(not_created(&e)));
                }
            }
        }
    }
}

/// The answer for a request whose run was not created because of `e`.
fn not_created(e: &madeira_store::StoreError) -> EngineError {
    let message = format!("run not created: {e}");
    EngineError::Store(match e.is_unavailable() {
        true => madeira_store::StoreError::Unavailable(message),
        false => madeira_store::StoreError::Refused(message),
    })
}
