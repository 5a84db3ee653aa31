//! Operator actions on a run another replica holds: the receiving replica queues
//! the action in the store for the holder (`run_commands`), wakes it (Redis, see
//! `wake`), and waits for the answer; the holder's inbox task takes the action
//! and applies it through its own engine — the single exit — as if it had been
//! received there (same actor, same audit). An applied action's answer is written
//! in the same commit as the change; a refusal's, after it.

use std::time::{Duration, Instant};

use madeira_store::RunCommand;
use serde_json::{Value as Json, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info_span, warn};

use crate::envelope::Envelope;
use crate::{ActionRequest, EngineError, EngineHandle, NodeActionKind, clock::now_ms};

/// How long a caller waits for the holder before withdrawing the action.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
const ANSWER_POLL: Duration = Duration::from_millis(5);
/// An `adopt` offer older than this is ignored.
const STALE_OFFER_MS: i64 = 10_000;
/// Polling of the inbox while wake-ups flow (a safety net for lost messages).
const SLOW_POLL: Duration = Duration::from_secs(1);

impl EngineHandle {
    /// Sends `req` to `owner` (following the run if it moved on) and returns its answer.
    pub(crate) async fn forward(&self, req: ActionRequest, mut owner: String) -> Result<(), EngineError> {
        for _hop in 0..3 {
            let cmd = RunCommand {
                id: 0,
                run_id: req.run_id.clone(),
                target: owner.clone(),
                action: req.kind.map_or("cancel", NodeActionKind::name).to_string(),
                node: req.node.clone(),
                actor: req.actor.clone(),
                reason: req.reason.clone(),
                created_at: now_ms(),
            };
            let id = self.store.send_command(&cmd).await?;
            self.wake.notify(&owner);
            let answer = self.await_answer(id, &owner).await?;
            match answer.get("held_by").and_then(Json::as_str) {
                Some(next) if next != owner && next != self.holder.owner => owner = next.to_string(),
                Some(_) => break,
                None => return from_answer(&answer),
            }
        }
        Err(EngineError::HeldElsewhere { run: req.run_id, owner })
    }

    async fn await_answer(&self, id: i64, owner: &str) -> Result<Json, EngineError> {
        let mut deadline = Instant::now() + ANSWER_TIMEOUT;
        let mut withdrawn_tried = false;
        loop {
            if let Some(text) = self.store.command_answer(id).await? {
                return Ok(serde_json::from_str(&text).unwrap_or(Json::Null));
            }
            if Instant::now() >= deadline {
                if withdrawn_tried || self.store.withdraw_command(id).await? {
                    return Err(EngineError::HolderSilent { owner: owner.to_string() });
                }
                // Taken but not answered yet: give the holder one more period.
                withdrawn_tried = true;
                deadline = Instant::now() + ANSWER_TIMEOUT;
            }
            tokio::time::sleep(ANSWER_POLL).await;
        }
    }

    /// The holder's inbox: takes the actions queued for this replica when woken
    /// (or on a poll: fast while wake-ups are down) and applies each locally.
    /// Error policy: log and retry at the next look.
    pub(crate) fn spawn_inbox(&self, poll: Duration, cancel: CancellationToken) -> JoinHandle<()> {
        let handle = self.clone();
        let span = info_span!("inbox", replica = %self.holder.owner);
        tokio::spawn(
            async move {
                loop {
                    let wait = if handle.wake.live() { SLOW_POLL } else { poll };
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = handle.wake.woken() => {}
                        _ = tokio::time::sleep(wait) => {}
                    }
                    let commands = match handle.store.take_commands(&handle.holder.owner, now_ms()).await {
                        Ok(commands) => commands,
                        Err(e) => {
                            warn!(error = %e, "cannot read the inbox");
                            continue;
                        }
                    };
                    for cmd in commands {
                        let h = handle.clone();
                        tokio::spawn(async move { h.answer(cmd).await });
                    }
                }
            }
            .instrument(span),
        )
    }

    async fn answer(&self, cmd: RunCommand) {
        if cmd.action == crate::node_after::AFTER_MET {
            return self.node_after_met(cmd).await;
        }
        if cmd.action == crate::subflow::CHILD_ENDED {
            return self.child_ended(cmd).await;
        }
        if cmd.action == "adopt" {
            // An offer older than a few offer rounds is stale: its offerer has
            // resumed the run or offered it again since.
            if now_ms() - cmd.created_at > STALE_OFFER_MS {
                let answer = json!({"error": {"code": "stale", "message": "offer too old"}});
                let _ = self.store.answer_command(cmd.id, &answer.to_string(), now_ms()).await;
                return;
            }
            let adopt = Envelope::Adopt { run_id: cmd.run_id, from: cmd.actor };
            let answer = match self.send_envelope(adopt).await {
                Ok(()) => json!({"ok": true}),
                Err(e) => to_answer(&e),
            };
            if let Err(e) = self.store.answer_command(cmd.id, &answer.to_string(), now_ms()).await {
                warn!(command = cmd.id, error = %e, "cannot write the answer of an adopt command");
            }
            return;
        }
        let kind = match cmd.action.as_str() {
            "confirm" => Some(NodeActionKind::Confirm),
            "reject" => Some(NodeActionKind::Reject),
            "rerun" => Some(NodeActionKind::Rerun { downstream: false }),
            "rerun_downstream" => Some(NodeActionKind::Rerun { downstream: true }),
            "mark_success" => Some(NodeActionKind::MarkSuccess),
            "skip" => Some(NodeActionKind::Skip),
            _ => None,
        };
        let req =
            ActionRequest { run_id: cmd.run_id, node: cmd.node, kind, actor: cmd.actor, reason: cmd.reason };
        let answer = match self.act_on(req, Some(cmd.id)).await {
            // Written in the commit that applied it.
            Ok(()) => return,
            Err(EngineError::HeldElsewhere { owner, .. }) => json!({"held_by": owner}),
            Err(e) => to_answer(&e),
        };
        if let Err(e) = self.store.answer_command(cmd.id, &answer.to_string(), now_ms()).await {
            warn!(command = cmd.id, error = %e, "cannot write the answer of a forwarded action");
        }
    }
}

fn to_answer(e: &EngineError) -> Json {
    let (code, state) = match e {
        EngineError::Refused { refusal, .. } => ("refused", refused_state(refusal)),
        EngineError::RunNotFound(_) | EngineError::NodeNotFound { .. } | EngineError::FlowNotFound(_) => {
            ("not_found", None)
        }
        EngineError::ShuttingDown => ("shutting_down", None),
        _ => ("internal", None),
    };
    json!({"error": {"code": code, "message": e.to_string(), "state": state}})
}

fn refused_state(refusal: &madeira_core::Refusal) -> Option<String> {
    match refusal {
        madeira_core::Refusal::Node { state, .. } => Some(state.as_str().to_string()),
        madeira_core::Refusal::Run { state, .. } => Some(state.as_str().to_string()),
        _ => None,
    }
}

fn from_answer(answer: &Json) -> Result<(), EngineError> {
    if answer["ok"] == true {
        return Ok(());
    }
    let error = &answer["error"];
    Err(EngineError::Remote {
        code: error["code"].as_str().unwrap_or("internal").to_string(),
        message: error["message"].as_str().unwrap_or("the holder answered without a message").to_string(),
        state: error["state"].as_str().map(str::to_string),
    })
}
