//! Business-day calendars: pure functions over dates, no I/O.
//!
//! A [`Calendar`] is a named set of business days: a base (`weekdays`, `all_days`
//! or another calendar) plus explicit `holidays`, `workdays` (make-up days) and an
//! optional `exclude_weekends` (trading calendars built on a workday calendar).
//! A calendar with listed days knows a bounded range of dates; asking about a day
//! outside it is [`CalendarError::OutOfData`] (or `BeforeData`), never a guess.
//! [`Calendars`] is the registry by name: [`Calendars::builtin`] ships `weekdays`,
//! `all_days` and `cn-workdays` (data in `data/cn-workdays.yaml`), and YAML
//! definitions ([`CalendarDef`]) are added with their bases resolved.

mod calendar;
mod definition;
mod registry;

pub use calendar::{Calendar, CalendarMode, YearSummary, month_end, month_start};
pub use definition::{CalendarDef, DayList, DefinitionError, parse_definitions};
pub use registry::Calendars;

use chrono::NaiveDate;

/// Why a calendar could not answer about a date.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// The date is after the last day the calendar has data for.
    #[error(
        "calendar `{calendar}` has no data for {date}: its data ends on {last_known}; add the \
         next year's holidays and make-up workdays to the calendar"
    )]
    OutOfData { calendar: String, date: NaiveDate, last_known: NaiveDate },
    /// The date is before the first day the calendar has data for.
    #[error(
        "calendar `{calendar}` has no data for {date}: its data starts on {first_known}; add \
         that year's holidays and make-up workdays to the calendar"
    )]
    BeforeData { calendar: String, date: NaiveDate, first_known: NaiveDate },
    /// `add_business_days(d, 0)` on a day that is not a business day.
    #[error("{date} is not a business day of calendar `{calendar}`")]
    NotBusinessDay { calendar: String, date: NaiveDate },
    /// The walk left chrono's date range or found no business day for ten years.
    #[error("calendar `{calendar}`: no business day found from {date} ({reason})")]
    NoBusinessDay { calendar: String, date: NaiveDate, reason: &'static str },
}
