//! The engine's intake: every source of envelopes, and the one place the loop
//! waits. Callers, attempts, the run creator, leases, Redis wake-ups, the inbox of
//! forwarded actions and the after-policy clock send on one channel (`sources`
//! starts the tasks among them); timers and the periodic sweeps are armed here
//! (`next`). A new source of commands is one more sender on the channel or one
//! more arm of `next`, never a new path into the step.

use std::collections::VecDeque;
use std::sync::Arc;

use madeira_core::Command;
use madeira_store::Store;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Interval;
use tokio_util::sync::CancellationToken;

use super::hosts;
use crate::envelope::Envelope;
use crate::health::StoreHealth;
use crate::lease::Holder;
use crate::timers::{Timer, TimerKind, Timers};
use crate::{EngineHandle, EngineOptions};

pub(crate) struct Intake {
    pub(super) rx: mpsc::Receiver<Envelope>,
    pub(super) tx: mpsc::Sender<Envelope>,
    /// Envelopes the engine queued for itself (recovery, permit polls, immediate results).
    pub(super) pending: VecDeque<Envelope>,
    /// Taken by `sources` to start the group-committing run creator.
    creator: Option<mpsc::Receiver<crate::creator::CreateRequest>>,
    /// Taken by `sources` to start the Redis publisher.
    publisher: Option<crate::wake::Publisher>,
    ticks: Option<Ticks>,
}

/// The periodic arms of `next`.
struct Ticks {
    sweep: Interval,
    permit_poll: Interval,
    offer: Interval,
    watch: Interval,
}

/// What woke the loop.
pub(crate) enum Input {
    /// Envelopes for the step: at least one, or none when only placements
    /// deferred for a commit are due.
    Batch(Vec<Envelope>),
    /// Look for unfinished runs again (the sweep, or the store came back up).
    Reconcile,
    /// Offer parked runs to replicas that have their sidecars.
    Offer,
    /// Ask the store again for the global permits waited for.
    PermitPoll,
    /// Shutting down: stop starting attempts, keep committing results.
    Drain,
    /// Nothing but another turn (the watch tick).
    Again,
    /// Stop: cancelled, or every sender is gone.
    Stop,
}

/// What `next` waits on besides the channel, lent by the other components.
pub(crate) struct Wait<'a> {
    pub drain: &'a CancellationToken,
    pub cancel: &'a CancellationToken,
    /// Not draining: timers fire and the sweeps run.
    pub live: bool,
    pub timers: &'a mut Timers,
    /// When placements deferred for a commit are due (`hosts.rs`).
    pub hosts_due: Option<tokio::time::Instant>,
    pub store_up: &'a Notify,
    /// Runs are parked here that another replica might take.
    pub offer: bool,
    /// Permits are counted in the store (several replicas).
    pub shared: bool,
    pub batch_max: usize,
}

/// What the source tasks are started with.
pub(crate) struct SourceCtx<'a> {
    pub store: &'a Arc<dyn Store>,
    pub health: &'a Arc<StoreHealth>,
    pub handle: &'a EngineHandle,
    pub holder: &'a Holder,
    pub options: &'a EngineOptions,
    pub waited: &'a crate::waited::Waited,
}

/// The tasks `sources` started: the creator (tracked with the engine's tasks) and the rest.
pub(crate) struct Sources {
    pub creator: Option<futures::future::BoxFuture<'static, ()>>,
    pub helpers: Vec<JoinHandle<()>>,
}

impl Intake {
    pub fn new(
        (tx, rx): (mpsc::Sender<Envelope>, mpsc::Receiver<Envelope>),
        creator: mpsc::Receiver<crate::creator::CreateRequest>,
        publisher: crate::wake::Publisher,
    ) -> Self {
        Self {
            rx,
            tx,
            pending: VecDeque::new(),
            creator: Some(creator),
            publisher: Some(publisher),
            ticks: None,
        }
    }

