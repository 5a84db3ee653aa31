//! Runs of observe-only flows (SPEC §11): `madeira exec` wraps a crontab line and
//! its sidecar reports the start and the end; the control plane records them as a
//! run of an `observe: true` flow (created on the first report when missing) whose
//! single node is named after the job. Runs are created with the idempotency key
//! `exec:<exec id>`, so a report delivered twice changes nothing; the end goes
//! through the engine loop and the planner like any attempt result.

use madeira_core::keys::RunKey;
use madeira_core::spec::{SpecError, SpecErrors};
use madeira_store::{CreateOutcome, NewRun, Overlap};
use serde_json::{Map, Value as Json};
use tokio::sync::oneshot;

use crate::envelope::Envelope;
use crate::executor::AttemptResult;
use crate::{EngineError, EngineHandle, clock::now_ms};

/// One report of a wrapped run.
#[derive(Debug, Clone, Default)]
pub struct ObservedReport {
    /// Same for the start and finish reports of one run.
    pub exec_id: String,
    pub flow: String,
    pub job: String,
    /// The reporting sidecar's group (used when the flow is created).
    pub group: String,
    pub host: String,
    pub finished: bool,
    pub started_at_ms: i64,
    pub finished_at_ms: i64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub log_tail: String,
}

/// The node id for a job name (`[a-z][a-z0-9_]*`).
pub fn node_id_for(job: &str) -> String {
    let mut id: String =
        job.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    if !id.starts_with(|c: char| c.is_ascii_lowercase()) {
        id.insert_str(0, "job_");
    }
    id
}

/// A flow name for a job name (`[a-z0-9-]`, at most 63 characters).
pub fn flow_name_for(job: &str) -> String {
    let name: String =
        job.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    let name = name.trim_matches('-').to_string();
    let name = if name.is_empty() { "exec".to_string() } else { name };
    name.chars().take(63).collect()
}

/// The YAML of an observe-only flow for `job` (what the first report creates).
pub fn observed_flow_yaml(flow: &str, job: &str, group: &str, cron: Option<(&str, &str, &str)>) -> String {
    let mut yaml = format!(
        "flow: {flow}\ndescription: \"Observed runs of `madeira exec --job {job}`\"\nobserve: true\n"
    );
    if let Some((expr, timezone, grace)) = cron {
        yaml.push_str(&format!(
            "triggers:\n  - cron: \"{expr}\"\n    timezone: {timezone}\n    grace: {grace}\n"
        ));
    }
    yaml.push_str(&format!(
        "nodes:\n  {}:\n    run: {{sidecar: {{group: {group}, job: {job}}}}}\n",
        node_id_for(job)
    ));
    yaml
}

impl ObservedReport {
    fn result(&self) -> AttemptResult {
        let duration_ms = (self.finished_at_ms - self.started_at_ms).max(0);
        let mut outputs = Map::new();
        outputs.insert("exit_code".into(), self.exit_code.map_or(Json::Null, Json::from));
        outputs.insert("duration_ms".into(), Json::from(duration_ms));
        outputs.insert("host".into(), Json::from(self.host.clone()));
        let log = self.log_tail.clone();
        match (self.exit_code, self.signal) {
            (Some(0), _) => AttemptResult::Success { outputs, log },
            (Some(code), _) => AttemptResult::Failure {
                error: format!("exit code {code} after {duration_ms} ms"),
                retryable: false,
                log,
            },
            (None, Some(sig)) => AttemptResult::Failure {
                error: format!("killed by signal {sig} after {duration_ms} ms"),
                retryable: false,
                log,
            },
            (None, None) => {
                AttemptResult::Failure { error: "ended without an exit code".into(), retryable: false, log }
            }
        }
    }
}

