//! The server's calendars as the engine uses them: the ones read at start
//! (built-in, server config, flows directory) plus the calendars applied
//! through the API (`calendar_versions` in the store, versioned like flows).
//! The store is the source of the applied ones: every replica reads them again
//! before a flow is applied and every few seconds (`EngineHandle::watch_calendars`),
//! so a calendar applied on one replica is scheduled on by all.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use madeira_calendar::{CalendarDef, Calendars, parse_definitions};
use madeira_core::spec::{SpecError, SpecErrors};
use madeira_store::FlowStore;
use tracing::{info, warn};

use crate::EngineError;

/// The calendars and where the applied ones stand.
#[derive(Clone)]
pub(crate) struct CalendarSet {
    inner: Arc<RwLock<Inner>>,
}

struct Inner {
    /// Built-in, config and flows-directory calendars (read at start).
    base: Arc<Calendars>,
    /// Applied calendars by name: version and definition, as last read.
    applied: BTreeMap<String, (u32, CalendarDef)>,
    /// `base` extended with `applied`.
    all: Arc<Calendars>,
}

/// Where a calendar the server knows comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalendarOrigin {
    /// Shipped with Madeira (`weekdays`, `all_days`, `cn-workdays`).
    Builtin,
    /// The server config's `calendars:` or a calendar file of the flows directory.
    Config,
    /// Applied through the API, at this version.
    Applied(u32),
}

impl CalendarSet {
    pub(crate) fn new(base: Calendars) -> Self {
        let base = Arc::new(base);
        let inner = Inner { base: base.clone(), applied: BTreeMap::new(), all: base };
        Self { inner: Arc::new(RwLock::new(inner)) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn all(&self) -> Arc<Calendars> {
        self.read().all.clone()
    }

    /// Where `name` comes from (`None`: unknown).
    pub(crate) fn origin(&self, name: &str) -> Option<CalendarOrigin> {
        let inner = self.read();
        if let Some((version, _)) = inner.applied.get(name) {
            return Some(CalendarOrigin::Applied(*version));
        }
        inner.base.get(name)?;
        let builtin = Calendars::builtin();
        let shipped = builtin.get(name).is_some() && builtin.definition(name) == inner.base.definition(name);
        Some(if shipped { CalendarOrigin::Builtin } else { CalendarOrigin::Config })
    }

    /// Reads the applied calendars from the store; true when they changed.
    /// A stored calendar that no longer resolves (its base is gone after a
    /// restart with another config) is left out, with a warning.
    pub(crate) async fn refresh(&self, store: &dyn FlowStore) -> Result<bool, EngineError> {
        let rows = store.calendars().await?;
        let same = {
            let inner = self.read();
            rows.len() == inner.applied.len()
                && rows.iter().all(|r| inner.applied.get(&r.name).is_some_and(|(v, _)| *v == r.version))
        };
        if same {
            return Ok(false);
        }
        let base = self.read().base.clone();
        let mut applied = BTreeMap::new();
        for row in rows {
            if base.get(&row.name).is_some() {
                warn!(calendar = %row.name, "an applied calendar has the name of a configured one; the configured one is used");
                continue;
            }
            match parse_definitions(&row.source).map(|mut defs| defs.pop()) {
                Ok(Some(def)) => {
                    applied.insert(row.name, (row.version, def));
                }
                Ok(None) | Err(_) => {
                    warn!(calendar = %row.name, "a stored calendar no longer parses; left out")
                }
            }
        }
        let all = resolve(&base, &mut applied);
        madeira_core::expr::set_calendars(all.clone());
        for (name, (version, _)) in &applied {
            info!(calendar = %name, version, "applied calendar loaded");
        }
        let mut inner = self.inner.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        inner.applied = applied;
        inner.all = all;
        Ok(true)
    }

    /// Checks `source`, one calendar definition (`calendar: NAME` …), against
    /// the calendars known (after reading the store's) and stores it as a new
    /// version when its content changed.
    pub(crate) async fn apply(
        &self,
        store: &dyn FlowStore,
        file: &str,
        source: &str,
        hash: &str,
        now_ms: i64,
    ) -> Result<crate::ApplyOutcome, EngineError> {
        self.refresh(store).await?;
        let invalid = |message: String| {
            EngineError::Invalid(SpecErrors(vec![SpecError {
                file: file.to_string(),
                line: Some(1),
                node: None,
                message,
            }]))
        };
        let mut defs = parse_definitions(source).map_err(|e| invalid(e.to_string()))?;
        let def = match (defs.pop(), defs.is_empty()) {
            (Some(def), true) => def,
            _ => return Err(invalid("a calendar file applied through the API holds one calendar".into())),
        };
        let (base, mut applied) = {
            let inner = self.read();
            (inner.base.clone(), inner.applied.clone())
        };
        if base.get(&def.name).is_some() {
            return Err(invalid(format!(
                "calendar `{}` is built in or defined in the server's configuration; an applied calendar \
                 cannot replace it: give yours another name (or change the server config)",
                def.name
            )));
        }
        applied.insert(def.name.clone(), (0, def.clone()));
        let defs: Vec<CalendarDef> = applied.values().map(|(_, d)| d.clone()).collect();
        base.extend(defs).map_err(|e| invalid(e.to_string()))?;
        let put = store.put_calendar(&def.name, source, hash, now_ms).await?;
        self.refresh(store).await?;
        Ok(crate::ApplyOutcome { flow: def.name, version: put.version, created: put.created })
    }
}

/// `base` extended with `applied`; calendars that do not resolve are dropped
/// one by one (with a warning) until the rest does.
fn resolve(base: &Calendars, applied: &mut BTreeMap<String, (u32, CalendarDef)>) -> Arc<Calendars> {
    loop {
        let defs: Vec<CalendarDef> = applied.values().map(|(_, d)| d.clone()).collect();
        match base.extend(defs) {
            Ok(all) => return Arc::new(all),
            Err(e) => {
                // Drop the calendar the error names, else the last one.
                let text = e.to_string();
                let culprit = applied
                    .keys()
                    .find(|name| text.contains(&format!("`{name}`")))
                    .or_else(|| applied.keys().last())
                    .cloned();
                let Some(name) = culprit else { return Arc::new(base.clone()) };
                warn!(calendar = %name, error = %text, "an applied calendar no longer resolves; left out");
                applied.remove(&name);
            }
        }
    }
}
