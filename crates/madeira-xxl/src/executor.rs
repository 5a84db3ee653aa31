//! `XxlExecutor`: one attempt of a `run: {xxl: …}` node. It picks a live executor
//! of the app per the node's route, sends `/run` with a `logId` derived from the
//! attempt (so the same attempt maps to the same id after a restart), then waits
//! for the callback while it reads `/log` into the attempt's live output and
//! probes the executor with `/beat`. An executor that stops answering is dead:
//! the attempt moves to another per the route (not a pinned broadcast shard). A
//! timeout or cancellation sends `/kill` and waits up to `grace` for the callback
//! (cooperative, like a sidecar's job). `handleCode` 200 succeeds; anything else
//! fails, retryable per the node's retry policy. `sharding_broadcast` sends one
//! shard to each live executor (`broadcastIndex`/`broadcastTotal`).

use std::collections::HashSet;
use std::time::Instant;

use async_trait::async_trait;
use madeira_core::{ExecutorDef, XxlDef, XxlRoute};
use madeira_engine::{AttemptResult, Executor, Job};
use serde_json::{Map, Value as Json, json};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::client::CallError;
use crate::protocol::{HandleCallbackParam, LogParam, SUCCESS, TriggerParam};
use crate::{Xxl, lock};

/// An attempt waiting for its callback.
pub(crate) struct Pending {
    pub app: String,
    pub run_id: String,
    pub node: String,
    pub attempt: u32,
    pub tx: oneshot::Sender<HandleCallbackParam>,
}

/// Registers `job`'s attempt under `lid` as waiting for its callback.
fn expect_callback(xxl: &Xxl, job: &Job, def: &XxlDef, lid: i64) -> oneshot::Receiver<HandleCallbackParam> {
    let (tx, rx) = oneshot::channel();
    let pending = Pending {
        app: def.app.clone(),
        run_id: job.run_id.clone(),
        node: job.node.clone(),
        attempt: job.attempt,
        tx,
    };
    lock(&xxl.inner.pending).insert(lid, pending);
    rx
}

/// The callback of `lid` with `app`'s token kept in the store (received by
/// another replica, or by this one before a restart), if any.
async fn kept_callback(xxl: &Xxl, app: &str, lid: i64) -> Option<HandleCallbackParam> {
    let rows = match xxl.inner.store.xxl_callbacks(&[lid]).await {
        Ok(rows) => rows,
        Err(e) => {
            warn!(log_id = lid, error = %e, "kept XXL-JOB callbacks not read; asking again");
            return None;
        }
    };
    let row = rows.into_iter().find(|r| r.app == app)?;
    forget(xxl, lid);
    xxl.inner.metrics.callback(app, "accepted");
    info!(log_id = lid, code = row.code, "XXL-JOB callback read from the store");
    Some(HandleCallbackParam {
        log_id: lid,
        log_date_tim: None,
        handle_code: Some(i32::try_from(row.code).unwrap_or(crate::protocol::FAIL)),
        handle_msg: row.msg,
        execute_result: None,
    })
}

/// The callback of `lid` within `within`: handed over here, or kept in the store
/// by another replica (asked every `callback_poll`).
async fn callback_within(
    xxl: &Xxl,
    app: &str,
    lid: i64,
    rx: &mut oneshot::Receiver<HandleCallbackParam>,
    within: std::time::Duration,
    cancel: &CancellationToken,
) -> Option<HandleCallbackParam> {
    let end = tokio::time::Instant::now() + within;
    let mut poll = tokio::time::interval(xxl.inner.options.callback_poll);
    loop {
        tokio::select! {
            cb = &mut *rx => return cb.ok(),
            () = tokio::time::sleep_until(end) => return None,
            () = cancel.cancelled() => return None,
            _ = poll.tick() => if let Some(cb) = kept_callback(xxl, app, lid).await {
                return Some(cb);
            },
        }
    }
}