    /// Starts the tasks that send on the channel and arms the periodic ticks.
    pub(super) async fn sources(&mut self, c: SourceCtx<'_>, cancel: &CancellationToken) -> Sources {
        let creator = self.creator.take().map(|rx| {
            let tx = self.tx.clone();
            let run = crate::creator::run(
                c.store.clone(),
                c.health.clone(),
                rx,
                tx,
                c.holder.clone(),
                c.waited.clone(),
                cancel.clone(),
            );
            Box::pin(run) as futures::future::BoxFuture<'static, ()>
        });
        let leases = crate::lease::spawn(c.store.clone(), c.holder.clone(), self.tx.clone(), cancel.clone());
        let probe = c.health.clone().spawn_probe(c.store.clone(), cancel.clone());
        let after_policy = crate::after_policy::spawn(c.handle.clone(), cancel.clone());
        let inbox = c.handle.spawn_inbox(c.options.inbox_poll, cancel.clone());
        let mut helpers = vec![leases, probe, after_policy, inbox];
        if let Some(publisher) = self.publisher.take() {
            let wake = c.handle.wake.clone();
            helpers.extend(wake.spawn(&c.holder.owner, publisher, self.tx.clone(), cancel.clone()));
        }
        let mut sweep = tokio::time::interval(c.options.sweep_every);
        sweep.tick().await;
        self.ticks = Some(Ticks {
            sweep,
            permit_poll: tokio::time::interval(c.options.inbox_poll),
            offer: tokio::time::interval(super::handover::OFFER_EVERY),
            watch: tokio::time::interval(super::watch::WATCH_EVERY),
        });
        Sources { creator, helpers }
    }

    /// The next input: envelopes queued here first (up to `batch_max`), else the
    /// first source to answer; a batch is topped up from the channel.
    pub(super) async fn next(&mut self, w: Wait<'_>) -> Input {
        if w.cancel.is_cancelled() {
            return Input::Stop;
        }
        if w.drain.is_cancelled() && w.live {
            return Input::Drain;
        }
        let mut batch = Vec::new();
        while batch.len() < w.batch_max {
            match self.pending.pop_front() {
                Some(envelope) => batch.push(envelope),
                None => break,
            }
        }
        if batch.is_empty() {
            let Some(t) = self.ticks.as_mut() else {
                return Input::Stop;
            };
            let live = w.live;
            tokio::select! {
                _ = w.cancel.cancelled() => return Input::Stop,
                _ = w.drain.cancelled(), if live => return Input::Drain,
                envelope = self.rx.recv() => match envelope {
                    Some(envelope) => batch.push(envelope),
                    None => return Input::Stop,
                },
                timer = w.timers.next(), if live => batch.push(timer_envelope(timer)),
                _ = hosts::until(w.hosts_due), if w.hosts_due.is_some() => {}
                _ = t.watch.tick(), if live => return Input::Again,
                _ = t.sweep.tick(), if live => return Input::Reconcile,
                _ = w.store_up.notified() => return Input::Reconcile,
                _ = t.offer.tick(), if live && w.shared && w.offer => return Input::Offer,
                _ = t.permit_poll.tick(), if live && w.shared => return Input::PermitPoll,
            }
        }
        while batch.len() < w.batch_max {
            match self.rx.try_recv() {
                Ok(envelope) => batch.push(envelope),
                Err(_) => break,
            }
        }
        Input::Batch(batch)
    }

    /// After the loop: takes no more envelopes and hands back the attempt results
    /// already queued (they are still committed).
    pub(super) fn close(&mut self) -> Vec<Envelope> {
        self.rx.close();
        let mut results = Vec::new();
        while let Ok(envelope) = self.rx.try_recv() {
            if matches!(envelope, Envelope::AttemptDone { .. }) {
                results.push(envelope);
            }
        }
        results
    }
}

fn timer_envelope(timer: Timer) -> Envelope {
    let Timer { run_id, node, kind } = timer;
    let cmd = match kind {
        TimerKind::RetryDue => Command::RetryDue { node },
        TimerKind::ConfirmFallback => Command::Fallback { node },
        TimerKind::ConfirmOverdue => return Envelope::ConfirmOverdue { run_id, node },
    };
    let audit = matches!(cmd, Command::Fallback { .. })
        .then(|| ("fallback".to_string(), Some("fallback_after elapsed without an answer".to_string())));
    Envelope::Command { run_id, cmd, actor: "engine".into(), audit, answer_to: None, reply: None }
}
