//! Backfills in the engine: a request becomes a stored backfill (its dates from a
//! range, a calendar's business days or a list; its steps ordered by
//! `madeira_core::estate::backfill_order`, with every downstream flow of the
//! estate when asked), then its runs are created a few at a time. Store-driven:
//! `advance` asks the store which steps start now (decided under the backfill's
//! lock) and creates their runs with the key `madeira_core::keys::RunKey::Backfill`,
//! trigger `backfill`, actor the requester; the replica that commits a finished
//! backfill run advances its backfill, and the reconcile sweep advances every
//! active one (a claim a dead replica never turned into a run is handed out
//! again). A backfill run is an ordinary run: it waits for its `after` upstreams
//! like any held run, and ranks below other runs waiting for room.

use chrono::NaiveDate;
use madeira_core::estate::{BackfillAction, BackfillOrder, Rerun, backfill_order, parse_date};
use madeira_store::{
    AuditRecord, BackfillChange, BackfillRecord, BackfillStepRow, NewBackfill, NewBackfillStep,
};
use serde_json::json;
use tracing::{info, warn};

use crate::{ActionRequest, EngineError, EngineHandle, TriggerRequest, now_ms};

/// Most dates one backfill may cover.
pub const MAX_DATES: usize = 1000;
/// Most runs a backfill may run at once.
pub const MAX_PARALLEL: u32 = 64;
/// A step claimed this long ago and still without a run is handed out again
/// (the replica that claimed it died between the claim and the run's creation).
const STALE_CLAIM_MS: i64 = 30_000;

/// What to backfill.
#[derive(Debug, Clone)]
pub struct BackfillRequest {
    pub flow: String,
    pub from: Option<NaiveDate>,
    pub to: Option<NaiveDate>,
    /// Exact dates instead of a range.
    pub dates: Option<Vec<NaiveDate>>,
    /// Business days of this calendar within the range (calendar days without one).
    pub calendar: Option<String>,
    pub order: BackfillOrder,
    pub parallel: u32,
    pub with_dependents: bool,
    pub rerun: Rerun,
    pub reason: String,
    pub actor: String,
}

/// A backfill just created.
#[derive(Debug, Clone)]
pub struct BackfillCreated {
    pub id: String,
    pub dates: Vec<String>,
    pub flows: Vec<String>,
    pub steps: usize,
}

fn bad(message: String) -> EngineError {
    EngineError::BadBackfill(message)
}

impl BackfillRequest {
    /// The dates the request names, checked and in order.
    fn dates(&self, calendars: &madeira_calendar::Calendars) -> Result<Vec<NaiveDate>, EngineError> {
        let cal = match &self.calendar {
            Some(name) => Some(calendars.get(name).ok_or_else(|| {
                let known: Vec<&str> = calendars.names().collect();
                bad(format!("calendar: unknown calendar `{name}`; use one of: {}", known.join(", ")))
            })?),
            None => None,
        };
        let mut dates = match (&self.dates, self.from, self.to) {
            (Some(list), None, None) => {
                if list.is_empty() {
                    return Err(bad("dates: the list is empty; give at least one date".into()));
                }
                list.clone()
            }
            (Some(_), ..) => {
                return Err(bad("dates: give either `dates` or `from` and `to`, not both".into()));
            }
            (None, Some(from), Some(to)) => {
                if from > to {
                    return Err(bad(format!("from: {from} is after to: {to}; swap them")));
                }
                let days = (to - from).num_days() as usize + 1;
                if days > MAX_DATES * 2 {
                    return Err(bad(format!(
                        "from/to: {days} days is too long a range; at most {MAX_DATES} dates per backfill"
                    )));
                }
                let mut out = Vec::new();
                for d in from.iter_days().take(days) {
                    let keep = match cal {
                        Some(c) => c.is_business_day(d).map_err(|e| {
                            bad(format!("calendar: {e}; extend the calendar's data or shorten the range"))
                        })?,
                        None => true,
                    };
                    if keep {
                        out.push(d);
                    }
                }
                if out.is_empty() {
                    let name = self.calendar.as_deref().unwrap_or_default();
                    return Err(bad(format!("from/to: no business day of `{name}` between {from} and {to}")));
                }
                out
            }
            (None, ..) => return Err(bad("from/to: give `from` and `to` (YYYY-MM-DD), or `dates`".into())),
        };
        dates.sort_unstable();
        dates.dedup();
        if dates.len() > MAX_DATES {
            return Err(bad(format!(
                "dates: {} dates; at most {MAX_DATES} per backfill, split it",
                dates.len()
            )));
        }
        if self.order == BackfillOrder::Desc {
            dates.reverse();
        }
        Ok(dates)
    }
}