/// XXL-JOB's `jobId` (a Java `int`) for a node of a flow: stable, positive.
pub fn job_id(flow: &str, node: &str) -> i32 {
    let d = Sha256::digest(format!("{flow}\n{node}").as_bytes());
    let v = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) & 0x7fff_ffff;
    i32::try_from(v.max(1)).unwrap_or(1)
}

/// The `logId` of a placement of a shard of an attempt: stable, positive, below 2^53.
pub fn log_id(run_id: &str, node: &str, attempt: u32, shard: u32, placement: u32) -> i64 {
    let d = Sha256::digest(format!("{run_id}\n{node}\n{attempt}\n{shard}\n{placement}").as_bytes());
    let v = u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]) & ((1 << 53) - 1);
    i64::try_from(v.max(1)).unwrap_or(1)
}

pub(crate) struct XxlExecutor {
    xxl: Xxl,
}

impl XxlExecutor {
    pub fn new(xxl: Xxl) -> Self {
        Self { xxl }
    }
}

/// How one shard ended.
struct ShardEnd {
    /// The executor's log of the shard (every placement), as read from `/log`.
    log: String,
    address: Option<String>,
    log_id: Option<i64>,
    result: Result<Option<String>, (String, bool)>,
}

/// How following a placed trigger ended.
enum Followed {
    Callback(HandleCallbackParam),
    /// The executor stopped answering `/beat`.
    Dead(String),
    /// Killed (timeout or cancellation); the callback if it came within `grace`.
    Killed {
        timed_out: bool,
        callback: Option<HandleCallbackParam>,
        kill: Result<(), CallError>,
    },
}

#[async_trait]
impl Executor for XxlExecutor {
    async fn execute(&self, job: Job, cancel: CancellationToken) -> AttemptResult {
        let ExecutorDef::Xxl(def) = &job.executor else {
            return AttemptResult::failure("not an xxl node", false);
        };
        if self.xxl.token_of(&def.app).is_none() {
            return AttemptResult::failure(
                format!(
                    "xxl app `{}` is not in the server config's `xxl_job.apps`; add it with its token",
                    def.app
                ),
                false,
            );
        }
        let live = self.xxl.live(&def.app);
        if live.is_empty() {
            return AttemptResult::failure(no_executor(&def.app), true);
        }
        let deadline = Instant::now() + job.timeout;
        let ends: Vec<ShardEnd> = if def.route == XxlRoute::ShardingBroadcast {
            let total = u32::try_from(live.len()).unwrap_or(u32::MAX);
            let shards = live.iter().enumerate().map(|(i, address)| {
                let shard = u32::try_from(i).unwrap_or(u32::MAX);
                Shard { index: shard, total, pin: Some(address.clone()) }
            });
            let runs = shards.map(|s| run_shard(&self.xxl, &job, def, s, deadline, cancel.clone()));
            futures::future::join_all(runs).await.into_iter().map(|(end, _)| end).collect()
        } else {
            let shard = Shard { index: 0, total: 1, pin: None };
            vec![run_shard(&self.xxl, &job, def, shard, deadline, cancel).await.0]
        };
        finish(&job, def, ends)
    }

    fn waiting_reason(&self, def: &ExecutorDef) -> Option<String> {
        let ExecutorDef::Xxl(def) = def else { return None };
        self.xxl.live(&def.app).is_empty().then(|| no_executor(&def.app))
    }
}

fn no_executor(app: &str) -> String {
    format!("no live XXL-JOB executor of app `{app}` is registered (point its xxl.job.admin.addresses here)")
}

struct Shard {
    index: u32,
    total: u32,
    pin: Option<String>,
}

