//! Flow YAML → validated `FlowDef`: parsing with line numbers, unknown fields denied
//! with a suggestion, and every check of SPEC §2 before anything is stored.

use std::fmt;
use std::time::Duration;

use crate::model::{FlowDef, RateLimitDef};

mod after;
mod bizdate;
mod calendars;
mod convert;
mod executor;
mod foreach;
mod graph;
mod message;
mod node;
mod outline;
mod raw;
mod report;
mod sql;
mod trigger;
mod xxl;
mod yaml;

#[cfg(test)]
mod tests;

pub use after::{MAX_AFTER, MAX_AFTER_OFFSET};
pub use calendars::check_calendars;
pub use message::{DEFAULT_MAX_DELIVERIES, DEFAULT_MAX_IN_FLIGHT, SOURCE_TYPES, check_sources};
pub(crate) use report::closest as closest_name;
pub use sql::check_datasources;
pub use trigger::{parse_cron, parse_timezone};

/// One problem found in a flow file, printed as `FILE:LINE: node X: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub file: String,
    pub line: Option<usize>,
    pub node: Option<String>,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.file, self.line.unwrap_or(1))?;
        if let Some(node) = &self.node {
            write!(f, "node {node}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// All problems found in one flow file (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Parses and validates one flow file. `file` is only used in error messages.
/// Every problem is reported, each with its line and node; nothing panics on bad input.
pub fn parse_flow(file: &str, source: &str) -> Result<FlowDef, SpecErrors> {
    let mut report = report::Report::new(file);
    let flow = yaml::load(source, &mut report).and_then(|raw| convert::flow(&raw, &mut report));
    report.finish(flow)
}

/// Parses a rate limit such as `10/s`, `100/m` or `1000/h`.
pub fn parse_rate_limit(text: &str) -> Result<RateLimitDef, String> {
    convert::parse_rate_limit(text)
}

/// Parses a duration such as `30s`, `5m`, `1h30m`, `500ms`, `36h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("bad duration `{text}`: {e}; write it like `30s`, `5m` or `1h30m`"))
}

/// `"; did you mean `x`?"` when `word` is a plausible typo of a candidate, else `""`.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    report::did_you_mean(word, candidates)
}
