//! Calendar names a flow uses, checked on apply against the server's calendars
//! (the flow file alone cannot know them): each cron trigger's `calendar:`.
//! An unknown name is a `FILE:LINE` error with a suggestion.

use madeira_calendar::Calendars;

use crate::model::{FlowDef, TriggerDef};

use super::report::did_you_mean;
use super::{SpecError, SpecErrors};

/// Every calendar name `def` uses that `calendars` does not know, as errors.
pub fn check_calendars(file: &str, def: &FlowDef, calendars: &Calendars) -> Result<(), SpecErrors> {
    let known: Vec<&str> = calendars.names().collect();
    let errors: Vec<SpecError> = def
        .triggers
        .iter()
        .filter_map(|t| match t {
            TriggerDef::Cron(c) => c.calendar.as_ref(),
            TriggerDef::Event { .. } | TriggerDef::Message(_) | TriggerDef::FlowSucceeded { .. } => None,
        })
        .map(|c| (c.name.as_str(), c.line))
        .chain(def.after.iter().filter_map(|a| Some((a.calendar.as_deref()?, a.line))))
        .filter(|(name, _)| calendars.get(name).is_none())
        .map(|(name, line)| (name.to_string(), line))
        .map(|(name, line)| SpecError {
            file: file.to_string(),
            line,
            node: None,
            message: format!(
                "unknown calendar `{}`{}; the server has: {}",
                name,
                did_you_mean(&name, known.iter().copied()),
                known.join(", ")
            ),
        })
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(SpecErrors(errors)) }
}