/// The attempt's result from its shards' ends.
fn finish(job: &Job, def: &XxlDef, ends: Vec<ShardEnd>) -> AttemptResult {
    let sharded = def.route == XxlRoute::ShardingBroadcast;
    let log: String = ends
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let head = if sharded { format!("--- shard {i}/{} ---\n", ends.len()) } else { String::new() };
            let tail = match (&e.address, &e.result) {
                (Some(a), Ok(_)) => format!("[madeira] {a} logId {} succeeded\n", e.log_id.unwrap_or(0)),
                (a, Err((why, _))) => format!("[madeira] {} failed: {why}\n", a.as_deref().unwrap_or("-")),
                (None, Ok(_)) => String::new(),
            };
            format!("{head}{}{tail}", e.log)
        })
        .collect();
    let failures: Vec<(usize, &String, bool)> = ends
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e.result.as_ref().err().map(|(why, retry)| (i, why, *retry)))
        .collect();
    if failures.is_empty() {
        let one = |e: &ShardEnd| {
            let mut m = Map::new();
            m.insert("executor".into(), json!(e.address));
            m.insert("log_id".into(), json!(e.log_id));
            m.insert("handle_msg".into(), json!(e.result.as_ref().ok().cloned().flatten()));
            m
        };
        let outputs = if sharded {
            Map::from_iter([(
                "shards".to_string(),
                Json::Array(ends.iter().map(|e| Json::Object(one(e))).collect()),
            )])
        } else {
            ends.first().map(one).unwrap_or_default()
        };
        info!(run_id = %job.run_id, node = %job.node, attempt = job.attempt, "xxl attempt succeeded");
        return AttemptResult::Success { outputs, log };
    }
    let retryable = failures.iter().all(|f| f.2);
    let error = if sharded {
        let parts: Vec<String> = failures.iter().map(|(i, why, _)| format!("shard {i}: {why}")).collect();
        format!("{} of {} shards failed: {}", failures.len(), ends.len(), parts.join("; "))
    } else {
        failures[0].1.clone()
    };
    AttemptResult::Failure { error, retryable, log }
}

