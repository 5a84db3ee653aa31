//! Sub-flow attempts: a `run: {flow}` node's attempt starts a child run of the
//! other flow (same business date, trigger `subflow`, actor `run:<parent>/<node>`,
//! idempotency key from parent run + node + attempt, so a replayed start — a
//! recovered attempt keeps its number — finds the same child instead of making
//! a second one) and stays RUNNING until the child ends. The child's end is
//! told by the commit that wrote it: the engine that commits a run's end wakes
//! the attempt waiting for it (`Children::ended`, right after the commit); the
//! attempt then reads the child from the store and ends with its outputs, or
//! fails naming the child's root cause (retried by the node's retry policy: a
//! retry is a new attempt, so a new child). A child ended on another replica, or
//! a wake lost to a crash, is found by the attempt's own store check every
//! `CHECK_EVERY`. The parent's cancel (or the node's timeout) cancels the child.
//! A child that ends on another replica than its parent's holder is told to
//! that holder right after the commit, as a node-level `after` is
//! (`crate::node_after`): through its inbox (`run_commands` action
//! `child_ended`, woken over Redis), whose answer wakes the waiting attempt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madeira_core::subflow::{ChildEnd, SubflowDef, child_actor, child_end, child_key};
use serde_json::Value as Json;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::executor::{AttemptResult, Job};
use crate::{ActionRequest, EngineError, EngineHandle, TriggerRequest};

/// How often a waiting attempt reads its child from the store anyway (a wake
/// lost to a crash or to an unreachable inbox): a safety net, not the path.
pub const CHECK_EVERY: Duration = Duration::from_secs(10);

/// The inbox action telling a replica that the child run `run_id` ended.
pub(crate) const CHILD_ENDED: &str = "child_ended";

/// Attempts waiting for a child run's end, by child run id (this process only).
#[derive(Clone, Default)]
pub struct Children {
    waiting: Arc<Mutex<HashMap<String, Vec<oneshot::Sender<()>>>>>,
}

impl Children {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<oneshot::Sender<()>>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver told when `child` ends here.
    fn wait(&self, child: &str) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut waiting = self.lock();
        let list = waiting.entry(child.to_string()).or_default();
        list.retain(|s| !s.is_closed());
        list.push(tx);
        rx
    }

    /// `run_id` ended in a commit of this engine: wake whoever waits for it.
    pub(crate) fn ended(&self, run_id: &str) {
        let senders = self.lock().remove(run_id);
        for s in senders.into_iter().flatten() {
            let _ = s.send(());
        }
    }
}

/// The work of one attempt: a sub-flow's is its child run, a `foreach` node's one
/// shard per item, any other its executor's.
pub(crate) fn attempt_work(
    handle: &EngineHandle,
    executors: Arc<crate::Executors>,
    def: &madeira_core::NodeDef,
    fallback: bool,
    job: Job,
    token: CancellationToken,
) -> futures::future::BoxFuture<'static, AttemptResult> {
    match (&job.executor, &def.foreach) {
        (madeira_core::ExecutorDef::Subflow(sub), _) if !fallback => {
            Box::pin(attempt(handle.clone(), sub.clone(), job, token))
        }
        (_, Some(each)) if !fallback => {
            let store = handle.store.clone();
            Box::pin(crate::executor::foreach::run(executors, store, each.clone(), job, token))
        }
        _ => Box::pin(async move { executors.run(job, token).await }),
    }
}

