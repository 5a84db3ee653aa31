//! A flow's lifecycle beyond apply and pause: deleting it (refused while runs are
//! active unless they are cancelled first, through the ordinary cancel action;
//! history kept or purged; audited in the deletion's transaction), and moving an
//! observe flow to governed and back (`promote`/`demote`, SPEC §11: a new version
//! with `observe` turned off or on, audited with the actor).

use madeira_core::{ExecutorDef, NodeAction, TriggerDef};
use madeira_store::{AuditRecord, Batch, DeleteFlow, DeleteOutcome};
use serde_json::json;

use crate::promote::{governed_source, observed_source};
use crate::{ActionRequest, EngineError, EngineHandle, clock::now_ms};

/// How often a delete with `cancel` cancels what is active and tries again
/// before it gives up (runs that keep starting).
const DELETE_ROUNDS: usize = 5;

#[derive(Debug, Clone)]
pub struct DeleteRequest {
    pub flow: String,
    /// Cancel active runs first instead of refusing.
    pub cancel: bool,
    /// Delete versions and runs too (the audit trail stays).
    pub purge: bool,
    pub actor: String,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteReport {
    pub flow: String,
    pub purged: bool,
    /// Runs of the flow kept readable (or, purged, deleted).
    pub runs: u64,
    pub cancelled: Vec<String>,
    /// Events that waited for the paused flow, dropped with it.
    pub events_dropped: u64,
}

#[derive(Debug, Clone)]
pub struct PromoteRequest {
    pub flow: String,
    /// The crontab line's schedule: the cron trigger the flow gets when it has
    /// none; when it has one, the two must agree.
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub actor: String,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromoteReport {
    pub flow: String,
    pub version: u32,
    pub observe: bool,
    /// False when the flow already was as asked (nothing applied, nothing audited).
    pub changed: bool,
    /// `(expression, timezone)` of each cron trigger.
    pub cron: Vec<(String, String)>,
    /// `(group, job)` of each sidecar node: what runs the flow once governed.
    pub jobs: Vec<(String, String)>,
    /// For the caller to fill (the engine does not see the fleet): e.g. jobs no
    /// live sidecar declares.
    pub warnings: Vec<String>,
}

impl EngineHandle {
    /// Deletes a flow (see `DeleteRequest`); answers once the deletion committed.
    pub async fn delete_flow(&self, req: DeleteRequest) -> Result<DeleteReport, EngineError> {
        if let Some(reason) = &req.reason {
            madeira_core::text::check_text("reason", reason).map_err(EngineError::BadText)?;
        }
        let mut cancelled = Vec::new();
        // Flows still waiting for this one (`after`, `flow_succeeded`): a warning
        // in the log and the audit entry; their next apply refuses the dangling name.
        let dependents: Vec<String> = self
            .flows
            .estate(self.store.as_ref())
            .await
            .map(|e| e.dependents_of(&req.flow).into_iter().map(str::to_string).collect())
            .unwrap_or_default();
        for _ in 0..DELETE_ROUNDS {
            let audit = AuditRecord {
                at: now_ms(),
                actor: req.actor.clone(),
                action: "delete_flow".into(),
                run_id: None,
                node: None,
                reason: req.reason.clone(),
                details: Some(
                    json!({"flow": req.flow, "purge": req.purge, "cancelled": cancelled, "dependents": dependents}),
                ),
            };
            let delete = DeleteFlow { flow: req.flow.clone(), purge: req.purge, audit, now_ms: now_ms() };
            match self.store.delete_flow(&delete).await? {
                DeleteOutcome::Deleted { runs, events_dropped } => {
                    let _ = self.flow_changes.send(req.flow.clone());
                    if !dependents.is_empty() {
                        tracing::warn!(flow = %req.flow, dependents = ?dependents, "deleted flow is still named by other flows' `after`/`flow_succeeded`; their runs will wait for it");
                    }
                    return Ok(DeleteReport {
                        flow: req.flow,
                        purged: req.purge,
                        runs,
                        cancelled,
                        events_dropped,
                    });
                }
                DeleteOutcome::NotFound => return Err(EngineError::FlowNotFound(req.flow)),
                DeleteOutcome::Active { runs } if !req.cancel => {
                    return Err(EngineError::FlowActive { flow: req.flow, runs });
                }
                DeleteOutcome::Active { runs } => {
                    for run_id in runs {
                        self.cancel_for_delete(&req, &run_id).await?;
                        cancelled.push(run_id);
                    }
                }
            }
        }
        let runs = self.active_runs(&req.flow).await?;
        Err(EngineError::FlowActive { flow: req.flow, runs })
    }