/// Runs one shard: placed, moved when its executor dies (unless pinned), followed to its end.
/// Returns the end and how many placements it took.
async fn run_shard(
    xxl: &Xxl,
    job: &Job,
    def: &XxlDef,
    shard: Shard,
    deadline: Instant,
    cancel: CancellationToken,
) -> (ShardEnd, u32) {
    let jid = job_id(&job.flow, &job.node);
    let mut tried: HashSet<String> = HashSet::new();
    let mut placement = 0u32;
    let mut last_error = String::new();
    let mut log = String::new();
    if job.resumed {
        // The attempt was RUNNING when this control plane stopped: its executor may
        // still finish it (xxl-job-core retries failed callbacks from its spool).
        // Wait up to `grace` for the callback of its first placement before placing it anew.
        let lid = log_id(&job.run_id, &job.node, job.attempt, shard.index, 0);
        if let Some(cb) = claim(xxl, job, def, lid, &cancel).await {
            let result = match cb.code() {
                SUCCESS => Ok(cb.message().map(str::to_string)),
                code => Err((
                    format!("executor reported handleCode {code}: {}", cb.message().unwrap_or("")),
                    true,
                )),
            };
            return (ShardEnd { log, address: None, log_id: Some(lid), result }, 1);
        }
        placement = 1;
    }
    loop {
        let address = match &shard.pin {
            Some(a) if tried.contains(a) => {
                let end =
                    ShardEnd { log, address: Some(a.clone()), log_id: None, result: Err((last_error, true)) };
                return (end, placement);
            }
            Some(a) => a.clone(),
            None => match pick(xxl, def, jid, &tried).await {
                Ok(a) => a,
                Err(why) => {
                    let why = if last_error.is_empty() { why } else { format!("{last_error}; {why}") };
                    return (
                        ShardEnd { log, address: None, log_id: None, result: Err((why, true)) },
                        placement,
                    );
                }
            },
        };
        tried.insert(address.clone());
        let lid = log_id(&job.run_id, &job.node, job.attempt, shard.index, placement);
        placement += 1;
        let rx = expect_callback(xxl, job, def, lid);
        let trigger = trigger(job, def, jid, lid, &shard);
        lock(&xxl.inner.routes).picked(jid, &address);
        info!(run_id = %job.run_id, node = %job.node, attempt = job.attempt, app = %def.app, %address, log_id = lid, shard = shard.index, "xxl trigger sent");
        match xxl.run(&def.app, &address, &trigger).await {
            Ok(()) => {}
            Err(e) => {
                forget(xxl, lid);
                last_error = format!("{address} /run {e}");
                warn!(run_id = %job.run_id, node = %job.node, %address, error = %e, "xxl trigger not accepted");
                if matches!(e, CallError::Unreachable(_)) {
                    continue;
                }
                let end = ShardEnd {
                    log,
                    address: Some(address),
                    log_id: Some(lid),
                    result: Err((last_error, true)),
                };
                return (end, placement);
            }
        }
        let mut reader = LogReader { from_line: 1, date: madeira_engine::now_ms(), text: String::new() };
        let followed = follow(xxl, job, def, &address, lid, jid, rx, deadline, &cancel, &mut reader).await;
        log.push_str(&reader.text);
        let result = match followed {
            Followed::Callback(cb) if cb.code() == SUCCESS => Ok(cb.message().map(str::to_string)),
            Followed::Callback(cb) => Err((
                format!(
                    "executor {address} reported handleCode {}: {}",
                    cb.code(),
                    cb.message().unwrap_or("")
                ),
                true,
            )),
            Followed::Dead(why) => {
                forget(xxl, lid);
                warn!(run_id = %job.run_id, node = %job.node, %address, "xxl executor dead; moving the attempt");
                append_live(
                    xxl,
                    job,
                    &format!("[madeira] executor {address} is dead ({why}); moving the attempt\n"),
                );
                last_error = format!("executor {address} died: {why}");
                continue;
            }
            Followed::Killed { timed_out, callback, kill } => {
                forget(xxl, lid);
                let what =
                    if timed_out { format!("timed out after {:?}", job.timeout) } else { "cancelled".into() };
                let kill = match kill {
                    Ok(()) => "killed".to_string(),
                    Err(e) => format!("/kill failed: {e}"),
                };
                let after = match callback {
                    Some(cb) => {
                        format!("executor reported handleCode {}: {}", cb.code(), cb.message().unwrap_or(""))
                    }
                    None => format!("no callback within grace {:?}", def.grace),
                };
                Err((format!("{what}; {kill}; {after}"), timed_out))
            }
        };
        return (ShardEnd { log, address: Some(address), log_id: Some(lid), result }, placement);
    }
}

/// Waits up to the node's `grace` for a callback of `lid` (a resumed attempt's).
async fn claim(
    xxl: &Xxl,
    job: &Job,
    def: &XxlDef,
    lid: i64,
    cancel: &CancellationToken,
) -> Option<HandleCallbackParam> {
    let mut rx = expect_callback(xxl, job, def, lid);
    info!(run_id = %job.run_id, node = %job.node, attempt = job.attempt, log_id = lid, "resumed xxl attempt: waiting for its callback before placing it anew");
    let got = callback_within(xxl, &def.app, lid, &mut rx, def.grace, cancel).await;
    if got.is_none() {
        forget(xxl, lid);
    }
    got
}

fn forget(xxl: &Xxl, lid: i64) {
    lock(&xxl.inner.pending).remove(&lid);
    xxl.remember_decided(lid);
}