impl EngineHandle {
    /// Creates a backfill (audited with its actor and reason) and starts its first runs.
    pub async fn create_backfill(&self, req: BackfillRequest) -> Result<BackfillCreated, EngineError> {
        if req.reason.trim().is_empty() {
            return Err(bad("reason: a backfill needs a non-blank reason (kept in the audit trail)".into()));
        }
        madeira_core::text::check_text("reason", &req.reason).map_err(EngineError::BadText)?;
        if !(1..=MAX_PARALLEL).contains(&req.parallel) {
            return Err(bad(format!("parallel: {} is out of range; use 1 to {MAX_PARALLEL}", req.parallel)));
        }
        let def = self.flow(&req.flow, None).await?;
        if def.observe {
            return Err(EngineError::ObserveOnly(req.flow.clone()));
        }
        let calendars = self.flows.calendars();
        let dates = req.dates(&calendars)?;
        let estate = self.flows.estate(self.store.as_ref()).await?;
        let plan =
            backfill_order(&estate, &req.flow, &dates, req.with_dependents, req.order, calendars.as_ref())
                .map_err(|e| bad(format!("{}: {e}", req.flow)))?;
        let id = uuid::Uuid::now_v7().to_string();
        let text = |d: &NaiveDate| d.format("%Y-%m-%d").to_string();
        let steps: Vec<NewBackfillStep> = plan
            .steps
            .iter()
            .zip(&plan.waits)
            .map(|(s, waits)| NewBackfillStep {
                flow: s.flow.clone(),
                biz_date: text(&s.date),
                waits: waits.clone(),
            })
            .collect();
        let mut flows: Vec<String> = steps.iter().map(|s| s.flow.clone()).collect();
        flows.sort();
        flows.dedup();
        let backfill = NewBackfill {
            id: id.clone(),
            flow: req.flow.clone(),
            date_from: req.from.as_ref().map(text),
            date_to: req.to.as_ref().map(text),
            calendar: req.calendar.clone(),
            dates: dates.iter().map(text).collect(),
            order: req.order.as_str().into(),
            parallel: req.parallel,
            with_dependents: req.with_dependents,
            rerun: req.rerun.as_str().into(),
            reason: req.reason.clone(),
            actor: req.actor.clone(),
            now_ms: now_ms(),
            steps,
        };
        let audit = AuditRecord {
            at: backfill.now_ms,
            actor: req.actor.clone(),
            action: "backfill".into(),
            run_id: None,
            node: None,
            reason: Some(req.reason.clone()),
            details: Some(json!({
                "backfill": id, "flow": req.flow, "dates": backfill.dates.len(), "flows": flows,
                "parallel": req.parallel, "with_dependents": req.with_dependents, "rerun": backfill.rerun,
            })),
        };
        self.store.create_backfill(&backfill, &audit).await?;
        info!(backfill = %id, flow = %req.flow, dates = dates.len(), runs = backfill.steps.len(), actor = %req.actor, "backfill created");
        self.advance_backfill(&id).await;
        Ok(BackfillCreated { id, dates: backfill.dates, flows, steps: backfill.steps.len() })
    }

    /// The flows a backfill of `flow` runs: it, and every flow downstream of it
    /// in the estate when `with_dependents`.
    pub async fn backfill_flows(
        &self,
        flow: &str,
        with_dependents: bool,
    ) -> Result<Vec<String>, EngineError> {
        if !with_dependents {
            return Ok(vec![flow.to_string()]);
        }
        let estate = self.flows.estate(self.store.as_ref()).await?;
        Ok(estate.with_dependents(flow).into_iter().collect())
    }

    /// The latest backfills, with progress.
    pub async fn backfills(&self, limit: u32) -> Result<Vec<BackfillRecord>, EngineError> {
        Ok(self.store.list_backfills(limit).await?)
    }

    /// One backfill with its runs.
    pub async fn backfill(&self, id: &str) -> Result<(BackfillRecord, Vec<BackfillStepRow>), EngineError> {
        self.store.get_backfill(id).await?.ok_or_else(|| EngineError::BackfillNotFound(id.to_string()))
    }

    /// Pauses, resumes or cancels a backfill (audited); a cancel cancels its runs
    /// not finished yet with `reason`, a resume starts its next runs.
    pub async fn change_backfill(
        &self,
        id: &str,
        action: BackfillAction,
        actor: &str,
        reason: &str,
    ) -> Result<BackfillRecord, EngineError> {
        if reason.trim().is_empty() {
            return Err(bad(format!("reason: {action} needs a non-blank reason (kept in the audit trail)")));
        }
        madeira_core::text::check_text("reason", reason).map_err(EngineError::BadText)?;
        let audit = AuditRecord {
            at: now_ms(),
            actor: actor.to_string(),
            action: format!("backfill_{action}"),
            run_id: None,
            node: None,
            reason: Some(reason.to_string()),
            details: Some(json!({"backfill": id})),
        };
        match self.store.change_backfill(id, action, audit.at, &audit).await? {
            BackfillChange::NotFound => return Err(EngineError::BackfillNotFound(id.to_string())),
            BackfillChange::Refused { state } => {
                return Err(EngineError::BackfillRefused {
                    id: id.to_string(),
                    state,
                    action: action.as_str(),
                });
            }
            BackfillChange::Changed { unfinished, .. } => {
                if action == BackfillAction::Cancel {
                    for run_id in unfinished {
                        self.cancel_backfill_run(&run_id, actor, reason).await;
                    }
                }
            }
        }
        if action == BackfillAction::Resume {
            self.advance_backfill(id).await;
        }
        Ok(self.backfill(id).await?.0)
    }