    async fn cancel_for_delete(&self, req: &DeleteRequest, run_id: &str) -> Result<(), EngineError> {
        let why = req.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
        let action = ActionRequest {
            run_id: run_id.to_string(),
            node: None,
            kind: None,
            actor: req.actor.clone(),
            reason: Some(format!("flow {} deleted{why}", req.flow)),
        };
        match self.act(action).await {
            // Ended on its own meanwhile: nothing left to cancel.
            Ok(()) | Err(EngineError::Refused { .. }) | Err(EngineError::RunNotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn active_runs(&self, flow: &str) -> Result<Vec<String>, EngineError> {
        let mut runs = Vec::new();
        for state in ["RUNNING", "QUEUED"] {
            let query = madeira_store::RunQuery {
                flow: Some(flow.to_string()),
                state: Some(state.into()),
                limit: 100,
                ..Default::default()
            };
            runs.extend(self.store.list_runs(&query).await?.into_iter().map(|r| r.id));
        }
        Ok(runs)
    }

    /// Turns an observe flow into a governed one: a new version without
    /// `observe: true` (with `req.cron` as its cron trigger when it had none).
    pub async fn promote(&self, req: PromoteRequest) -> Result<PromoteReport, EngineError> {
        let record = self
            .store
            .get_flow(&req.flow)
            .await?
            .ok_or_else(|| EngineError::FlowNotFound(req.flow.clone()))?;
        let def = self.flow(&req.flow, Some(record.latest_version)).await?;
        let crons = cron_triggers(&def);
        if let (Some(expr), false) = (&req.cron, crons.is_empty())
            && !crons.iter().any(|(e, _)| same_cron(e, expr))
        {
            let have: Vec<&str> = crons.iter().map(|(e, _)| e.as_str()).collect();
            return Err(EngineError::Lifecycle {
                code: "schedule_mismatch",
                message: format!(
                    "flow {} is scheduled `{}` but its crontab line says `{expr}`; apply the flow with the \
                     crontab's schedule (or fix the line) and promote again",
                    req.flow,
                    have.join("`, `")
                ),
            });
        }
        if !def.observe {
            return self.report(&req.flow, record.latest_version, false, Vec::new()).await;
        }
        let add = match (&req.cron, crons.is_empty()) {
            (Some(expr), true) => Some((expr.as_str(), req.timezone.as_deref().unwrap_or("UTC"))),
            (None, true) => {
                return Err(EngineError::Lifecycle {
                    code: "no_schedule",
                    message: format!(
                        "flow {} has no cron trigger and none was given; pass the crontab (`madeira promote {} \
                         --crontab FILE`) or apply the flow with its schedule first",
                        req.flow, req.flow
                    ),
                });
            }
            _ => None,
        };
        let source = governed_source(&record.source, add).map_err(|m| cannot_edit(&req.flow, m))?;
        self.apply_lifecycle(&req, &source, false, "promote").await
    }

    /// Turns a governed flow back into an observe flow (a new version with
    /// `observe: true`); its cron trigger stays, for missed-run detection.
    pub async fn demote(&self, req: PromoteRequest) -> Result<PromoteReport, EngineError> {
        let record = self
            .store
            .get_flow(&req.flow)
            .await?
            .ok_or_else(|| EngineError::FlowNotFound(req.flow.clone()))?;
        let def = self.flow(&req.flow, Some(record.latest_version)).await?;
        if def.observe {
            return self.report(&req.flow, record.latest_version, false, Vec::new()).await;
        }
        let source = observed_source(&record.source).map_err(|m| cannot_edit(&req.flow, m))?;
        self.apply_lifecycle(&req, &source, true, "demote").await
    }

    /// Applies the edited source, checks it says `observe`, audits `action`.
    async fn apply_lifecycle(
        &self,
        req: &PromoteRequest,
        source: &str,
        observe: bool,
        action: &str,
    ) -> Result<PromoteReport, EngineError> {
        let file = format!("{} ({action})", req.flow);
        let parsed = madeira_core::spec::parse_flow(&file, source)?;
        if parsed.observe != observe || parsed.name != req.flow {
            return Err(cannot_edit(&req.flow, "the edited flow does not read as intended".into()));
        }
        let outcome = self.apply_flow(&file, source).await?;
        let audit = AuditRecord {
            at: now_ms(),
            actor: req.actor.clone(),
            action: action.to_string(),
            run_id: None,
            node: None,
            reason: req.reason.clone(),
            details: Some(json!({"flow": req.flow, "version": outcome.version, "observe": observe})),
        };
        self.store.commit(&Batch { audit: vec![audit], ..Default::default() }).await?;
        self.report(&req.flow, outcome.version, true, Vec::new()).await
    }

    async fn report(
        &self,
        flow: &str,
        version: u32,
        changed: bool,
        warnings: Vec<String>,
    ) -> Result<PromoteReport, EngineError> {
        let def = self.flow(flow, Some(version)).await?;
        Ok(PromoteReport {
            flow: flow.to_string(),
            version,
            observe: def.observe,
            changed,
            cron: cron_triggers(&def),
            jobs: sidecar_jobs(&def),
            warnings,
        })
    }
}

fn cannot_edit(flow: &str, message: String) -> EngineError {
    EngineError::Lifecycle { code: "cannot_edit", message: format!("flow {flow}: {message}") }
}

fn cron_triggers(def: &madeira_core::FlowDef) -> Vec<(String, String)> {
    def.triggers
        .iter()
        .filter_map(|t| match t {
            TriggerDef::Cron(c) => Some((c.expr.clone(), c.timezone.clone())),
            _ => None,
        })
        .collect()
}

fn sidecar_jobs(def: &madeira_core::FlowDef) -> Vec<(String, String)> {
    def.nodes
        .iter()
        .filter_map(|n| match &n.action {
            NodeAction::Run(ExecutorDef::Sidecar(s)) => Some((s.group.clone(), s.job.clone())),
            _ => None,
        })
        .collect()
}

/// Two cron expressions written alike (fields compared, whitespace ignored).
fn same_cron(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}