/// The first live executor (not yet tried) on the node's route; probing routes
/// ask each in turn.
async fn pick(xxl: &Xxl, def: &XxlDef, jid: i32, tried: &HashSet<String>) -> Result<String, String> {
    let live: Vec<String> = xxl.live(&def.app).into_iter().filter(|a| !tried.contains(a)).collect();
    if live.is_empty() {
        return Err(no_executor(&def.app));
    }
    let order = lock(&xxl.inner.routes).order(def.route, jid, &live);
    let mut refusals = Vec::new();
    for address in order {
        let probe = match def.route {
            XxlRoute::Failover => xxl.beat(&def.app, &address).await,
            XxlRoute::Busyover => xxl.idle_beat(&def.app, &address, jid).await,
            _ => return Ok(address),
        };
        match probe {
            Ok(()) => return Ok(address),
            Err(e) => refusals.push(format!("{address}: {e}")),
        }
    }
    Err(format!(
        "no executor of app `{}` passed the {} probe: {}",
        def.app,
        def.route.name(),
        refusals.join("; ")
    ))
}

fn trigger(job: &Job, def: &XxlDef, jid: i32, lid: i64, shard: &Shard) -> TriggerParam {
    TriggerParam {
        job_id: jid,
        executor_handler: def.handler.clone(),
        executor_params: params(&def.params, job),
        executor_block_strategy: def.block.wire().to_string(),
        executor_timeout: def.timeout.map_or(0, |t| i64::try_from(t.as_secs().max(1)).unwrap_or(i64::MAX)),
        log_id: lid,
        log_date_time: madeira_engine::now_ms(),
        glue_type: "BEAN".to_string(),
        glue_source: String::new(),
        glue_updatetime: 0,
        broadcast_index: i32::try_from(shard.index).unwrap_or(i32::MAX),
        broadcast_total: i32::try_from(shard.total).unwrap_or(i32::MAX),
    }
}