    async fn cancel_backfill_run(&self, run_id: &str, actor: &str, reason: &str) {
        let req = ActionRequest {
            run_id: run_id.to_string(),
            node: None,
            kind: None,
            actor: actor.to_string(),
            reason: Some(format!("backfill cancelled: {reason}")),
        };
        if let Err(e) = self.act(req).await {
            // Finished meanwhile, or refused: it is not running any more either way.
            info!(run_id, error = %e, "backfill cancel: run not cancelled");
        }
    }

    /// Creates the runs of the steps the store says start now. Never creates a
    /// run twice: each has its key; a refused one is recorded on its step.
    pub async fn advance_backfill(&self, id: &str) {
        // A refused step may unblock the end of the backfill: ask again then.
        for _ in 0..8 {
            let advanced = match self.store.advance_backfill(id, now_ms(), STALE_CLAIM_MS).await {
                Ok(Some(a)) => a,
                Ok(None) => return,
                Err(e) => {
                    return warn!(backfill = id, error = %e, "backfill: cannot advance; the sweep tries again");
                }
            };
            if advanced.finished {
                info!(backfill = id, "backfill done");
            }
            let mut refused = false;
            for step in advanced.steps {
                refused |= self.start_step(id, &advanced.actor, step).await;
            }
            if !refused {
                return;
            }
        }
    }

    /// Creates (or finds, by its key) one step's run and links it; true when the
    /// run was refused for good.
    async fn start_step(&self, id: &str, actor: &str, step: madeira_store::BackfillTrigger) -> bool {
        let date = match parse_date(&step.biz_date) {
            Ok(d) => d,
            Err(e) => {
                let note = e.to_string();
                let _ = self.store.settle_backfill_step(id, step.seq, None, Some(&note)).await;
                return true;
            }
        };
        let req = TriggerRequest {
            flow: step.flow.clone(),
            params: json!({}),
            idempotency_key: Some(
                madeira_core::keys::RunKey::Backfill {
                    backfill: id.to_string(),
                    flow: step.flow.clone(),
                    biz_date: step.biz_date.clone(),
                }
                .to_string(),
            ),
            trigger: madeira_core::admit::BACKFILL_TRIGGER.into(),
            actor: actor.to_string(),
            version: None,
            biz_date: Some(date),
            at_ms: None,
        };
        match self.trigger(req).await {
            Ok(out) => match self.store.settle_backfill_step(id, step.seq, Some(&out.run_id), None).await {
                Ok(Some(state)) if state == "cancelled" => {
                    self.cancel_backfill_run(&out.run_id, actor, "created as the backfill was cancelled")
                        .await;
                    false
                }
                Ok(_) => false,
                Err(e) => {
                    warn!(backfill = id, run_id = %out.run_id, error = %e, "backfill: run not linked yet; the sweep links it");
                    false
                }
            },
            Err(e @ (EngineError::ShuttingDown | EngineError::Store(_))) => {
                warn!(backfill = id, flow = %step.flow, biz_date = %step.biz_date, error = %e, "backfill: run not created now; the sweep tries again");
                false
            }
            Err(e) => {
                warn!(backfill = id, flow = %step.flow, biz_date = %step.biz_date, error = %e, "backfill: run refused");
                let note = e.to_string();
                if let Err(e) = self.store.settle_backfill_step(id, step.seq, None, Some(&note)).await {
                    warn!(backfill = id, error = %e, "backfill: refusal not recorded");
                }
                true
            }
        }
    }

    /// Advances the backfills that `finished` (runs that just ended) belong to.
    pub(crate) async fn backfills_after(&self, finished: Vec<String>) {
        match self.store.backfills_of_runs(&finished).await {
            Ok(ids) => {
                for id in ids {
                    self.advance_backfill(&id).await;
                }
            }
            Err(e) => {
                warn!(error = %e, "backfill: cannot read the backfills of finished runs; the sweep advances them")
            }
        }
    }

    /// Advances every running or paused backfill (the reconcile sweep).
    pub(crate) async fn sweep_backfills(&self) {
        match self.store.active_backfills().await {
            Ok(ids) => {
                for id in ids {
                    self.advance_backfill(&id).await;
                }
            }
            Err(e) => warn!(error = %e, "backfill: cannot list active backfills"),
        }
    }
}
