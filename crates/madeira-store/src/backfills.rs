//! Backfills as the store keeps them: the `BackfillStore` aggregate (create, the
//! next steps decided under the backfill's lock by
//! `madeira_core::estate::advance`, links to runs, state changes through the core's
//! table, reads with progress) and its records.

use async_trait::async_trait;
use madeira_core::estate::BackfillAction;
use serde::Serialize;

use crate::{AuditRecord, Result};

/// A backfill to create, with its steps in start order.
#[derive(Debug, Clone)]
pub struct NewBackfill {
    pub id: String,
    pub flow: String,
    pub date_from: Option<String>,
    pub date_to: Option<String>,
    pub calendar: Option<String>,
    pub dates: Vec<String>,
    pub order: String,
    pub parallel: u32,
    pub with_dependents: bool,
    pub rerun: String,
    pub reason: String,
    pub actor: String,
    pub now_ms: i64,
    pub steps: Vec<NewBackfillStep>,
}

/// One (flow, business date) of a backfill; `waits`: the seqs (smaller than its
/// own) of the steps it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBackfillStep {
    pub flow: String,
    pub biz_date: String,
    pub waits: Vec<usize>,
}

/// How many of a backfill's steps are where.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BackfillProgress {
    pub total: u32,
    /// Not started yet (claimed ones included).
    pub pending: u32,
    /// QUEUED runs: held by `after`, waiting for room, or about to start.
    pub queued: u32,
    pub running: u32,
    pub success: u32,
    pub failed: u32,
    pub cancelled: u32,
    /// Dates that already had a SUCCESS run (`rerun: skip-existing`).
    pub skipped: u32,
    /// Never started: a step they wait for did not succeed, or the run was refused.
    pub blocked: u32,
}

/// A backfill with its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackfillRecord {
    pub id: String,
    pub flow: String,
    pub date_from: Option<String>,
    pub date_to: Option<String>,
    pub calendar: Option<String>,
    pub dates: Vec<String>,
    pub order: String,
    pub parallel: u32,
    pub with_dependents: bool,
    pub rerun: String,
    pub reason: String,
    pub actor: String,
    pub state: String,
    pub created_at: i64,
    pub finished_at: Option<i64>,
    pub progress: BackfillProgress,
    /// Paused flows whose steps wait for their flow's resume (running or paused
    /// backfills only).
    pub paused_flows: Vec<String>,
}

/// One step with its run, as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackfillStepRow {
    pub seq: u32,
    pub flow: String,
    pub biz_date: String,
    pub run_id: Option<String>,
    /// Its run's state (QUEUED, RUNNING, SUCCESS, FAILED, CANCELLED).
    pub run_state: Option<String>,
    /// Why it has no run of its own: skipped, blocked, cancelled, refused.
    pub outcome: Option<String>,
    pub note: Option<String>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// A step whose run is to be created now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillTrigger {
    pub seq: u32,
    pub flow: String,
    pub biz_date: String,
}

/// What `advance_backfill` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advanced {
    /// Who asked for the backfill (the actor of its runs).
    pub actor: String,
    pub reason: String,
    /// Runs to create (or find, by their key), in order.
    pub steps: Vec<BackfillTrigger>,
    /// The backfill finished with this advance.
    pub finished: bool,
}

/// What a state change did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackfillChange {
    NotFound,
    /// The table has no such change from `state`.
    Refused {
        state: String,
    },
    /// Changed; `unfinished`: its runs still QUEUED or RUNNING (a cancel cancels them).
    Changed {
        from: String,
        to: String,
        unfinished: Vec<String>,
    },
}

#[async_trait]
pub trait BackfillStore: Send + Sync + 'static {
    /// Writes the backfill (state `running`), its steps and `audit` in one transaction.
    async fn create_backfill(&self, backfill: &NewBackfill, audit: &AuditRecord) -> Result<()>;
    /// Under the backfill's lock, decides its next steps (`madeira_core::estate::advance`)
    /// and writes the decision: claims (`claimed_at = now_ms`), skipped and blocked
    /// steps, `done` when nothing is left. A claim older than `stale_ms` is handed
    /// out again. `None`: no such backfill.
    async fn advance_backfill(&self, id: &str, now_ms: i64, stale_ms: i64) -> Result<Option<Advanced>>;
    /// Links a claimed step to its run, or (no run) records why it has none
    /// (`outcome: refused`, `note`). Returns the backfill's state (a run linked to a
    /// backfill cancelled meanwhile is for the caller to cancel).
    async fn settle_backfill_step(
        &self,
        id: &str,
        seq: u32,
        run_id: Option<&str>,
        note: Option<&str>,
    ) -> Result<Option<String>>;
    /// The backfills (running or paused) that have one of `run_ids` among their runs.
    async fn backfills_of_runs(&self, run_ids: &[String]) -> Result<Vec<String>>;
    /// Ids of the running and paused backfills (for the sweep).
    async fn active_backfills(&self) -> Result<Vec<String>>;
    /// The latest backfills first, with their progress.
    async fn list_backfills(&self, limit: u32) -> Result<Vec<BackfillRecord>>;
    /// A backfill with its steps in order.
    async fn get_backfill(&self, id: &str) -> Result<Option<(BackfillRecord, Vec<BackfillStepRow>)>>;
    /// Applies `action` through the backfill state table, writing `audit` with it;
    /// a cancel also marks its steps never started `cancelled`.
    async fn change_backfill(
        &self,
        id: &str,
        action: BackfillAction,
        now_ms: i64,
        audit: &AuditRecord,
    ) -> Result<BackfillChange>;
}
