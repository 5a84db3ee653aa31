//! Flow versions as the engine uses them: validation and storing on apply (a new
//! version only when the content changed), a cache of parsed versions, and the
//! latest version of every flow as the estate reads them (`estate`,
//! `latest_defs`, `triggered_by`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use madeira_calendar::Calendars;
use madeira_core::FlowDef;
use madeira_core::spec::{SpecError, SpecErrors, parse_flow};
use madeira_store::FlowStore;
use sha2::{Digest, Sha256};

use crate::calendars::{CalendarOrigin, CalendarSet};
use crate::{EngineError, clock::now_ms};

type ByVersion = HashMap<(String, u32), Arc<FlowDef>>;

/// Parsed flow versions, shared by the engine loop and its handles.
#[derive(Clone)]
pub struct FlowCache {
    inner: Arc<Mutex<ByVersion>>,
    /// The server's message sources `(name, type)`: a flow's message triggers
    /// must name one of them (checked on apply only).
    sources: Arc<Vec<(String, String)>>,
    /// The server's SQL datasources: a flow's SQL nodes must name one of them
    /// (checked on apply only).
    datasources: Arc<Vec<String>>,
    /// The server's calendars, applied ones included: cron triggers (and CEL
    /// calls) must name one of them (checked on apply); the scheduler reads them.
    calendars: CalendarSet,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyOutcome {
    pub flow: String,
    pub version: u32,
    /// False when the content equalled the latest version.
    pub created: bool,
}

impl Default for FlowCache {
    fn default() -> Self {
        FlowCache::with_sources(Vec::new(), Vec::new())
    }
}

impl FlowCache {
    /// A cache whose `apply` checks message triggers against `sources` and SQL
    /// nodes against `datasources`.
    pub fn with_sources(sources: Vec<(String, String)>, datasources: Vec<String>) -> Self {
        let calendars = CalendarSet::new(Calendars::builtin());
        Self {
            inner: Arc::default(),
            sources: Arc::new(sources),
            datasources: Arc::new(datasources),
            calendars,
        }
    }

    /// The same cache checking flows against (and scheduling on) `calendars`.
    pub fn with_calendars(mut self, calendars: Calendars) -> Self {
        self.calendars = CalendarSet::new(calendars);
        self
    }

    /// The server's calendars (as last read from the store for applied ones).
    pub fn calendars(&self) -> Arc<Calendars> {
        self.calendars.all()
    }

    /// Where the calendar `name` comes from.
    pub fn calendar_origin(&self, name: &str) -> Option<CalendarOrigin> {
        self.calendars.origin(name)
    }

    /// Reads the applied calendars from the store; true when they changed.
    pub async fn refresh_calendars(&self, store: &dyn FlowStore) -> Result<bool, EngineError> {
        self.calendars.refresh(store).await
    }

    /// Validates a calendar file and stores it as a new version of its calendar
    /// when it differs from the latest one (`ApplyOutcome::flow` is its name).
    pub async fn apply_calendar(
        &self,
        store: &dyn FlowStore,
        file: &str,
        source: &str,
    ) -> Result<ApplyOutcome, EngineError> {
        let hash = content_hash(file, source)?;
        self.calendars.apply(store, file, source, &hash, now_ms()).await
    }

    /// The parsed flow `name` at `version`, loading and parsing it on first use.
    pub async fn get(
        &self,
        store: &dyn FlowStore,
        name: &str,
        version: u32,
    ) -> Result<Arc<FlowDef>, EngineError> {
        let key = (name.to_string(), version);
        if let Some(def) = self.lock().get(&key) {
            return Ok(def.clone());
        }
        let stored = store
            .flow_version(name, version)
            .await?
            .ok_or_else(|| EngineError::VersionNotFound { flow: name.to_string(), version })?;
        let def = parse_flow(&format!("{name}@v{version}"), &stored.source).map_err(|e| {
            EngineError::BadStoredFlow { flow: name.to_string(), version, message: e.to_string() }
        })?;
        let def = Arc::new(def);
        self.lock().insert(key, def.clone());
        Ok(def)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ByVersion> {
        match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Validates `source` and stores it as a new version of its flow when it differs
    /// from the latest one. `file` names the source in error messages.
    pub async fn apply(
        &self,
        store: &dyn FlowStore,
        file: &str,
        source: &str,
    ) -> Result<ApplyOutcome, EngineError> {
        let def = parse_flow(file, source)?;
        madeira_core::spec::check_sources(file, &def, &self.sources)?;
        madeira_core::spec::check_datasources(file, &def, &self.datasources)?;
        // The store is the source of applied calendars: one applied on another
        // replica a moment ago counts.
        self.calendars.refresh(store).await?;
        madeira_core::spec::check_calendars(file, &def, &self.calendars.all())?;
        let estate = self.estate(store).await?;
        crate::estate::check_applied(estate, file, &def)?;
        let hash = content_hash(file, source)?;
        let put = store.put_flow(&def.name, source, &hash, now_ms()).await?;
        self.lock().insert((def.name.clone(), put.version), Arc::new(def.clone()));
        Ok(ApplyOutcome { flow: def.name, version: put.version, created: put.created })
    }
}

/// SHA-256 of the flow's canonical JSON form: formatting and comments do not make
/// a new version, any change of content does.
fn content_hash(file: &str, source: &str) -> Result<String, EngineError> {
    let value: serde_json::Value = serde_saphyr::from_str(source).map_err(|e| {
        SpecErrors(vec![SpecError { file: file.to_string(), line: None, node: None, message: e.to_string() }])
    })?;
    Ok(hex::encode(Sha256::digest(value.to_string().as_bytes())))
}

impl FlowCache {
    /// The estate of the latest version of every stored flow.
    pub async fn estate(&self, store: &dyn FlowStore) -> Result<madeira_core::estate::Estate, EngineError> {
        Ok(crate::estate::of(&self.latest_defs(store).await?))
    }

    /// The latest version of every stored flow (one that cannot be read is left out, logged).
    pub async fn latest_defs(&self, store: &dyn FlowStore) -> Result<Vec<Arc<FlowDef>>, EngineError> {
        let mut defs = Vec::new();
        for record in store.list_flows().await? {
            match self.get(store, &record.name, record.latest_version).await {
                Ok(def) => defs.push(def),
                Err(e) => tracing::warn!(flow = %record.name, error = %e, "estate: flow left out"),
            }
        }
        Ok(defs)
    }

    /// Flows (not paused) whose `flow_succeeded` trigger names `upstream`.
    pub async fn triggered_by(
        &self,
        store: &dyn FlowStore,
        upstream: &str,
    ) -> Result<Vec<Arc<FlowDef>>, EngineError> {
        let mut out = Vec::new();
        for record in store.list_flows().await? {
            if record.paused {
                continue;
            }
            let Ok(def) = self.get(store, &record.name, record.latest_version).await else { continue };
            let fires = def.triggers.iter().any(
                |t| matches!(t, madeira_core::TriggerDef::FlowSucceeded { flow, .. } if flow == upstream),
            );
            if fires {
                out.push(def);
            }
        }
        Ok(out)
    }
}