/// Runs one attempt of a sub-flow node: starts (or finds) its child, waits for its end.
pub(crate) async fn attempt(
    handle: EngineHandle,
    def: SubflowDef,
    job: Job,
    cancel: CancellationToken,
) -> AttemptResult {
    let empty = Json::Object(Default::default());
    let params = job.input.get("params").unwrap_or(&empty);
    let nodes = job.input.get("nodes").unwrap_or(&empty);
    let biz_date = job.input.get("biz_date").and_then(Json::as_str);
    let child_params = match def.child_params(params, nodes, biz_date) {
        Ok(p) => p,
        Err(e) => return AttemptResult::failure(e, false),
    };
    let date = match biz_date.map(madeira_core::estate::parse_date).transpose() {
        Ok(d) => d,
        Err(e) => return AttemptResult::failure(format!("sub-flow: the run's business date: {e}"), false),
    };
    let actor = child_actor(&job.run_id, &job.node);
    let req = TriggerRequest {
        flow: def.flow.clone(),
        params: child_params,
        idempotency_key: Some(child_key(&job.run_id, &job.node, job.attempt)),
        trigger: madeira_core::subflow::TRIGGER.into(),
        actor: actor.clone(),
        version: None,
        biz_date: date,
        at_ms: None,
    };
    let child = match handle.trigger(req).await {
        Ok(out) => out,
        Err(e) => {
            let retryable = !matches!(
                e,
                EngineError::FlowNotFound(_) | EngineError::ObserveOnly(_) | EngineError::BadBizDate(_)
            );
            return AttemptResult::failure(
                format!("sub-flow `{}`: child run not started: {e}", def.flow),
                retryable,
            );
        }
    };
    let child_id = child.run_id;
    let mut log = match child.created {
        true => format!("[madeira] started child run {child_id} of flow {}\n", def.flow),
        false => format!("[madeira] child run {child_id} of flow {} (started before)\n", def.flow),
    };
    info!(run_id = %job.run_id, node = %job.node, child = %child_id, created = child.created, "sub-flow child run");
    let deadline = tokio::time::sleep(job.timeout);
    tokio::pin!(deadline);
    loop {
        let woken = handle.children.wait(&child_id);
        match handle.snapshot(&child_id).await {
            Ok(snap) => match child_end(&snap) {
                ChildEnd::Running => {}
                ChildEnd::Succeeded(outputs) => {
                    log.push_str(&format!("[madeira] child run {child_id} succeeded\n"));
                    return AttemptResult::Success { outputs, log };
                }
                ChildEnd::Failed(error) => {
                    log.push_str(&format!("[madeira] {error}\n"));
                    return AttemptResult::Failure { error, retryable: true, log };
                }
            },
            Err(e) => {
                warn!(child = %child_id, error = %e, "sub-flow: cannot read the child run; trying again")
            }
        }
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = &mut deadline => {
                let why = format!("timed out after {}s; child run {child_id} cancelled", job.timeout.as_secs());
                cancel_child(&handle, &child_id, &actor, &format!("parent node {} timed out", job.node)).await;
                return AttemptResult::failure(why, true);
            }
            _ = cancel.cancelled() => {
                let reason = format!("parent run {} node {} stopped", job.run_id, job.node);
                cancel_child(&handle, &child_id, &actor, &reason).await;
                return AttemptResult::failure(format!("aborted; child run {child_id} cancelled"), false);
            }
        }
    }
}

impl EngineHandle {
    /// Runs that ended in a commit here: the parent of each sub-flow child among
    /// them, when another replica holds it, is told through its inbox.
    pub(crate) async fn tell_parents(&self, ended: Vec<String>) {
        for child in ended {
            let owner = match self.store.subflow_parent(&child).await {
                Ok(Some((_, Some(owner)))) if owner != self.holder.owner => owner,
                Ok(_) => continue,
                Err(e) => {
                    warn!(run_id = %child, error = %e, "sub-flow: cannot read the ended run's parent; it finds the end at its store check");
                    continue;
                }
            };
            let cmd = madeira_store::RunCommand {
                id: 0,
                run_id: child,
                target: owner.clone(),
                action: CHILD_ENDED.into(),
                node: None,
                actor: "engine".into(),
                reason: None,
                created_at: crate::now_ms(),
            };
            match self.store.send_command(&cmd).await {
                Ok(_) => self.wake.notify(&owner),
                Err(e) => {
                    warn!(run_id = %cmd.run_id, error = %e, "sub-flow: cannot tell the parent's holder")
                }
            }
        }
    }

    /// The inbox's side of `tell_parents`: wake the attempt waiting for the child.
    pub(crate) async fn child_ended(&self, cmd: madeira_store::RunCommand) {
        self.children.ended(&cmd.run_id);
        if let Err(e) = self.store.answer_command(cmd.id, r#"{"ok":true}"#, crate::now_ms()).await {
            tracing::debug!(command = cmd.id, error = %e, "cannot answer a child_ended notice");
        }
    }
}

async fn cancel_child(handle: &EngineHandle, child: &str, actor: &str, reason: &str) {
    let req = ActionRequest {
        run_id: child.to_string(),
        node: None,
        kind: None,
        actor: actor.to_string(),
        reason: Some(reason.to_string()),
    };
    match handle.act(req).await {
        Ok(()) => info!(child, reason, "sub-flow: child run cancelled"),
        Err(e) => warn!(child, error = %e, "sub-flow: child run not cancelled (it may have ended)"),
    }
}
