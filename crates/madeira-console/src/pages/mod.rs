//! The screens, one module each, and what several of them load.

pub mod approvals;
pub mod audit;
pub mod backfills;
pub mod bizdates;
pub mod estate;
pub mod flows;
pub mod misc;
pub mod overview;
pub mod run;
pub mod runs;

use std::sync::Arc;

use madeira_core::FlowDef;
use madeira_store::StoredRun;

use crate::{Console, ConsoleError};

/// A run with the flow version it runs.
pub struct LoadedRun {
    pub stored: StoredRun,
    pub def: Arc<FlowDef>,
}

/// The flows `user` sees (its token's scope, as in the API); `None`: all.
pub async fn visible(
    console: &Console,
    user: &crate::session::User,
) -> Result<Option<std::collections::HashSet<String>>, ConsoleError> {
    Ok(madeira_server::visible_flow_names(&console.app, &user.caller()).await?)
}

/// Loads run `id` and its flow version through the engine handle; another
/// team's run is "not found" to a scoped user.
pub async fn load_run(
    console: &Console,
    user: &crate::session::User,
    id: &str,
) -> Result<LoadedRun, ConsoleError> {
    let engine = &console.app.engine;
    let stored = console
        .app
        .reads
        .runs
        .load_run(id)
        .await?
        .ok_or_else(|| ConsoleError::NotFound(format!("run {id} not found")))?;
    let def = engine.flow(&stored.run.flow, Some(stored.run.version)).await?;
    let latest = engine.flow(&stored.run.flow, None).await?;
    if !user.caller().sees(&latest.labels) {
        return Err(ConsoleError::NotFound(format!("run {id} not found")));
    }
    Ok(LoadedRun { stored, def })
}

/// Every run lives under a stable URL.
pub fn run_href(id: &str) -> String {
    format!("/runs/{id}")
}

pub fn flow_href(name: &str) -> String {
    format!("/flows/{name}")
}

/// Whether a run state is final.
pub fn run_terminal(state: &str) -> bool {
    matches!(state, "SUCCESS" | "FAILED" | "CANCELLED")
}

/// The FAILED nodes of `run` with no FAILED node upstream of them: the root
/// causes that bulk rerun-failed reruns and the overview names.
pub fn root_failed(run: &LoadedRun) -> Vec<String> {
    let def = &run.def;
    let failed: Vec<bool> = def
        .nodes
        .iter()
        .map(|n| {
            run.stored.nodes.iter().any(|r| r.node == n.id && r.state == madeira_core::NodeState::Failed)
        })
        .collect();
    // `covered[v]`: some FAILED node is upstream of v.
    let mut covered = vec![false; def.nodes.len()];
    for &u in &def.topo {
        if failed[u] || covered[u] {
            for &(w, _) in &def.downstream[u] {
                covered[w] = true;
            }
        }
    }
    (0..def.nodes.len()).filter(|&v| failed[v] && !covered[v]).map(|v| def.nodes[v].id.clone()).collect()
}