/// `executorParams` from the node's template: `${run_id}`, `${flow}`, `${node}`,
/// `${attempt}`, `${biz_date}` (the run's business date, empty without one),
/// `${traceparent}`, `${params.NAME}` (strings as is, others as JSON).
pub(crate) fn params(template: &str, job: &Job) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let name = &after[..end];
        let value = match name {
            "run_id" => Some(job.run_id.clone()),
            "flow" => Some(job.flow.clone()),
            "node" => Some(job.node.clone()),
            "attempt" => Some(job.attempt.to_string()),
            "traceparent" => Some(job.traceparent.clone().unwrap_or_default()),
            "biz_date" => {
                Some(job.input.get("biz_date").and_then(Json::as_str).unwrap_or_default().to_string())
            }
            _ => {
                name.strip_prefix("params.").and_then(|p| job.input.get("params")?.get(p)).map(|v| match v {
                    Json::String(s) => s.clone(),
                    other => other.to_string(),
                })
            }
        };
        match value {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[start..start + 2 + end + 1]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

fn append_live(xxl: &Xxl, job: &Job, text: &str) {
    if let Some(engine) = xxl.inner.engine.get() {
        engine.live_logs().append(&(job.run_id.clone(), job.node.clone(), job.attempt), text.as_bytes());
    }
}

/// Reads new lines of the executor's log for `lid` into the live output.
struct LogReader {
    from_line: i32,
    date: i64,
    /// What was read, the last `KEPT_LOG` bytes (the attempt's stored log).
    text: String,
}

/// Bytes of an executor's log kept in the attempt's stored log.
const KEPT_LOG: usize = 64 * 1024;

impl LogReader {
    async fn read(&mut self, xxl: &Xxl, job: &Job, app: &str, address: &str, lid: i64) {
        let p = LogParam { log_date_tim: self.date, log_id: lid, from_line_num: self.from_line };
        if let Ok(r) = xxl.log(app, address, &p).await
            && let Some(text) = r.log_content.filter(|t| !t.is_empty() && r.to_line_num >= self.from_line)
        {
            append_live(xxl, job, &text);
            self.from_line = r.to_line_num + 1;
            self.text.push_str(&text);
            if self.text.len() > KEPT_LOG {
                let mut cut = self.text.len() - KEPT_LOG;
                while !self.text.is_char_boundary(cut) {
                    cut += 1;
                }
                self.text.drain(..cut);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn follow(
    xxl: &Xxl,
    job: &Job,
    def: &XxlDef,
    address: &str,
    lid: i64,
    jid: i32,
    mut rx: oneshot::Receiver<HandleCallbackParam>,
    deadline: Instant,
    cancel: &CancellationToken,
    reader: &mut LogReader,
) -> Followed {
    let opts = &xxl.inner.options;
    let mut beat = tokio::time::interval(opts.beat_every);
    let mut logs = tokio::time::interval(opts.log_every);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    logs.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failed_beats = 0u32;
    let mut poll =
        tokio::time::interval_at(tokio::time::Instant::now() + opts.callback_poll, opts.callback_poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let timed_out = loop {
        tokio::select! {
            cb = &mut rx => {
                reader.read(xxl, job, &def.app, address, lid).await;
                return match cb {
                    Ok(cb) => Followed::Callback(cb),
                    Err(_) => Followed::Dead("its pending attempt was dropped".into()),
                };
            }
            () = cancel.cancelled() => break false,
            () = tokio::time::sleep_until(deadline.into()) => break true,
            _ = beat.tick() => match xxl.beat(&def.app, address).await {
                Ok(()) => failed_beats = 0,
                Err(e) => {
                    failed_beats += 1;
                    if failed_beats >= opts.beat_failures {
                        lock(&xxl.inner.registry).remove(&def.app, address);
                        return Followed::Dead(format!("{failed_beats} /beat calls failed, last: {e}"));
                    }
                }
            },
            _ = logs.tick() => reader.read(xxl, job, &def.app, address, lid).await,
            _ = poll.tick() => if let Some(cb) = kept_callback(xxl, &def.app, lid).await {
                reader.read(xxl, job, &def.app, address, lid).await;
                return Followed::Callback(cb);
            },
        }
    };
    let kill = xxl.kill(&def.app, address, jid).await;
    info!(run_id = %job.run_id, node = %job.node, %address, log_id = lid, timed_out, ok = kill.is_ok(), "xxl /kill sent");
    let callback = callback_within(xxl, &def.app, lid, &mut rx, def.grace, &CancellationToken::new()).await;
    reader.read(xxl, job, &def.app, address, lid).await;
    Followed::Killed { timed_out, callback, kill }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_positive_and_distinct() {
        assert_eq!(job_id("f", "n"), job_id("f", "n"));
        assert!(job_id("f", "n") > 0);
        assert_ne!(job_id("f", "n"), job_id("f", "m"));
        let a = log_id("r", "n", 1, 0, 0);
        assert_eq!(a, log_id("r", "n", 1, 0, 0), "a restart maps the callback to the same attempt");
        assert!(a > 0 && a < (1 << 53));
        assert_ne!(a, log_id("r", "n", 2, 0, 0));
        assert_ne!(a, log_id("r", "n", 1, 0, 1), "a moved attempt gets a new logId");
    }

    #[test]
    fn params_template_fills_known_names_only() {
        let job = Job {
            run_id: "r1".into(),
            flow: "f".into(),
            node: "n".into(),
            attempt: 2,
            idempotency_key: "k".into(),
            executor: ExecutorDef::Builtin(madeira_core::model::BuiltinDef {
                kind: madeira_core::model::BuiltinKind::Noop,
                outputs: Map::new(),
            }),
            no_retry_exit_codes: vec![],
            input: json!({"params": {"day": "2026-12-05", "n": 3}, "biz_date": "2026-12-04"}),
            timeout: std::time::Duration::from_secs(1),
            traceparent: None,
            resumed: false,
        };
        assert_eq!(
            params("day=${params.day} n=${params.n} run=${run_id}#${attempt} ${other} ${", &job),
            "day=2026-12-05 n=3 run=r1#2 ${other} ${"
        );
        assert_eq!(params("bizDate=${biz_date}", &job), "bizDate=2026-12-04");
        assert_eq!(params("plain", &job), "plain");
    }

    /// A node of app `orders` and its first attempt of run `run_id`, resumed after a restart.
    fn resumed_attempt(run_id: &str) -> (XxlDef, Job) {
        let def = XxlDef {
            app: "orders".into(),
            handler: "h".into(),
            params: String::new(),
            route: XxlRoute::First,
            block: madeira_core::XxlBlock::Serial,
            timeout: None,
            grace: std::time::Duration::from_secs(10),
        };
        let job = Job {
            run_id: run_id.into(),
            flow: "f".into(),
            node: "n".into(),
            attempt: 1,
            idempotency_key: "k".into(),
            executor: ExecutorDef::Xxl(def.clone()),
            no_retry_exit_codes: vec![],
            input: json!({}),
            timeout: std::time::Duration::from_secs(60),
            traceparent: None,
            resumed: true,
        };
        (def, job)
    }

    #[tokio::test]
    async fn a_resumed_attempt_takes_its_callback_before_placing_anew() {
        let apps = vec![crate::AppToken { app: "orders".into(), token: "orders-token-0123456".into() }];
        let (xxl, _dir) = crate::testing::xxl(crate::XxlOptions::new(None, apps)).await;
        let (def, job) = resumed_attempt("r");
        let shard = Shard { index: 0, total: 1, pin: None };
        let deadline = Instant::now() + job.timeout;
        let run = run_shard(&xxl, &job, &def, shard, deadline, CancellationToken::new());
        let lid = log_id("r", "n", 1, 0, 0);
        let deliver = async {
            while !lock(&xxl.inner.pending).contains_key(&lid) {
                tokio::task::yield_now().await;
            }
            let cb = HandleCallbackParam {
                log_id: lid,
                log_date_tim: None,
                handle_code: Some(200),
                handle_msg: Some("done before the restart".into()),
                execute_result: None,
            };
            xxl.deliver("orders", cb);
        };
        let ((end, placements), ()) = tokio::join!(run, deliver);
        assert_eq!(end.result, Ok(Some("done before the restart".to_string())));
        assert_eq!((end.log_id, placements), (Some(lid), 1), "not placed again");
    }

    #[tokio::test]
    async fn a_callback_another_replica_kept_ends_the_attempt_here() {
        let apps = vec![crate::AppToken { app: "orders".into(), token: "orders-token-0123456".into() }];
        let mut options = crate::XxlOptions::new(None, apps);
        options.callback_poll = std::time::Duration::from_millis(20);
        let (xxl, _dir) = crate::testing::xxl(options).await;
        let (def, job) = resumed_attempt("r2");
        let lid = log_id("r2", "n", 1, 0, 0);
        let kept = |app: &str, code: i64| madeira_store::XxlCallbackRow {
            log_id: lid,
            app: app.into(),
            code,
            msg: Some(format!("{app} says {code}")),
            at_ms: 1,
        };
        // Another app's forged callback is beside the real one and is not taken.
        xxl.inner.store.xxl_put_callback(&kept("intruder", 200)).await.unwrap();
        xxl.inner.store.xxl_put_callback(&kept("orders", 500)).await.unwrap();
        let shard = Shard { index: 0, total: 1, pin: None };
        let deadline = Instant::now() + job.timeout;
        let (end, placements) = run_shard(&xxl, &job, &def, shard, deadline, CancellationToken::new()).await;
        assert_eq!(placements, 1, "not placed again");
        let (why, retryable) = end.result.expect_err("the kept callback said 500");
        assert!(why.contains("handleCode 500") && why.contains("orders says 500"), "{why}");
        assert!(retryable);
        assert!(!lock(&xxl.inner.pending).contains_key(&lid), "no longer waited for");
    }
}
