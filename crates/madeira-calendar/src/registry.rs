//! The registry of calendars by name: the built-in ones plus YAML definitions,
//! bases resolved (unknown bases and cycles refused).

use std::collections::{BTreeMap, BTreeSet};

use crate::calendar::{Calendar, Layer, Root};
use crate::definition::{CalendarDef, DefinitionError, parse_definitions};

/// The shipped mainland China workday calendar.
const CN_WORKDAYS: &str = include_str!("../data/cn-workdays.yaml");

/// Names that are rules, not data: never redefined.
const PRIMITIVES: [&str; 2] = ["weekdays", "all_days"];

/// Calendars by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendars {
    by_name: BTreeMap<String, Calendar>,
    /// Their definitions (`None` for the primitives), for `extend` and display.
    defs: BTreeMap<String, CalendarDef>,
}

impl Calendars {
    /// `weekdays`, `all_days` and the shipped `cn-workdays`.
    pub fn builtin() -> Calendars {
        let mut calendars = Calendars { by_name: BTreeMap::new(), defs: BTreeMap::new() };
        for primitive in [Calendar::weekdays(), Calendar::all_days()] {
            calendars.by_name.insert(primitive.name().to_string(), primitive);
        }
        let shipped = parse_definitions(CN_WORKDAYS).expect("data/cn-workdays.yaml parses (tested)");
        calendars.extend(shipped).expect("data/cn-workdays.yaml resolves (tested)")
    }

    /// A copy with `defs` added. A definition may replace a shipped data calendar
    /// (e.g. a newer `cn-workdays`) but not `weekdays`/`all_days`; two
    /// definitions of one name, unknown bases and cycles are refused.
    pub fn extend(&self, defs: Vec<CalendarDef>) -> Result<Calendars, DefinitionError> {
        let mut new: BTreeMap<String, CalendarDef> = BTreeMap::new();
        for def in defs {
            if PRIMITIVES.contains(&def.name.as_str()) {
                return Err(DefinitionError::Builtin(def.name));
            }
            if new.contains_key(&def.name) {
                return Err(DefinitionError::Duplicate(def.name));
            }
            new.insert(def.name.clone(), def);
        }
        let mut all = self.defs.clone();
        all.extend(new);
        let mut out = Calendars { by_name: BTreeMap::new(), defs: all };
        for primitive in [Calendar::weekdays(), Calendar::all_days()] {
            out.by_name.insert(primitive.name().to_string(), primitive);
        }
        let names: Vec<String> = out.defs.keys().cloned().collect();
        for name in names {
            out.resolve(&name, &mut Vec::new())?;
        }
        Ok(out)
    }

    /// Builds `name` (and its bases first); `path` holds the names being built.
    fn resolve(&mut self, name: &str, path: &mut Vec<String>) -> Result<Calendar, DefinitionError> {
        if let Some(done) = self.by_name.get(name) {
            return Ok(done.clone());
        }
        if let Some(at) = path.iter().position(|n| n == name) {
            let mut cycle = path[at..].to_vec();
            cycle.push(name.to_string());
            return Err(DefinitionError::Cycle(cycle.join(" -> ")));
        }
        let def = self.defs.get(name).cloned().ok_or_else(|| DefinitionError::UnknownBase {
            name: path.last().cloned().unwrap_or_default(),
            base: name.to_string(),
            known: self.known().join(", "),
        })?;
        let expanded = def.expand()?;
        path.push(name.to_string());
        let base = self.resolve(&def.base, path)?;
        path.pop();
        let mut layers = base.layers().to_vec();
        let layer = Layer {
            holidays: expanded.holidays,
            workdays: expanded.workdays,
            exclude_weekends: def.exclude_weekends,
        };
        layers.push(layer);
        let first = later(base.first_known_day(), expanded.from);
        let last = earlier(base.last_known_day(), expanded.until);
        let root: Root = base.root();
        let calendar = Calendar::new(
            def.name.clone(),
            def.description.clone(),
            Some(def.base.clone()),
            root,
            layers,
            (first, last),
        );
        self.by_name.insert(name.to_string(), calendar.clone());
        Ok(calendar)
    }

    fn known(&self) -> Vec<String> {
        let mut names: BTreeSet<String> = PRIMITIVES.iter().map(|p| p.to_string()).collect();
        names.extend(self.defs.keys().cloned());
        names.into_iter().collect()
    }

    /// The calendar called `name`.
    pub fn get(&self, name: &str) -> Option<&Calendar> {
        self.by_name.get(name)
    }

    /// All names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// All calendars, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Calendar> {
        self.by_name.values()
    }

    /// The definition `name` was built from (`None` for `weekdays`/`all_days`).
    pub fn definition(&self, name: &str) -> Option<&CalendarDef> {
        self.defs.get(name)
    }
}

fn later(a: Option<chrono::NaiveDate>, b: Option<chrono::NaiveDate>) -> Option<chrono::NaiveDate> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn earlier(a: Option<chrono::NaiveDate>, b: Option<chrono::NaiveDate>) -> Option<chrono::NaiveDate> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Default for Calendars {
    fn default() -> Self {
        Calendars::builtin()
    }
}
