//! Executors run one attempt of a node. `builtin` and `http` live here; the
//! sidecar executor (madeira-fleet) and the SQL executor (madeira-sql) plug in
//! through the `Executor` trait. Every attempt is bounded
//! by the node's timeout and can be aborted through its cancellation token.

mod builtin;
pub(crate) mod foreach;
mod http;
mod ssrf;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use madeira_core::ExecutorDef;
use serde_json::{Map, Value as Json};
use tokio_util::sync::CancellationToken;

pub use http::HttpExecutor;
pub use ssrf::HttpPolicy;

/// One attempt to run.
#[derive(Debug, Clone)]
pub struct Job {
    pub run_id: String,
    pub flow: String,
    pub node: String,
    pub attempt: u32,
    pub idempotency_key: String,
    pub executor: ExecutorDef,
    /// Exit codes that fail the node at once (`retry.no_retry_exit_codes`).
    pub no_retry_exit_codes: Vec<i32>,
    /// `{"params": {...}, "nodes": {"X": {"status", "outputs", "data_version"}}}`.
    pub input: Json,
    pub timeout: Duration,
    /// W3C `traceparent` of the attempt's span, handed to the job (env `TRACEPARENT`,
    /// or the `traceparent` header for http), exported or not.
    pub traceparent: Option<String>,
    /// The node was RUNNING when this control plane started (crash or restart):
    /// the previous attempt may still run on a sidecar, which should be given the
    /// chance to claim it before the attempt is placed anew.
    pub resumed: bool,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptResult {
    Success { outputs: Map<String, Json>, log: String },
    Failure { error: String, retryable: bool, log: String },
}

impl AttemptResult {
    pub fn failure(error: impl Into<String>, retryable: bool) -> Self {
        let error = error.into();
        AttemptResult::Failure { log: error.clone(), error, retryable }
    }

    pub fn log(&self) -> &str {
        match self {
            AttemptResult::Success { log, .. } | AttemptResult::Failure { log, .. } => log,
        }
    }
}

/// Runs attempts of one executor kind.
#[async_trait]
pub trait Executor: Send + Sync {
    /// Runs `job` until it ends or `cancel` fires (then it stops the work and
    /// returns once it is gone).
    async fn execute(&self, job: Job, cancel: CancellationToken) -> AttemptResult;

    /// Why an attempt of `def` cannot start now (e.g. no live sidecar declares the
    /// job); the node then waits in INIT with this reason until the executor says
    /// otherwise through `EngineHandle::executors_changed`.
    fn waiting_reason(&self, _def: &ExecutorDef) -> Option<String> {
        None
    }
}

/// The executors the engine dispatches to, by kind.
pub struct Executors {
    pub http: HttpExecutor,
    /// Jobs on sidecars; `None` until a sidecar link is configured.
    pub sidecar: Option<Arc<dyn Executor>>,
    /// SQL nodes against the configured datasources; `None`: none configured.
    pub sql: Option<Arc<dyn Executor>>,
    /// Handlers of XXL-JOB executors (`run: {xxl: …}`); `None`: no `xxl_job` config.
    pub xxl: Option<Arc<dyn Executor>>,
}

impl Executors {
    pub fn new(http: HttpPolicy) -> Self {
        Self { http: HttpExecutor::new(http), sidecar: None, sql: None, xxl: None }
    }

    /// True when an attempt of `def` runs inside this process (http, builtin), false
    /// for one a sidecar runs or a child run (it outlives a control-plane shutdown).
    pub fn in_process(&self, def: &ExecutorDef) -> bool {
        !matches!((def, &self.sidecar), (ExecutorDef::Sidecar(_), Some(_)) | (ExecutorDef::Subflow(_), _))
    }

    /// Why a node running `def` must wait in INIT before it is dispatched.
    pub fn waiting_reason(&self, def: &ExecutorDef) -> Option<String> {
        match (def, &self.sidecar, &self.xxl) {
            (ExecutorDef::Sidecar(_), Some(sidecar), _) => sidecar.waiting_reason(def),
            (ExecutorDef::Xxl(_), _, Some(xxl)) => xxl.waiting_reason(def),
            _ => None,
        }
    }

    /// Runs `job` with its timeout; a timeout is a retryable failure. Sidecar jobs
    /// time out cooperatively on the sidecar (SIGTERM, grace, SIGKILL): the attempt
    /// ends only once the process is gone, so no timeout is imposed here.
    pub async fn run(&self, job: Job, cancel: CancellationToken) -> AttemptResult {
        if let (ExecutorDef::Sidecar(_), Some(sidecar)) = (&job.executor, &self.sidecar) {
            return sidecar.execute(job, cancel).await;
        }
        // SQL attempts enforce the timeout in the database and end only once the
        // statement is gone there (cancelled, or its session killed after `grace`).
        if let ExecutorDef::Sql(def) = &job.executor {
            return match &self.sql {
                Some(sql) => sql.execute(job, cancel).await,
                None => AttemptResult::failure(
                    format!(
                        "no datasources configured: node needs datasource `{}`; add `datasources:` \
                         to the server config",
                        def.datasource
                    ),
                    false,
                ),
            };
        }
        // XXL-JOB attempts end by the executor's callback: a timeout sends `/kill`
        // and waits up to `grace` for it (cooperative, like a sidecar's).
        if let ExecutorDef::Xxl(def) = &job.executor {
            return match &self.xxl {
                Some(xxl) => xxl.execute(job, cancel).await,
                None => AttemptResult::failure(
                    format!(
                        "no `xxl_job` in the server config: node needs app `{}`; add `xxl_job: {{apps: [{{app: {}, \
                         token_env: …}}]}}`",
                        def.app, def.app
                    ),
                    false,
                ),
            };
        }
        let timeout = job.timeout;
        let work = async {
            match &job.executor {
                ExecutorDef::Builtin(def) => builtin::run(def, job.attempt, &cancel).await,
                ExecutorDef::Http(_) => self.http.execute(job.clone(), cancel.clone()).await,
                ExecutorDef::Sql(_) => AttemptResult::failure("sql node outside the sql executor", false),
                ExecutorDef::Xxl(_) => AttemptResult::failure("xxl node outside the xxl executor", false),
                ExecutorDef::Subflow(_) => AttemptResult::failure("sub-flow node outside the engine", false),
                ExecutorDef::Sidecar(def) => match &self.sidecar {
                    Some(sidecar) => sidecar.execute(job.clone(), cancel.clone()).await,
                    None => AttemptResult::failure(
                        format!(
                            "no sidecar link: node needs job `{}` of group `{}`; run `madeira sidecar` \
                             or use a builtin/http executor",
                            def.job, def.group
                        ),
                        false,
                    ),
                },
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(result) => result,
            Err(_) => {
                cancel.cancel();
                AttemptResult::failure(format!("timed out after {}", humanize(timeout)), true)
            }
        }
    }
}

/// The result of an attempt of `executor` when it is known without running
/// anything (builtin `noop` and `fail`): the engine then takes it at once,
/// without a task. `None` for builtin `sleep` and every other executor.
pub fn immediate(executor: &ExecutorDef, attempt: u32) -> Option<AttemptResult> {
    match executor {
        ExecutorDef::Builtin(def) => match builtin::ending(def, attempt) {
            builtin::Ending::Now(result) => Some(result),
            builtin::Ending::After(..) => None,
        },
        _ => None,
    }
}

pub(crate) fn humanize(d: Duration) -> String {
    if d.as_secs() > 0 && d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The last `max` bytes of `text`, cut at a character boundary.
pub(crate) fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
