//! One resolved calendar: its layers from the root rule up, the range of dates it
//! has data for, and the business-day arithmetic over them.

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{Datelike, NaiveDate, Weekday};
use serde::{Deserialize, Serialize};

use crate::CalendarError;

/// Most days walked looking for a business day before giving up (ten years).
const MAX_WALK_DAYS: u32 = 3660;

/// What to do with a tick that falls on a day that is not a business day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CalendarMode {
    /// Do not fire on that day.
    #[default]
    Skip,
    /// Fire on the next business day instead, at the same time of day.
    Next,
    /// Fire on the previous business day instead, at the same time of day.
    Previous,
}

impl CalendarMode {
    /// The name used in flow files (`skip`, `next`, `previous`).
    pub fn as_str(self) -> &'static str {
        match self {
            CalendarMode::Skip => "skip",
            CalendarMode::Next => "next",
            CalendarMode::Previous => "previous",
        }
    }
}

/// The rule at the bottom of every calendar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Root {
    Weekdays,
    AllDays,
}

/// One definition's contribution, applied over what the layers below it say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layer {
    pub(crate) holidays: BTreeSet<NaiveDate>,
    pub(crate) workdays: BTreeSet<NaiveDate>,
    pub(crate) exclude_weekends: bool,
}

/// A named set of business days. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    name: String,
    inner: Arc<Inner>,
}

#[derive(Debug, PartialEq, Eq)]
struct Inner {
    description: Option<String>,
    base: Option<String>,
    root: Root,
    layers: Vec<Layer>,
    first: Option<NaiveDate>,
    last: Option<NaiveDate>,
}

/// A year of a calendar, as shown by `madeira calendars show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct YearSummary {
    pub year: i32,
    /// Monday-to-Friday days that are not business days (holidays).
    pub off_days: Vec<NaiveDate>,
    /// Saturdays and Sundays that are business days (make-up workdays).
    pub make_up_days: Vec<NaiveDate>,
    pub business_days: u32,
}

fn is_weekend(d: NaiveDate) -> bool {
    matches!(d.weekday(), Weekday::Sat | Weekday::Sun)
}

impl Calendar {
    pub(crate) fn new(
        name: String,
        description: Option<String>,
        base: Option<String>,
        root: Root,
        layers: Vec<Layer>,
        range: (Option<NaiveDate>, Option<NaiveDate>),
    ) -> Calendar {
        let inner = Inner { description, base, root, layers, first: range.0, last: range.1 };
        Calendar { name, inner: Arc::new(inner) }
    }

    /// The primitive `weekdays` calendar: Monday to Friday, unbounded.
    pub fn weekdays() -> Calendar {
        let description = Some("Monday to Friday".to_string());
        Calendar::new("weekdays".into(), description, None, Root::Weekdays, vec![], (None, None))
    }

