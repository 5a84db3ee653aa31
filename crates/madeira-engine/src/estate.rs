//! The estate as the engine uses it: cross-flow checks when a flow is applied
//! (unknown upstream flows and nodes, cycles, printed with files and lines), the
//! `after` waits of a new run (and of its nodes) for its business date, and what a run ending
//! SUCCESS wakes: the flows whose held runs it releases (promoted at once, no
//! polling) and the flows its `flow_succeeded` triggers start for the same date.

use std::sync::Arc;

use madeira_core::FlowDef;
use madeira_core::estate::{Estate, EstateError, EstateFlow, node_requirements, parse_date, requirements};
use madeira_core::spec::{SpecError, SpecErrors};
use madeira_store::{AfterWait, NodeWait};

use crate::EngineError;

/// The estate of `defs`.
pub fn of(defs: &[Arc<FlowDef>]) -> Estate {
    let mut estate = Estate::default();
    for def in defs {
        estate.insert(EstateFlow::from_def(&format!("{}.yaml", def.name), def));
    }
    estate
}

/// The estate problems `def` (being applied from `file`) takes part in, as the
/// flow's spec errors.
pub fn check_applied(mut estate: Estate, file: &str, def: &FlowDef) -> Result<(), SpecErrors> {
    estate.insert(EstateFlow::from_def(file, def));
    let errors: Vec<SpecError> =
        estate.check_flow(&def.name).into_iter().map(|e| spec_error(file, e)).collect();
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}

fn spec_error(file: &str, e: EstateError) -> SpecError {
    let message = e.to_string();
    match e {
        EstateError::UnknownFlow { line, .. } | EstateError::UnknownNode { line, .. } => {
            // The message starts with `file:line: flow NAME: `; keep what follows.
            let text = message.splitn(3, ": ").nth(2).unwrap_or(&message).to_string();
            SpecError { file: file.to_string(), line, node: None, message: text }
        }
        EstateError::Cycle(steps) | EstateError::SubflowCycle(steps) => {
            let line = steps.first().and_then(|s| s.line);
            SpecError { file: file.to_string(), line, node: None, message }
        }
    }
}

/// What a run of `def` for `biz_date` waits for (its `after:` entries resolved
/// with the server's calendars), and what its nodes wait for (node-level `after:`).
pub fn waits(
    def: &FlowDef,
    biz_date: &str,
    calendars: &madeira_calendar::Calendars,
) -> Result<(Vec<AfterWait>, Vec<NodeWait>), EngineError> {
    if !def.has_after() {
        return Ok((Vec::new(), Vec::new()));
    }
    let bad = |e: madeira_core::estate::DateError| {
        EngineError::BadBizDate(format!("flow {}: after: {e}", def.name))
    };
    let date = parse_date(biz_date).map_err(bad)?;
    let flow = EstateFlow::from_def(&def.name, def);
    let wait = |r: madeira_core::estate::Requirement| AfterWait {
        flow: r.flow,
        node: r.node,
        date: r.date.format("%Y-%m-%d").to_string(),
    };
    let run = requirements(&flow, date, calendars).map_err(bad)?.into_iter().map(wait).collect();
    let nodes = node_requirements(&flow, date, calendars)
        .map_err(bad)?
        .into_iter()
        .map(|(node, r)| NodeWait { node, wait: wait(r) })
        .collect();
    Ok((run, nodes))
}
