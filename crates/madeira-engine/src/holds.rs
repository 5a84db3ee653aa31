//! Who holds whom across flows (`after`): the FAILED upstream run at the top of a
//! held run's chain of waits (its root cause), and the runs held behind a failed
//! run, directly or through other held runs. Each such held run is told to the
//! observers as a `HeldRun` — when a run is created held behind a failure, and
//! when an upstream run fails while runs already wait for it — so the alerts list
//! it on the upstream's failure alert instead of letting it page on its own. The
//! facts are read from the store (`run_waits`, `runs`), never kept in a replica.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use madeira_core::NodeState;
use madeira_store::{Batch, RunQuery, RunRow, Store};
use tracing::{debug, info, warn};

use crate::{AlertSource, EngineError, EngineObserver, HeldRun};

/// Most held runs followed from one failure (and waits followed up one chain).
const MAX_FOLLOWED: usize = 1000;

/// A FAILED run holding others: its flow, business date and first failed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub run_id: String,
    pub flow: String,
    pub biz_date: String,
    pub node: Option<String>,
    /// That node's reason (its error), when recorded.
    pub error: Option<String>,
}

impl Root {
    /// `payments-pull.pull` (or the flow alone when no node failed).
    pub fn label(&self) -> String {
        match &self.node {
            Some(node) => format!("{}.{node}", self.flow),
            None => self.flow.clone(),
        }
    }
}

/// The root of a FAILED run: its first FAILED node.
pub async fn root_of_failed(store: &dyn Store, run_id: &str) -> Result<Option<Root>, EngineError> {
    let Some(stored) = store.load_run(run_id).await? else { return Ok(None) };
    let failed = stored.nodes.iter().find(|n| n.state == NodeState::Failed);
    Ok(Some(Root {
        run_id: run_id.to_string(),
        flow: stored.run.flow.clone(),
        biz_date: stored.run.biz_date.clone().unwrap_or_default(),
        node: failed.map(|n| n.node.clone()),
        error: failed.and_then(|n| n.reason.clone()),
    }))
}

/// The FAILED upstream run that holds `run_id`, following held upstream runs up
/// their waits; `None` when nothing failed up there (the upstream still runs, or
/// has no run for the date yet).
pub async fn root_of(store: &dyn Store, run_id: &str) -> Result<Option<Root>, EngineError> {
    let mut queue = VecDeque::from([run_id.to_string()]);
    let mut seen = HashSet::new();
    while let Some(id) = queue.pop_front() {
        if !seen.insert(id.clone()) || seen.len() > MAX_FOLLOWED {
            continue;
        }
        for wait in store.run_waits(&id).await? {
            let query = RunQuery {
                flow: Some(wait.flow.clone()),
                biz_date: Some(wait.date.clone()),
                limit: 1,
                ..RunQuery::default()
            };
            let Some(upstream) = store.list_runs(&query).await?.into_iter().next() else { continue };
            match upstream.state.as_str() {
                "FAILED" => {
                    let Some(root) = root_of_failed(store, &upstream.id).await? else { continue };
                    // A wait for one node is met when that node succeeded, whatever the run did.
                    if let Some(node) = &wait.node {
                        let stored = store.load_run(&upstream.id).await?;
                        let done = stored.is_some_and(|s| {
                            s.nodes.iter().any(|n| &n.node == node && n.state == NodeState::Success)
                        });
                        if done {
                            continue;
                        }
                    }
                    return Ok(Some(root));
                }
                "QUEUED" if held(&upstream) => queue.push_back(upstream.id),
                _ => {}
            }
        }
    }
    Ok(None)
}

fn held(run: &RunRow) -> bool {
    run.state == madeira_core::RunState::Queued && run.wait_reason.is_some()
}

/// The runs held behind `(flow, date)`: those waiting for it and, through each of
/// them, those waiting for that run's flow and date; each once, nearest first.
pub async fn behind(store: &dyn Store, flow: &str, date: &str) -> Result<Vec<RunRow>, EngineError> {
    let mut queue = VecDeque::from([(flow.to_string(), date.to_string())]);
    let mut looked = HashSet::new();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    while let Some((flow, date)) = queue.pop_front() {
        if !looked.insert((flow.clone(), date.clone())) {
            continue;
        }
        for run in store.held_runs(&flow, &date).await? {
            if out.len() >= MAX_FOLLOWED {
                return Ok(out);
            }
            if seen.insert(run.id.clone()) {
                if let Some(d) = &run.biz_date {
                    queue.push_back((run.flow.clone(), d.clone()));
                }
                out.push(run);
            }
        }
    }
    Ok(out)
}

/// Tells the observers that each of `held` waits behind `root` (and writes the
/// alert events of a shared store in one commit).
pub async fn tell(store: &dyn Store, observers: &[Arc<dyn EngineObserver>], root: &Root, held: &[RunRow]) {
    if held.is_empty() || observers.is_empty() {
        return;
    }
    let mut alert_events = Vec::new();
    for run in held {
        let h = HeldRun {
            run_id: &run.id,
            flow: &run.flow,
            biz_date: run.biz_date.as_deref().unwrap_or_default(),
            root_run: &root.run_id,
            root_flow: &root.flow,
            root_node: root.node.as_deref(),
        };
        info!(run_id = %run.id, flow = %run.flow, root = %root.label(), root_run = %root.run_id, "held behind a failed upstream");
        observers.iter().for_each(|o| o.run_held(&h));
        alert_events.extend(observers.iter().flat_map(|o| o.alert_events(AlertSource::Held(h))));
    }
    if !alert_events.is_empty()
        && let Err(e) = store.commit(&Batch { alert_events, ..Default::default() }).await
    {
        warn!(root_run = %root.run_id, error = %e, "cannot record the runs a failed run holds");
    }
}

/// A run was created held by `after`: when a failed upstream holds it, it (and
/// whatever already waits for it) is told as held behind that failure.
pub async fn run_created_held(store: &dyn Store, observers: &[Arc<dyn EngineObserver>], run_id: &str) {
    let found = async {
        let Some(root) = root_of(store, run_id).await? else { return Ok(None) };
        let Some(stored) = store.load_run(run_id).await? else { return Ok(None) };
        let mut held = vec![stored.run.clone()];
        if let Some(date) = &stored.run.biz_date {
            held.extend(behind(store, &stored.run.flow, date).await?);
        }
        Ok::<_, EngineError>(Some((root, held)))
    };
    match found.await {
        Ok(Some((root, held))) => tell(store, observers, &root, &held).await,
        Ok(None) => debug!(run_id = %run_id, "held run: no failed upstream holds it"),
        Err(e) => warn!(run_id = %run_id, error = %e, "cannot tell whether a failed upstream holds this run"),
    }
}

/// Run `run_id` of `flow` for `date` ended FAILED: the runs waiting for it are
/// held behind it.
pub async fn run_failed(
    store: &dyn Store,
    observers: &[Arc<dyn EngineObserver>],
    run_id: &str,
    flow: &str,
    date: &str,
) {
    let found = async {
        let held = behind(store, flow, date).await?;
        if held.is_empty() {
            return Ok(None);
        }
        Ok::<_, EngineError>(root_of_failed(store, run_id).await?.map(|root| (root, held)))
    };
    match found.await {
        Ok(Some((root, held))) => tell(store, observers, &root, &held).await,
        Ok(None) => {}
        Err(e) => warn!(run_id = %run_id, error = %e, "cannot read the runs this failed run holds"),
    }
}