impl EngineHandle {
    /// Records one exec report; answers the run id once it is durable.
    pub async fn observe_exec(&self, report: ObservedReport) -> Result<String, EngineError> {
        let def = self.observed_flow(&report).await?;
        let node_name = node_id_for(&report.job);
        let node = def.node_index(&node_name).unwrap_or(0);
        let run = NewRun {
            id: uuid::Uuid::now_v7().to_string(),
            flow: def.name.clone(),
            version: self.flow_record_version(&def.name).await?,
            params: serde_json::json!({"host": report.host, "job": report.job}),
            idempotency_key: Some(RunKey::Exec { exec_id: report.exec_id.clone() }.into()),
            trigger: "exec".into(),
            node_names: def.nodes.iter().map(|n| n.id.clone()).collect(),
            max_active_runs: 0,
            overlap: Overlap::Queue,
            throttles: Vec::new(),
            trace_context: Some(crate::TraceContext::new_root().traceparent()),
            actor: format!("exec@{}", report.host),
            now_ms: if report.started_at_ms > 0 { report.started_at_ms } else { now_ms() },
            lease: None,
            biz_date: None,
            one_per_biz_date: false,
            after: Vec::new(),
            node_after: Vec::new(),
            wait_reason: None,
        };
        let run_id = match self.create(run, def.clone()).await? {
            CreateOutcome::Created { run_id, .. } => run_id,
            CreateOutcome::Existing { run_id, .. } => run_id,
            CreateOutcome::Skipped { .. } | CreateOutcome::Throttled { .. } | CreateOutcome::Paused => {
                return Err(EngineError::OverlapSkipped { flow: def.name.clone(), active: 0 });
            }
        };
        if report.finished {
            let (reply, answer) = oneshot::channel();
            let envelope = Envelope::ObservedDone {
                run_id: run_id.clone(),
                node,
                result: report.result(),
                reply: Some(reply),
            };
            self.send_envelope(envelope).await?;
            answer.await.map_err(|_| EngineError::ShuttingDown)??;
        }
        Ok(run_id)
    }

    /// The flow named by the report, created observe-only when missing.
    async fn observed_flow(
        &self,
        report: &ObservedReport,
    ) -> Result<std::sync::Arc<madeira_core::FlowDef>, EngineError> {
        let name = flow_name_for(&report.flow);
        if self.store().get_flow(&name).await?.is_none() {
            let yaml = observed_flow_yaml(&name, &report.job, &report.group, None);
            self.apply_flow(&format!("{name} (created by madeira exec)"), &yaml).await?;
        }
        let def = self.flow(&name, None).await?;
        if !def.observe {
            return Err(EngineError::Invalid(SpecErrors(vec![SpecError {
                file: name.clone(),
                line: None,
                node: None,
                message: format!(
                    "flow {name} is not `observe: true`; `madeira exec` reports only go to observe-only flows \
                     (pass --flow to name another one)"
                ),
            }])));
        }
        Ok(def)
    }

    async fn flow_record_version(&self, name: &str) -> Result<u32, EngineError> {
        Ok(self
            .store()
            .get_flow(name)
            .await?
            .ok_or_else(|| EngineError::FlowNotFound(name.to_string()))?
            .latest_version)
    }

    /// Tells the engine that an executor's availability changed (a sidecar came or
    /// went): nodes waiting in INIT for it are looked at again.
    pub async fn executors_changed(&self) -> Result<(), EngineError> {
        self.send_envelope(Envelope::ExecutorsChanged).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_flow_rules() {
        assert_eq!(node_id_for("pull-payments"), "pull_payments");
        assert_eq!(node_id_for("0backup.sh"), "job_0backup_sh");
        assert_eq!(flow_name_for("Backup_DB.sh"), "backup-db-sh");
        let yaml = observed_flow_yaml("backup", "backup-db", "local", Some(("0 2 * * *", "UTC", "10m")));
        let flow = madeira_core::spec::parse_flow("f.yaml", &yaml).expect("valid observe flow");
        assert!(flow.observe);
        assert_eq!(flow.nodes[0].id, "backup_db");
    }
}
