//! The control plane's own check of `madeira exec` reports (SPEC §11): a sidecar
//! checks its `observe:` list and `observe_max_flows` itself, but a sidecar is not
//! trusted to. Its hello carries both; here a report is refused unless its flow
//! (normalized as the engine names it) is on the reporting sidecar's list (an
//! empty list: the flows named after its declared jobs) and — for a flow that
//! does not exist yet — the group's distinct observe flows stay within the
//! sidecar's cap and the control plane's (`FleetOptions::observe_max_flows`). A refusal is logged (sidecar,
//! group, flow, why), counted in `madeira_exec_reports_refused_total{group,reason}`
//! and answered in the `Ack`'s `refused`, which the sidecar logs and tells
//! `madeira exec`. The group's flows are learned from the store on its first
//! report, then kept in memory.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use madeira_core::ExecutorDef;
use madeira_core::model::NodeAction;
use madeira_engine::observed::flow_name_for;
use madeira_proto::v1::ExecReport;
use tracing::warn;

use crate::Fleet;

/// The control plane's default cap on one group's observe flows.
pub(crate) const DEFAULT_MAX_FLOWS: usize = 100;

/// Observe flows by sidecar group (what their reports created or recorded into).
#[derive(Default)]
pub(crate) struct ObservedFlows {
    /// `None` until learned from the store.
    groups: Mutex<Option<HashMap<String, HashSet<String>>>>,
}

impl ObservedFlows {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<String, HashSet<String>>>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The sidecar group an observe flow records (its node's), `None` for a governed flow.
fn observe_group(def: &madeira_core::FlowDef) -> Option<&str> {
    if !def.observe {
        return None;
    }
    def.nodes.iter().find_map(|n| match &n.action {
        NodeAction::Run(ExecutorDef::Sidecar(s)) => Some(s.group.as_str()),
        _ => None,
    })
}

/// Every stored observe flow, by group.
async fn learn(
    engine: &crate::Attached,
) -> Result<HashMap<String, HashSet<String>>, madeira_engine::EngineError> {
    let mut groups: HashMap<String, HashSet<String>> = HashMap::new();
    for record in engine.flows.list_flows().await? {
        let def = engine.flow(&record.name, Some(record.latest_version)).await?;
        if let Some(group) = observe_group(&def) {
            groups.entry(group.to_string()).or_default().insert(record.name);
        }
    }
    Ok(groups)
}

fn allowed(rules: &[String], flow: &str) -> bool {
    rules.iter().any(|rule| match rule.strip_suffix('*') {
        Some(prefix) => flow.starts_with(prefix),
        None => rule == flow,
    })
}

/// `Ok` when `name`'s report may be recorded; otherwise why not (already logged and counted).
pub(crate) async fn check(fleet: &Fleet, name: &str, report: &ExecReport) -> Result<(), String> {
    let flow = flow_name_for(&report.flow);
    let (group, rules, own_cap) = {
        let state = fleet.state();
        let Some(s) = state.sidecars.get(name) else {
            return Err("this sidecar is not registered; reconnect".into());
        };
        let rules: Vec<String> = match s.observe.is_empty() {
            true => s.jobs.iter().map(|j| flow_name_for(&j.name)).collect(),
            false => s.observe.clone(),
        };
        (s.group.clone(), rules, s.observe_max_flows)
    };
    let refuse = |reason: &'static str, says: String| {
        fleet.inner.metrics.exec_refused(&group, reason);
        warn!(sidecar = %name, group = %group, flow = %flow, reason, "exec report refused: {says}");
        Err(says)
    };
    if !allowed(&rules, &flow) {
        return refuse(
            "not_listed",
            format!("flow `{flow}` is not in the `observe:` list sidecar `{name}` declared; refused"),
        );
    }
    let Some(engine) = fleet.inner.engine.get().cloned() else {
        return Ok(());
    };
    if fleet.inner.observed.lock().is_none() {
        match learn(&engine).await {
            Ok(groups) => {
                fleet.inner.observed.lock().get_or_insert(groups);
            }
            // Not known now: nothing is refused for it; the next report tries again.
            Err(e) => {
                warn!(error = %e, "cannot list the observe flows; the group cap is checked from the next report on")
            }
        }
    }
    match engine.flow(&flow, None).await {
        // An existing flow takes the report (the engine refuses a governed one, with its reason).
        Ok(_) => return Ok(()),
        Err(madeira_engine::EngineError::FlowNotFound(_)) => {}
        Err(_) => return Ok(()),
    }
    let cap = match own_cap {
        0 => fleet.inner.options.observe_max_flows,
        n => (n as usize).min(fleet.inner.options.observe_max_flows),
    };
    let mut observed = fleet.inner.observed.lock();
    let Some(groups) = observed.as_mut() else {
        return Ok(());
    };
    let flows = groups.entry(group.clone()).or_default();
    if !flows.contains(&flow) && flows.len() >= cap {
        let n = flows.len();
        drop(observed);
        return refuse(
            "cap",
            format!(
                "group `{group}` already reports to {n} observe flows (`observe_max_flows`: {cap}, the smaller of \
                 the sidecar's and the control plane's); `{flow}` refused"
            ),
        );
    }
    flows.insert(flow);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_prefixes_allow_flows() {
        let rules = vec!["daily-settlement".to_string(), "cron-*".to_string()];
        assert!(allowed(&rules, "daily-settlement"));
        assert!(allowed(&rules, "cron-a"));
        assert!(!allowed(&rules, "spam-1"));
        assert!(!allowed(&rules, "daily-settlement-2"));
        assert!(allowed(&["*".to_string()], "anything"));
        assert!(!allowed(&[], "anything"));
    }
}
