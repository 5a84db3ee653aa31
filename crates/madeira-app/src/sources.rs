//! Message triggers in the binary: starts the `madeira-sources` supervisor over
//! this control plane's engine — runs made through `EngineHandle::trigger` with
//! the key `message:<source>:<key>` after the flow's `rate_limit`, the triggers
//! read from the store's latest flow versions, poison messages raised as one
//! warning alert per source — and renders `madeira sources`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use madeira_engine::{EngineError, EngineHandle, TriggerRequest};
use madeira_server::AppState;
use madeira_sources::supervisor::Catalog;
use madeira_sources::{
    Made, Refusal, RunRequest, Runs, SourceConfig, Statuses, Supervisor, TriggerSpec, Warnings,
};
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// `(name, type)` of each source, for checking flows on apply.
pub fn names(sources: &[SourceConfig]) -> Vec<(String, String)> {
    sources.iter().map(|s| (s.name.clone(), s.kind.name().to_string())).collect()
}

pub struct Setup {
    pub configs: Vec<SourceConfig>,
    pub metrics: madeira_sources::SourceMetrics,
    pub alerts: madeira_alert::AlertHandle,
    pub state: AppState,
}

/// Starts consuming (stopped by `drain`); answers the view for `GET /sources`.
pub fn start(
    setup: Setup,
    drain: &CancellationToken,
    tasks: &mut Vec<JoinHandle<()>>,
) -> madeira_server::SourcesView {
    let statuses = Statuses::new(setup.metrics);
    let mut sources = HashMap::new();
    for config in &setup.configs {
        statuses.add_source(&config.name, config.kind.name());
        sources.insert(config.name.clone(), madeira_sources::open(config));
    }
    let engine = setup.state.engine.clone();
    let supervisor = Supervisor {
        sources,
        catalog: Arc::new(StoreCatalog { engine: engine.clone(), flows: setup.state.reads.flows.clone() }),
        runs: Arc::new(EngineRuns { state: setup.state }),
        warnings: Arc::new(AlertWarnings(setup.alerts)),
        statuses: statuses.clone(),
        replica: engine.replica_id().to_string(),
        poll: Duration::from_secs(1),
    };
    tasks.push(tokio::spawn(supervisor.run(drain.clone())));
    Arc::new(move || serde_json::to_value(statuses.snapshot()).unwrap_or(Value::Null))
}

struct EngineRuns {
    state: AppState,
}

#[async_trait]
impl Runs for EngineRuns {
    async fn make(&self, request: RunRequest) -> Result<Made, Refusal> {
        let engine = &self.state.engine;
        let def = engine.flow(&request.flow, None).await.map_err(refusal)?;
        if let Err(wait) = self.state.rate_wait(&request.flow, def.rate_limit).await {
            return Err(Refusal::RateLimited(wait));
        }
        // The key is `message:<source>:<key>`: the run's actor names the source.
        let source = request.idempotency_key.split(':').nth(1).unwrap_or_default();
        let actor = format!("message:{source}");
        let biz_date = match request.biz_date.as_deref().map(madeira_core::bizdate::parse_date) {
            Some(Ok(date)) => Some(date),
            Some(Err(e)) => return Err(Refusal::Rejected(e)),
            None => None,
        };
        let trigger = TriggerRequest {
            flow: request.flow,
            params: request.params,
            idempotency_key: Some(request.idempotency_key),
            trigger: "message".into(),
            actor,
            version: None,
            biz_date,
            at_ms: None,
        };
        match engine.trigger(trigger).await {
            Ok(o) if o.created => Ok(Made::Created(o.run_id)),
            Ok(o) => Ok(Made::Existing(o.run_id)),
            Err(e) => Err(refusal(e)),
        }
    }
}

fn refusal(e: EngineError) -> Refusal {
    match e {
        EngineError::QueueFull { .. } => Refusal::QueueFull(e.to_string()),
        EngineError::OverlapSkipped { .. } => Refusal::OverlapSkipped(e.to_string()),
        EngineError::Paused(_) => Refusal::Paused,
        EngineError::Store(_) | EngineError::ShuttingDown => Refusal::Unavailable(e.to_string()),
        other => Refusal::Rejected(other.to_string()),
    }
}

/// The flows' message triggers: the stored flows, each read through the engine.
struct StoreCatalog {
    engine: EngineHandle,
    flows: Arc<dyn madeira_store::FlowReader>,
}

#[async_trait]
impl Catalog for StoreCatalog {
    async fn triggers(&self) -> Result<Vec<TriggerSpec>, String> {
        let flows = self.flows.list_flows().await.map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for record in flows {
            let def = match self.engine.flow(&record.name, Some(record.latest_version)).await {
                Ok(def) => def,
                Err(e) => {
                    tracing::warn!(flow = %record.name, error = %e, "message triggers: flow not readable");
                    continue;
                }
            };
            for (index, trigger) in def.triggers.iter().enumerate() {
                if let madeira_core::TriggerDef::Message(m) = trigger {
                    let def = Arc::new((**m).clone());
                    out.push(TriggerSpec { flow: record.name.clone(), index, paused: record.paused, def });
                }
            }
        }
        Ok(out)
    }
}

struct AlertWarnings(madeira_alert::AlertHandle);

impl Warnings for AlertWarnings {
    fn poison(&self, source: &str, flow: &str, reason: &str) {
        tracing::warn!(source, flow, reason, "message dead-lettered: it cannot be parsed or mapped");
        self.0.raise(madeira_alert::Raise {
            key: format!("message_poison|{source}"),
            alertname: "MadeiraTriggerMessagePoison".into(),
            severity: madeira_alert::Severity::Warning,
            flow: None,
            node: None,
            labels: BTreeMap::from([("source".to_string(), source.to_string())]),
            summary: format!("message source {source}: a message was dead-lettered (flow {flow}): {reason}"),
            description: Some(
                "it could not be parsed, or its key/params/when CEL failed; see the dead-letter destination"
                    .into(),
            ),
            run_id: None,
            fallback_note: None,
            held_by: None,
        });
    }
}

/// `madeira sources` as text.
pub fn sources_text(body: &Value) -> String {
    let mut out = format!(
        "{:<16} {:<14} {:<10} {:<24} {:<36} {:>6}  {}\n",
        "SOURCE", "TYPE", "STATE", "FLOW", "CONSUMES", "LAG", "LAST ERROR"
    );
    for s in body["sources"].as_array().into_iter().flatten() {
        let consumers = s["consumers"].as_array().cloned().unwrap_or_default();
        let name = s["name"].as_str().unwrap_or("");
        let kind = s["type"].as_str().unwrap_or("");
        if consumers.is_empty() {
            out.push_str(&format!(
                "{name:<16} {kind:<14} {:<10} (no flow consumes it)\n",
                s["state"].as_str().unwrap_or("")
            ));
        }
        for c in consumers {
            let lag = c["lag"].as_u64().map_or_else(|| "-".to_string(), |l| l.to_string());
            out.push_str(&format!(
                "{name:<16} {kind:<14} {:<10} {:<24} {:<36} {lag:>6}  {}\n",
                c["state"].as_str().unwrap_or(""),
                c["flow"].as_str().unwrap_or(""),
                c["consumes"].as_str().unwrap_or(""),
                c["last_error"].as_str().unwrap_or("")
            ));
        }
    }
    out
}