    /// The primitive `all_days` calendar: every day, unbounded.
    pub fn all_days() -> Calendar {
        let description = Some("every day".to_string());
        Calendar::new("all_days".into(), description, None, Root::AllDays, vec![], (None, None))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn description(&self) -> Option<&str> {
        self.inner.description.as_deref()
    }

    /// The base calendar's name (`None` for `weekdays` and `all_days`).
    pub fn base(&self) -> Option<&str> {
        self.inner.base.as_deref()
    }

    pub(crate) fn root(&self) -> Root {
        self.inner.root
    }

    pub(crate) fn layers(&self) -> &[Layer] {
        &self.inner.layers
    }

    /// The last day this calendar has data for; `None` when unbounded.
    pub fn last_known_day(&self) -> Option<NaiveDate> {
        self.inner.last
    }

    /// The first day this calendar has data for; `None` when unbounded.
    pub fn first_known_day(&self) -> Option<NaiveDate> {
        self.inner.first
    }

    fn check_range(&self, d: NaiveDate) -> Result<(), CalendarError> {
        if let Some(last) = self.inner.last.filter(|last| d > *last) {
            let calendar = self.name.clone();
            return Err(CalendarError::OutOfData { calendar, date: d, last_known: last });
        }
        if let Some(first) = self.inner.first.filter(|first| d < *first) {
            let calendar = self.name.clone();
            return Err(CalendarError::BeforeData { calendar, date: d, first_known: first });
        }
        Ok(())
    }

    /// Whether `d` is a business day; an error when `d` is outside the data.
    pub fn is_business_day(&self, d: NaiveDate) -> Result<bool, CalendarError> {
        self.check_range(d)?;
        let mut open = match self.inner.root {
            Root::Weekdays => !is_weekend(d),
            Root::AllDays => true,
        };
        for layer in &self.inner.layers {
            if layer.holidays.contains(&d) {
                open = false;
            } else if layer.workdays.contains(&d) {
                open = true;
            } else if layer.exclude_weekends && is_weekend(d) {
                open = false;
            }
        }
        Ok(open)
    }

    /// The first business day strictly after (`forward`) or before `d`.
    fn step(&self, d: NaiveDate, forward: bool) -> Result<NaiveDate, CalendarError> {
        // A day the calendar does not know is an error even where the step would
        // land inside its data: the answer must never rest on a guess about `d`.
        self.check_range(d)?;
        let mut day = d;
        for _ in 0..MAX_WALK_DAYS {
            let next = if forward { day.succ_opt() } else { day.pred_opt() };
            day = next.ok_or_else(|| self.no_business_day(d, "end of the date range"))?;
            if self.is_business_day(day)? {
                return Ok(day);
            }
        }
        Err(self.no_business_day(d, "none within ten years"))
    }

    fn no_business_day(&self, date: NaiveDate, reason: &'static str) -> CalendarError {
        CalendarError::NoBusinessDay { calendar: self.name.clone(), date, reason }
    }

    /// The first business day strictly after `d`.
    pub fn next_business_day(&self, d: NaiveDate) -> Result<NaiveDate, CalendarError> {
        self.step(d, true)
    }

    /// The last business day strictly before `d`.
    pub fn previous_business_day(&self, d: NaiveDate) -> Result<NaiveDate, CalendarError> {
        self.step(d, false)
    }

    /// `n > 0`: the n-th business day after `d`; `n < 0`: the |n|-th business day
    /// before `d`; `n == 0`: `d` itself when it is a business day, else
    /// `NotBusinessDay`. `d` itself need not be a business day when `n != 0`.
    pub fn add_business_days(&self, d: NaiveDate, n: i32) -> Result<NaiveDate, CalendarError> {
        if n == 0 {
            return match self.is_business_day(d)? {
                true => Ok(d),
                false => Err(CalendarError::NotBusinessDay { calendar: self.name.clone(), date: d }),
            };
        }
        let mut day = d;
        for _ in 0..n.unsigned_abs() {
            day = self.step(day, n > 0)?;
        }
        Ok(day)
    }

    /// Where a tick on day `d` goes under `mode`: `Some(d)` on a business day,
    /// `None` when skipped, else the next/previous business day.
    pub fn adjust(&self, d: NaiveDate, mode: CalendarMode) -> Result<Option<NaiveDate>, CalendarError> {
        if self.is_business_day(d)? {
            return Ok(Some(d));
        }
        match mode {
            CalendarMode::Skip => Ok(None),
            CalendarMode::Next => self.next_business_day(d).map(Some),
            CalendarMode::Previous => self.previous_business_day(d).map(Some),
        }
    }

    /// The last business day of `d`'s month (on or before its last day).
    pub fn last_business_day_of_month(&self, d: NaiveDate) -> Result<NaiveDate, CalendarError> {
        let end = month_end(d);
        match self.is_business_day(end)? {
            true => Ok(end),
            false => self.previous_business_day(end),
        }
    }

    /// The holidays on weekdays and the make-up weekend days of `year`.
    pub fn year_summary(&self, year: i32) -> Result<YearSummary, CalendarError> {
        let (Some(start), Some(end)) =
            (NaiveDate::from_ymd_opt(year, 1, 1), NaiveDate::from_ymd_opt(year, 12, 31))
        else {
            return Err(CalendarError::NoBusinessDay {
                calendar: self.name.clone(),
                date: NaiveDate::MIN,
                reason: "year out of the date range",
            });
        };
        let mut summary = YearSummary { year, off_days: vec![], make_up_days: vec![], business_days: 0 };
        for day in start.iter_days().take_while(|d| *d <= end) {
            let open = self.is_business_day(day)?;
            summary.business_days += u32::from(open);
            match (open, is_weekend(day)) {
                (false, false) => summary.off_days.push(day),
                (true, true) => summary.make_up_days.push(day),
                _ => {}
            }
        }
        Ok(summary)
    }
}

/// The first day of `d`'s month.
pub fn month_start(d: NaiveDate) -> NaiveDate {
    d.with_day(1).unwrap_or(d)
}

/// The last day of `d`'s month.
pub fn month_end(d: NaiveDate) -> NaiveDate {
    let first = month_start(d);
    let next = first.checked_add_months(chrono::Months::new(1));
    next.and_then(|n| n.pred_opt()).unwrap_or(d)
}
