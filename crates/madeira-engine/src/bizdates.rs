//! The business date a new run gets: the caller's, or the flow's `biz_date`
//! rule applied to the trigger instant (`madeira_core::bizdate`).

use chrono::{DateTime, NaiveDate};
use madeira_core::FlowDef;
use madeira_core::bizdate::{biz_date_at, format_date};

use crate::EngineError;

/// `YYYY-MM-DD` of the run's business date: `given`, else derived from `at_ms`.
pub(crate) fn biz_date_of(
    def: &FlowDef,
    given: Option<NaiveDate>,
    at_ms: i64,
) -> Result<String, EngineError> {
    if let Some(d) = given {
        return Ok(format_date(d));
    }
    DateTime::from_timestamp_millis(at_ms)
        .and_then(|at| biz_date_at(&def.business, at))
        .map(format_date)
        .ok_or_else(|| {
            EngineError::BadBizDate(format!(
                "flow {}: no business date for the instant {at_ms} ms (out of the calendar's range)",
                def.name
            ))
        })
}
