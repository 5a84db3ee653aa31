//! Calendar definitions as written in YAML (`kind: calendar` files, the server
//! config's `calendars:` list, the shipped `data/cn-workdays.yaml`).

use std::collections::BTreeSet;
use std::fmt;

use chrono::NaiveDate;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most days one `from..to` entry may expand to (ten years).
const MAX_RANGE_DAYS: i64 = 3660;

/// One calendar as written in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalendarDef {
    /// Optional marker in calendar files; only `calendar` is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `name:`, or `calendar:` in a calendar file applied like a flow.
    #[serde(alias = "calendar")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `weekdays` (default), `all_days`, or the name of another calendar.
    #[serde(default = "default_base")]
    pub base: String,
    /// First day the listed data covers; default: 1 January of the earliest listed year.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<NaiveDate>,
    /// Last day the listed data covers; default: 31 December of the latest listed year.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<NaiveDate>,
    /// Days off: `YYYY-MM-DD` or `YYYY-MM-DD..YYYY-MM-DD` (inclusive).
    #[serde(default)]
    pub holidays: Vec<DayList>,
    /// Make-up workdays (business days even on a weekend or in the base's holidays).
    #[serde(default)]
    pub workdays: Vec<DayList>,
    /// Saturdays and Sundays are not business days even when the base says so.
    #[serde(default)]
    pub exclude_weekends: bool,
}

fn default_base() -> String {
    "weekdays".to_string()
}

/// One entry of `holidays` / `workdays`: a day or an inclusive range of days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayList {
    pub from: NaiveDate,
    pub to: NaiveDate,
}

impl DayList {
    /// Parses `YYYY-MM-DD` or `YYYY-MM-DD..YYYY-MM-DD`.
    pub fn parse(text: &str) -> Result<DayList, String> {
        let text = text.trim();
        let day = |s: &str| {
            NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d")
                .map_err(|_| format!("`{text}` is not a date: write YYYY-MM-DD or YYYY-MM-DD..YYYY-MM-DD"))
        };
        let (from, to) = match text.split_once("..") {
            Some((a, b)) => (day(a)?, day(b)?),
            None => (day(text)?, day(text)?),
        };
        if to < from {
            return Err(format!("`{text}`: the range ends before it starts"));
        }
        if (to - from).num_days() >= MAX_RANGE_DAYS {
            return Err(format!("`{text}`: a range may cover at most {MAX_RANGE_DAYS} days"));
        }
        Ok(DayList { from, to })
    }

    pub fn days(&self) -> impl Iterator<Item = NaiveDate> + '_ {
        self.from.iter_days().take_while(|d| *d <= self.to)
    }
}

impl fmt::Display for DayList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.from == self.to {
            true => write!(f, "{}", self.from),
            false => write!(f, "{}..{}", self.from, self.to),
        }
    }
}

impl<'de> Deserialize<'de> for DayList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        DayList::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for DayList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Why a set of calendar definitions was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefinitionError {
    #[error("calendar file: {0}")]
    Yaml(String),
    #[error("calendar `{name}`: `kind: {kind}` is not a calendar; write `kind: calendar`")]
    WrongKind { name: String, kind: String },
    #[error("calendar name `{0}` is invalid: use letters, digits, `-` and `_` (1 to 64 characters)")]
    BadName(String),
    #[error("calendar `{0}` is defined twice; keep one definition")]
    Duplicate(String),
    #[error("calendar `{0}` is built in and cannot be redefined; give yours another name")]
    Builtin(String),
    #[error("calendar `{name}`: unknown base `{base}`; known calendars: {known}")]
    UnknownBase { name: String, base: String, known: String },
    #[error(
        "calendars {0} form a cycle through their `base`; one of them must start from weekdays or all_days"
    )]
    Cycle(String),
    #[error("calendar `{name}`: `from` {from} is after `until` {until}")]
    EmptyRange { name: String, from: NaiveDate, until: NaiveDate },
    #[error(
        "calendar `{name}`: {day} is listed outside its data range {from}..{until}; widen `from`/`until` or drop the day"
    )]
    OutsideRange { name: String, day: NaiveDate, from: NaiveDate, until: NaiveDate },
    #[error("calendar `{name}`: {day} is listed both as a holiday and as a workday")]
    Both { name: String, day: NaiveDate },
}

/// Either one definition or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(Box<CalendarDef>),
    Many(Vec<CalendarDef>),
}

/// Parses a calendar file: one definition (a mapping) or a list of them.
pub fn parse_definitions(text: &str) -> Result<Vec<CalendarDef>, DefinitionError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    options.strict_booleans = true;
    // Try the common single-mapping form first so its errors (with line numbers) are the ones shown.
    match serde_saphyr::from_str_with_options::<CalendarDef>(text, options.clone()) {
        Ok(def) => Ok(vec![def]),
        Err(single) => match serde_saphyr::from_str_with_options::<OneOrMany>(text, options) {
            Ok(OneOrMany::Many(defs)) => Ok(defs),
            Ok(OneOrMany::One(def)) => Ok(vec![*def]),
            Err(_) => Err(DefinitionError::Yaml(single.to_string())),
        },
    }
}

impl CalendarDef {
    /// Checks the name and kind; returns the holidays and workdays expanded and
    /// the data range (`from`, `until`), defaulted from the listed years.
    pub(crate) fn expand(&self) -> Result<Expanded, DefinitionError> {
        if let Some(kind) = self.kind.as_deref().filter(|k| *k != "calendar") {
            return Err(DefinitionError::WrongKind { name: self.name.clone(), kind: kind.to_string() });
        }
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if self.name.is_empty() || self.name.len() > 64 || !self.name.chars().all(valid) {
            return Err(DefinitionError::BadName(self.name.clone()));
        }
        let holidays: BTreeSet<NaiveDate> = self.holidays.iter().flat_map(DayList::days).collect();
        let workdays: BTreeSet<NaiveDate> = self.workdays.iter().flat_map(DayList::days).collect();
        if let Some(day) = holidays.intersection(&workdays).next() {
            return Err(DefinitionError::Both { name: self.name.clone(), day: *day });
        }
        let listed = || holidays.iter().chain(workdays.iter());
        let from = self.from.or_else(|| listed().min().and_then(|d| d.with_ordinal(1)));
        let until = self.until.or_else(|| {
            listed().max().and_then(|d| NaiveDate::from_ymd_opt(chrono::Datelike::year(d), 12, 31))
        });
        if let (Some(from), Some(until)) = (from, until) {
            if from > until {
                return Err(DefinitionError::EmptyRange { name: self.name.clone(), from, until });
            }
            if let Some(day) = listed().find(|d| **d < from || **d > until) {
                let name = self.name.clone();
                return Err(DefinitionError::OutsideRange { name, day: *day, from, until });
            }
        }
        Ok(Expanded { holidays, workdays, from, until })
    }
}

use chrono::Datelike as _;

pub(crate) struct Expanded {
    pub(crate) holidays: BTreeSet<NaiveDate>,
    pub(crate) workdays: BTreeSet<NaiveDate>,
    pub(crate) from: Option<NaiveDate>,
    pub(crate) until: Option<NaiveDate>,
}
