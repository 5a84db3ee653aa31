//! Team scopes (a token's `scope` over flow labels): which flows a scoped caller
//! sees, and the checks handlers make so another team's flow or run answers 404
//! (never 403: a scoped caller cannot learn that it exists).

use std::collections::HashSet;

use madeira_engine::EngineError;

use crate::{ApiError, AppState, Caller};

/// The names of the flows `caller` sees (labels of each flow's latest version);
/// `None` when the caller is not scoped and sees every flow.
pub async fn visible_flow_names(
    state: &AppState,
    caller: &Caller,
) -> Result<Option<HashSet<String>>, EngineError> {
    if !caller.is_scoped() {
        return Ok(None);
    }
    let mut names = HashSet::new();
    // Deleted flows whose history was kept: their runs stay visible to the team.
    let mut records = state.reads.flows.list_flows().await?;
    records.extend(state.reads.flows.deleted_flows().await?);
    for record in records {
        let def = state.engine.flow(&record.name, Some(record.latest_version)).await?;
        if caller.sees(&def.labels) {
            names.insert(record.name);
        }
    }
    Ok(Some(names))
}

/// Whether `caller` sees flow `flow` (by its latest version's labels; a deleted
/// flow's kept history by its last version's); false when there is no such flow.
pub async fn visible_flow(state: &AppState, caller: &Caller, flow: &str) -> Result<bool, EngineError> {
    if !caller.is_scoped() {
        return Ok(true);
    }
    let engine = &state.engine;
    let def = match engine.flow(flow, None).await {
        Ok(def) => def,
        Err(EngineError::FlowNotFound(_)) => match state.reads.flows.flow_versions(flow).await?.last() {
            Some(last) => engine.flow(flow, Some(last.version)).await?,
            None => return Ok(false),
        },
        Err(e) => return Err(e),
    };
    Ok(caller.sees(&def.labels))
}

impl AppState {
    /// The flows `caller` sees; `None`: all of them.
    pub(crate) async fn visible_flows(&self, caller: &Caller) -> Result<Option<HashSet<String>>, ApiError> {
        Ok(visible_flow_names(self, caller).await?)
    }

    /// 404 `flow NAME not found` when `caller` may not see the flow.
    pub(crate) async fn check_flow(&self, caller: &Caller, flow: &str) -> Result<(), ApiError> {
        if !caller.is_scoped() {
            return Ok(());
        }
        let def = match self.engine.flow(flow, None).await {
            Ok(def) => def,
            // A deleted flow's history is read by the labels of its last version.
            Err(EngineError::FlowNotFound(_)) => {
                let versions = self.reads.flows.flow_versions(flow).await?;
                let last =
                    versions.last().ok_or_else(|| ApiError::not_found(format!("flow {flow} not found")))?;
                self.engine.flow(flow, Some(last.version)).await?
            }
            Err(e) => return Err(e.into()),
        };
        if caller.sees(&def.labels) {
            Ok(())
        } else {
            Err(ApiError::not_found(format!("flow {flow} not found")))
        }
    }

    /// 404 `run ID not found` when the run is missing or of a flow `caller` may not see.
    pub(crate) async fn check_run(&self, caller: &Caller, run_id: &str) -> Result<(), ApiError> {
        if !caller.is_scoped() {
            return Ok(());
        }
        let not_found = || ApiError::not_found(format!("run {run_id} not found"));
        let stored = self.reads.runs.load_run(run_id).await?.ok_or_else(not_found)?;
        self.check_flow(caller, &stored.run.flow).await.map_err(|_| not_found())
    }
}
