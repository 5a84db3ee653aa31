//! `SidecarExecutor`: runs an attempt of a `sidecar` node on a live sidecar of its
//! group that declares the job. `shards: N` fans the attempt into N assignments
//! (MADEIRA_SHARD_INDEX/TOTAL, each with its own idempotency key `…:s<index>`);
//! the node succeeds when every shard has, and a retry only runs the shards that
//! have not (kept in the store as each succeeds: `kept_shards`, so also after a
//! control-plane restart). `shards: all` broadcasts: one shard pinned to each live sidecar of the
//! group (in name order), never moved. An assignment on a sidecar that is lost or
//! refuses it moves to another sidecar of the group.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use madeira_core::ExecutorDef;
use madeira_core::model::{SidecarDef, SidecarRoute};
use madeira_engine::{AttemptResult, Executor, Job};
use madeira_proto::v1::{Assignment, AttemptResult as Reported, Cancel, Outcome};
use madeira_proto::{ControlMessage, ControlMsg};
use serde_json::{Map, Value as Json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::Fleet;
use crate::kept_shards::KeptShards;
use crate::registry::{Event, Outbound, Pending};
use crate::routing::{Candidate, pick};

pub struct SidecarExecutor {
    fleet: Fleet,
    kept: Arc<KeptShards>,
}

impl SidecarExecutor {
    pub fn new(fleet: Fleet) -> Self {
        Self { fleet, kept: Arc::default() }
    }
}

/// A successful shard's outputs (a JSON object; anything else counts as none).
fn success_outputs(r: &Reported) -> Option<Map<String, Json>> {
    if Outcome::try_from(r.outcome) != Ok(Outcome::Success) {
        return None;
    }
    match serde_json::from_str::<Json>(&r.outputs_json) {
        Ok(Json::Object(map)) => Some(map),
        _ => Some(Map::new()),
    }
}

/// How one shard ended.
enum ShardEnd {
    Done(Box<Reported>),
    Failed { error: String, retryable: bool },
}

#[async_trait]
impl Executor for SidecarExecutor {
    async fn execute(&self, job: Job, cancel: CancellationToken) -> AttemptResult {
        let ExecutorDef::Sidecar(def) = &job.executor else {
            return AttemptResult::failure("not a sidecar node", false);
        };
        let pins = def.is_broadcast().then(|| live_names(&self.fleet, def));
        let total = pins.as_ref().map_or(def.shards.max(1), |p| u32::try_from(p.len()).unwrap_or(u32::MAX));
        if total == 0 {
            let error = format!(
                "shards: all, but no live sidecar of group `{}` declares job `{}`",
                def.group, def.job
            );
            return AttemptResult::failure(error, true);
        }
        // A broadcast's shards follow the live sidecars, so a retry runs them all again.
        let keep = total > 1 && pins.is_none();
        let done: BTreeMap<u32, Map<String, Json>> = match keep {
            true => self.kept.load(&self.fleet, &job).await,
            false => BTreeMap::new(),
        };
        let todo: Vec<u32> = (0..total).filter(|i| !done.contains_key(i)).collect();
        let runs = todo.iter().map(|&shard| {
            let fan = Fanout {
                shard,
                total,
                sharded: total > 1 || pins.is_some(),
                pin: pins.as_ref().map(|p| p[shard as usize].clone()),
            };
            let (job, cancel) = (&job, cancel.clone());
            async move {
                let end = run_shard(&self.fleet, job, def, fan, cancel).await;
                if let (true, ShardEnd::Done(r)) = (keep, &end)
                    && let Some(outputs) = success_outputs(r)
                {
                    self.kept.keep(&self.fleet, job, shard, &outputs).await;
                }
                end
            }
        });
        let sharded = total > 1 || def.is_broadcast();
        let ends = futures::future::join_all(runs).await;
        let mut logs: String = done
            .keys()
            .map(|s| format!("--- shard {s}/{total}: succeeded earlier, not run again ---\n"))
            .collect();
        let mut outputs = done;
        let mut failures = Vec::new();
        for (shard, end) in todo.into_iter().zip(ends) {
            match end {
                ShardEnd::Done(r) => {
                    if sharded {
                        logs.push_str(&format!("--- shard {shard}/{total} ---\n"));
                    }
                    logs.push_str(&String::from_utf8_lossy(&r.log_tail));
                    match (success_outputs(&r), Outcome::try_from(r.outcome)) {
                        (Some(map), _) => {
                            outputs.insert(shard, map);
                        }
                        (None, Ok(Outcome::Failed)) => failures.push((shard, r.error.clone(), false)),
                        (None, _) => failures.push((shard, r.error.clone(), true)),
                    }
                }
                ShardEnd::Failed { error, retryable } => {
                    logs.push_str(&format!("[madeira] shard {shard}: {error}\n"));
                    failures.push((shard, error, retryable));
                }
            }
        }
        if failures.is_empty() {
            self.kept.forget(&job);
            let outputs = if !sharded {
                outputs.into_values().next().unwrap_or_default()
            } else {
                let list: Vec<Json> = outputs.into_values().map(Json::Object).collect();
                Map::from_iter([("shards".to_string(), Json::Array(list))])
            };
            return AttemptResult::Success { outputs, log: logs };
        }
        let retryable = failures.iter().all(|(_, _, r)| *r);
        let error = if !sharded {
            failures[0].1.clone()
        } else {
            let parts: Vec<String> = failures.iter().map(|(s, e, _)| format!("shard {s}: {e}")).collect();
            format!("{} of {total} shards failed: {}", failures.len(), parts.join("; "))
        };
        AttemptResult::Failure { error, retryable, log: logs }
    }

    fn waiting_reason(&self, def: &ExecutorDef) -> Option<String> {
        let ExecutorDef::Sidecar(def) = def else {
            return None;
        };
        let state = self.fleet.state();
        let live = state.sidecars.values().any(|s| s.live() && s.group == def.group && s.declares(&def.job));
        (!live).then(|| format!("no live sidecar of group `{}` declares job `{}`", def.group, def.job))
    }
}

/// The idempotency key a shard's job sees: the node's, plus `:s<index>` when the
/// node is sharded (SPEC §4), so each shard can recognise its own repeat.
pub fn shard_key(key: &str, shard: u32, sharded: bool) -> String {
    if sharded { format!("{key}:s{shard}") } else { key.to_string() }
}

fn live_key(job: &Job) -> madeira_engine::livelog::AttemptKey {
    (job.run_id.clone(), job.node.clone(), job.attempt)
}

/// The live sidecars of the group declaring the job, in name order (a broadcast's shards).
fn live_names(fleet: &Fleet, def: &SidecarDef) -> Vec<String> {
    let state = fleet.state();
    let mut names: Vec<String> = state
        .sidecars
        .iter()
        .filter(|(_, s)| s.live() && s.group == def.group && s.declares(&def.job))
        .map(|(name, _)| name.clone())
        .collect();
    names.sort();
    names
}

/// What a resumed attempt found while it waited.
enum Resume {
    /// Claimed by a sidecar here, or nobody may still run it: go on.
    Go,
    /// Another replica relayed its result through the store.
    Relayed(Box<Reported>),
    Aborted,
}

/// An attempt in flight when its run was resumed (a restart, or a run taken over
/// from another replica) may still run on (or have finished on) a sidecar: wait
/// for it to claim the attempt (an orphan in its hello, or a spooled result), or
/// for the replica it reported to to relay its result (`relay`), until it can no
/// longer be alive (`Fleet::resume_deadline`), before placing it anew, so it
/// does not run twice.
async fn wait_for_claim(
    fleet: &Fleet,
    job: &Job,
    group: &str,
    key: &(String, u32),
    cancel: &CancellationToken,
) -> Resume {
    let mut watch = fleet.resume_watch(job).await;
    let mut changed = fleet.inner.changed.subscribe();
    let mut next_look = std::time::Instant::now();
    loop {
        {
            let state = fleet.state();
            if state.inbox.contains_key(key)
                || state.orphans.contains_key(key)
                || state.unacked.contains_key(key)
            {
                return Resume::Go;
            }
        }
        // The store is asked once a `RELAY_POLL`, not at every change of the fleet.
        if std::time::Instant::now() >= next_look {
            if let Some(r) = fleet.relayed(job, key.1).await {
                return Resume::Relayed(Box::new(r));
            }
            if fleet.may_place_anew(&mut watch, group).await {
                info!(key = %key.0, shard = key.1, "no sidecar claimed the resumed attempt and no result was relayed; placing it anew");
                return Resume::Go;
            }
            next_look = (std::time::Instant::now() + crate::relay::RELAY_POLL).min(watch.next_decision());
        }
        let nap = next_look.saturating_duration_since(std::time::Instant::now());
        tokio::select! {
            _ = tokio::time::timeout(nap, changed.changed()) => {}
            _ = cancel.cancelled() => return Resume::Aborted,
        }
    }
}

/// Which shard of how many, and the sidecar it is pinned to (broadcast).
struct Fanout {
    shard: u32,
    total: u32,
    /// `MADEIRA_SHARD_*` and `:s<index>` keys are given.
    sharded: bool,
    pin: Option<String>,
}

/// Runs one shard to its end, moving it when its sidecar is lost or refuses (a
/// pinned broadcast shard fails instead).
async fn run_shard(
    fleet: &Fleet,
    job: &Job,
    def: &SidecarDef,
    fan: Fanout,
    cancel: CancellationToken,
) -> ShardEnd {
    let shard = fan.shard;
    let key = (shard_key(&job.idempotency_key, shard, fan.sharded), shard);
    if job.resumed {
        match wait_for_claim(fleet, job, &def.group, &key, &cancel).await {
            Resume::Go => {}
            Resume::Relayed(r) => return ShardEnd::Done(r),
            Resume::Aborted => return ShardEnd::Failed { error: "aborted".into(), retryable: false },
        }
    }
    if let Some(result) = fleet.take_delivered(&key, job) {
        info!(run_id = %job.run_id, node = %job.node, shard, "using the result a sidecar delivered after a restart");
        return ShardEnd::Done(Box::new(result));
    }
    if let Some(result) = fleet.take_kept(&key, job) {
        info!(run_id = %job.run_id, node = %job.node, shard, "using the result kept since a commit that failed");
        return ShardEnd::Done(Box::new(result));
    }
    let mut excluded: HashSet<String> = HashSet::new();
    let mut last_error = String::new();
    loop {
        let (tx_events, mut events) = mpsc::unbounded_channel();
        let placed = place(fleet, job, def, &fan, &excluded, tx_events);
        let Some((sidecar, assignment_id, tx)) = placed else {
            if let Some(pin) = &fan.pin {
                let error =
                    if last_error.is_empty() { format!("sidecar {pin} is not live") } else { last_error };
                return ShardEnd::Failed { error, retryable: true };
            }
            let waited = tokio::select! {
                live = fleet.wait_live(&def.group, &def.job, fleet.inner.options.lost_after) => live,
                _ = cancel.cancelled() => return ShardEnd::Failed { error: "aborted".into(), retryable: false },
            };
            if waited && excluded.is_empty() {
                continue;
            }
            let why = if last_error.is_empty() {
                format!("no live sidecar of group `{}` declares job `{}`", def.group, def.job)
            } else {
                last_error
            };
            return ShardEnd::Failed { error: why, retryable: true };
        };
        // Where the attempt runs, for its `attempts.host` (a move names the next one too).
        if let Some(engine) = fleet.inner.engine.get() {
            let _ = engine.attempt_placed(&job.run_id, &job.node, job.attempt, &sidecar).await;
        }
        tokio::select! {
            event = events.recv() => match event {
                Some(Event::Result(r)) => return ShardEnd::Done(r),
                Some(Event::Refused { sidecar, reason }) => {
                    last_error = format!("sidecar {sidecar} refused: {reason}");
                    excluded.insert(sidecar);
                }
                Some(Event::Lost { sidecar }) => {
                    warn!(run_id = %job.run_id, node = %job.node, shard, sidecar = %sidecar, "sidecar lost mid-attempt; moving the attempt");
                    last_error = format!("sidecar {sidecar} was lost");
                    excluded.insert(sidecar);
                }
                None => return ShardEnd::Failed { error: "the fleet dropped the attempt".into(), retryable: true },
            },
            _ = cancel.cancelled() => {
                return abort(fleet, &sidecar, &assignment_id, tx, &mut events).await;
            }
        }
    }
}

/// Cancels the assignment and waits for the sidecar to report it gone.
async fn abort(
    fleet: &Fleet,
    sidecar: &str,
    assignment_id: &str,
    tx: Option<Outbound>,
    events: &mut mpsc::UnboundedReceiver<Event>,
) -> ShardEnd {
    if let Some(tx) = tx {
        let cancel = Cancel {
            assignment_id: assignment_id.to_string(),
            reason: "aborted by the control plane".into(),
        };
        let _ = tx.send(Ok(ControlMessage { msg: Some(ControlMsg::Cancel(cancel)) })).await;
        // The attempt ends once the sidecar says the process is gone (or is lost),
        // unless the control plane itself stops first.
        let shutdown = fleet.inner.shutdown.clone();
        tokio::select! {
            _ = tokio::time::timeout(Duration::from_secs(300), events.recv()) => {}
            _ = shutdown.cancelled() => {}
        }
    }
    fleet.state().pending.remove(assignment_id);
    info!(sidecar = %sidecar, assignment = %assignment_id, "attempt aborted");
    ShardEnd::Failed { error: "aborted".into(), retryable: false }
}

/// Chooses a sidecar, registers the waiter and sends the assignment (or adopts an
/// attempt a reconnecting sidecar still runs). `None` when no sidecar can take it.
fn place(
    fleet: &Fleet,
    job: &Job,
    def: &SidecarDef,
    fan: &Fanout,
    excluded: &HashSet<String>,
    events: mpsc::UnboundedSender<Event>,
) -> Option<(String, String, Option<Outbound>)> {
    let (shard, total) = (fan.shard, fan.total);
    let mut state = fleet.state();
    let key = (shard_key(&job.idempotency_key, shard, fan.sharded), shard);
    // Only a sidecar of the node's group may claim its attempt (a hello's list is its word).
    if let Some(orphan) = state.orphans.remove(&key)
        && state.sidecars.get(&orphan.sidecar).is_some_and(|s| s.group == def.group)
    {
        info!(run_id = %job.run_id, node = %job.node, sidecar = %orphan.sidecar, "adopting the attempt the sidecar still runs");
        if orphan.epoch > 0 {
            state.epochs.insert(key.clone(), (orphan.epoch, std::time::Instant::now()));
        }
        let tx = state.sidecars.get(&orphan.sidecar).and_then(|s| s.tx.clone());
        state.pending.insert(
            orphan.assignment_id.clone(),
            Pending { sidecar: orphan.sidecar.clone(), attempt: live_key(job), key: key.clone(), events },
        );
        return Some((orphan.sidecar, orphan.assignment_id, tx));
    }
    let candidates: Vec<Candidate> = state
        .sidecars
        .iter()
        .filter(|(name, s)| {
            s.live()
                && s.group == def.group
                && s.declares(&def.job)
                && !excluded.contains(*name)
                && fan.pin.as_ref().is_none_or(|pin| pin == *name)
        })
        .map(|(name, _)| Candidate { name: name.clone(), busy: state.busy(name) })
        .collect();
    let route_key = match &def.route {
        SidecarRoute::Hash(expr) => {
            let empty = Json::Object(Map::new());
            let params = job.input.get("params").unwrap_or(&empty);
            let nodes = job.input.get("nodes").unwrap_or(&empty);
            let k = expr.eval(params, nodes).unwrap_or_default();
            if total > 1 { format!("{k}#{shard}") } else { k }
        }
        _ => String::new(),
    };
    let counter = state.round_robin.entry((def.group.clone(), def.job.clone())).or_insert(0);
    let chosen = pick(&def.route, &candidates, counter, &route_key, rand::random::<f64>())?;
    let name = candidates[chosen].name.clone();
    let tx = state.sidecars.get(&name).and_then(|s| s.tx.clone())?;
    let assignment_id = uuid::Uuid::now_v7().to_string();
    let epoch = state.place_epoch(&key);
    let assignment = Assignment {
        epoch,
        assignment_id: assignment_id.clone(),
        job: def.job.clone(),
        run_id: job.run_id.clone(),
        flow: job.flow.clone(),
        node: job.node.clone(),
        attempt: job.attempt,
        idempotency_key: key.0.clone(),
        input_json: job.input.to_string(),
        timeout_ms: u64::try_from(job.timeout.as_millis()).unwrap_or(u64::MAX),
        traceparent: job.traceparent.clone().unwrap_or_default(),
        shard_index: shard,
        shard_total: if fan.sharded { total } else { 0 },
        no_retry_exit_codes: job.no_retry_exit_codes.clone(),
    };
    let message = ControlMessage { msg: Some(ControlMsg::Assign(assignment)) };
    if tx.try_send(Ok(message)).is_err() {
        return None;
    }
    let pending = Pending { sidecar: name.clone(), attempt: live_key(job), key, events };
    state.pending.insert(assignment_id.clone(), pending);
    Some((name, assignment_id, Some(tx)))
}
