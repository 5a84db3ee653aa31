//! Which upstream runs a flow's run for a business date waits for: each `after`
//! entry's flow (and node) at the run's date shifted by the entry's offset, counted
//! in business days of its calendar or in calendar days. A date outside a
//! calendar's data is an error, never a guess.

use chrono::{Days, NaiveDate};

use super::EstateFlow;

/// Shifting a date by business days; implemented over the server's calendars.
pub trait BusinessDays {
    /// `date` moved `offset` (≤ 0) days back: business days of `calendar`, or
    /// calendar days when `calendar` is `None`. `offset == 0` is `date` itself.
    fn shift(&self, calendar: Option<&str>, date: NaiveDate, offset: i32) -> Result<NaiveDate, DateError>;
}

/// Calendar days only: a named calendar is unknown.
#[derive(Debug, Clone, Copy, Default)]
pub struct CalendarDays;

impl BusinessDays for CalendarDays {
    fn shift(&self, calendar: Option<&str>, date: NaiveDate, offset: i32) -> Result<NaiveDate, DateError> {
        if let Some(c) = calendar {
            return Err(DateError::UnknownCalendar { calendar: c.to_string() });
        }
        plain_shift(date, offset)
    }
}

/// `date` moved `offset` calendar days (either way).
pub fn plain_shift(date: NaiveDate, offset: i32) -> Result<NaiveDate, DateError> {
    let days = Days::new(u64::from(offset.unsigned_abs()));
    let shifted = if offset < 0 { date.checked_sub_days(days) } else { date.checked_add_days(days) };
    shifted.ok_or(DateError::OutOfRange { date, offset })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DateError {
    #[error("unknown calendar `{calendar}`; define it in the server's `calendars:` or use a built-in one")]
    UnknownCalendar { calendar: String },
    #[error("calendar `{calendar}` has no data for {date}: {detail}; extend the calendar's data")]
    OutOfData { calendar: String, date: NaiveDate, detail: String },
    #[error("{date} shifted by {offset} days is out of range")]
    OutOfRange { date: NaiveDate, offset: i32 },
    #[error("bad business date `{0}`; write it as YYYY-MM-DD")]
    BadDate(String),
}

/// Parses `YYYY-MM-DD`.
pub fn parse_date(text: &str) -> Result<NaiveDate, DateError> {
    NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d").map_err(|_| DateError::BadDate(text.to_string()))
}

/// One upstream run (or node) a run waits for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Requirement {
    pub flow: String,
    pub node: Option<String>,
    pub date: NaiveDate,
}

impl std::fmt::Display for Requirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.node {
            Some(n) => write!(f, "{}.{} {}", self.flow, n, self.date),
            None => write!(f, "{} {}", self.flow, self.date),
        }
    }
}

/// What `flow`'s run for `date` waits for, one per `after` entry, in file order.
pub fn requirements(
    flow: &EstateFlow,
    date: NaiveDate,
    days: &dyn BusinessDays,
) -> Result<Vec<Requirement>, DateError> {
    flow.after.iter().map(|a| resolve(a, date, days)).collect()
}

/// What the nodes of `flow`'s run for `date` wait for: `(waiting node, upstream)`,
/// one per node-level `after` entry, in node then file order.
pub fn node_requirements(
    flow: &EstateFlow,
    date: NaiveDate,
    days: &dyn BusinessDays,
) -> Result<Vec<(String, Requirement)>, DateError> {
    flow.node_after.iter().map(|(node, a)| Ok((node.clone(), resolve(a, date, days)?))).collect()
}

fn resolve(
    a: &crate::model::AfterDef,
    date: NaiveDate,
    days: &dyn BusinessDays,
) -> Result<Requirement, DateError> {
    Ok(Requirement {
        flow: a.flow.clone(),
        node: a.node.clone(),
        date: days.shift(a.calendar.as_deref(), date, a.offset)?,
    })
}

/// Business days of the server's calendars; no calendar: calendar days.
impl BusinessDays for madeira_calendar::Calendars {
    fn shift(&self, calendar: Option<&str>, date: NaiveDate, offset: i32) -> Result<NaiveDate, DateError> {
        let Some(name) = calendar else { return plain_shift(date, offset) };
        let cal = self.get(name).ok_or_else(|| DateError::UnknownCalendar { calendar: name.to_string() })?;
        if offset == 0 {
            return Ok(date);
        }
        cal.add_business_days(date, offset).map_err(|e| DateError::OutOfData {
            calendar: name.to_string(),
            date,
            detail: e.to_string(),
        })
    }
}
