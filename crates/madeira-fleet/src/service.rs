//! The gRPC `Link` service: authenticates a sidecar by its group's token, takes
//! its hello (refusing a second process with the name of a live sidecar, naming
//! the holder), then handles heartbeats, results, refusals and exec reports on the
//! stream until it ends. A result is taken only when it answers an attempt placed
//! on its sender (`provenance.rs`); so are refusals and live output. A result is acknowledged once the engine has committed
//! the end of its attempt (`acks.rs`; at once when it is refused as stale), a
//! refusal once taken and an exec report once recorded; a report id seen before
//! is ignored, and acknowledged again unless its commit is still awaited.

use std::time::{Duration, Instant};

use madeira_engine::ObservedReport;
use madeira_proto::v1::link_server::Link;
use madeira_proto::v1::{Ack, AttemptResult, ExecReport, Hello, Refused, Reject, Welcome};
use madeira_proto::{ControlMessage, ControlMsg, SidecarMessage, SidecarMsg};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, warn};

use crate::Fleet;
use crate::attach::register;
use crate::registry::{Event, Outbound};

pub(crate) struct LinkService {
    fleet: Fleet,
}

impl LinkService {
    pub fn new(fleet: Fleet) -> Self {
        Self { fleet }
    }

    /// The group the presented token belongs to; `Ok(None)` without auth.
    fn authenticate<T>(&self, request: &Request<T>) -> Result<Option<String>, Status> {
        let Some(tokens) = &self.fleet.inner.options.tokens else {
            return Ok(None);
        };
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| Status::unauthenticated("missing `authorization: Bearer <group token>`"))?;
        tokens
            .iter()
            .find(|t| constant_time_eq(t.token.as_bytes(), presented.trim().as_bytes()))
            .map(|t| Some(t.group.clone()))
            .ok_or_else(|| Status::unauthenticated("unknown sidecar token"))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[tonic::async_trait]
impl Link for LinkService {
    type AttachStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<ControlMessage, Status>> + Send>>;

    async fn attach(
        &self,
        request: Request<Streaming<SidecarMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let group = self.authenticate(&request)?;
        let peer = request.remote_addr();
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(connection(self.fleet.clone(), group, peer, inbound, tx));
        // Ends at shutdown even while attempts in flight still hold a sender.
        let shutdown = self.fleet.inner.shutdown.clone().cancelled_owned();
        let stream = futures::StreamExt::take_until(ReceiverStream::new(rx), shutdown);
        Ok(Response::new(Box::pin(stream)))
    }
}

fn msg(m: ControlMsg) -> Result<ControlMessage, Status> {
    Ok(ControlMessage { msg: Some(m) })
}

async fn connection(
    fleet: Fleet,
    group: Option<String>,
    peer: Option<std::net::SocketAddr>,
    mut inbound: Streaming<SidecarMessage>,
    tx: Outbound,
) {
    let hello = match tokio::time::timeout(Duration::from_secs(10), inbound.message()).await {
        Ok(Ok(Some(SidecarMessage { msg: Some(SidecarMsg::Hello(hello)) }))) => hello,
        _ => {
            let _ =
                tx.send(msg(ControlMsg::Reject(Reject { reason: "expected a hello first".into() }))).await;
            return;
        }
    };
    if let Some(group) = &group
        && *group != hello.group
    {
        let reason = format!("this token belongs to group `{group}`, not `{}`", hello.group);
        warn!(sidecar = %hello.name, "{reason}");
        let _ = tx.send(msg(ControlMsg::Reject(Reject { reason }))).await;
        return;
    }
    let name = hello.name.clone();
    let again = Hello { running: Vec::new(), ..hello.clone() };
    let (conn, stale) = match register(&fleet, hello, peer, tx.clone()) {
        Ok(registered) => registered,
        Err(reason) => {
            warn!(sidecar = %name, peer = ?peer, "{reason}");
            let _ = tx.send(msg(ControlMsg::Reject(Reject { reason }))).await;
            return;
        }
    };
    let welcome = Welcome {
        heartbeat_ms: u64::try_from(fleet.inner.options.heartbeat.as_millis()).unwrap_or(5000),
        lost_after_ms: u64::try_from(fleet.inner.options.lost_after.as_millis()).unwrap_or(30_000),
    };
    if tx.send(msg(ControlMsg::Welcome(welcome))).await.is_err() {
        return;
    }
    crate::fencing::kill_stale(&name, stale, &tx).await;
    fleet.notify();
    let shutdown = fleet.inner.shutdown.clone();
    loop {
        let next = tokio::select! {
            next = inbound.message() => next,
            _ = shutdown.cancelled() => break,
        };
        match next {
            Ok(Some(m)) => {
                match crate::fencing::touch(&fleet, &name, conn) {
                    crate::fencing::Presence::Known => {}
                    crate::fencing::Presence::Forgotten => {
                        crate::fencing::reattach(&fleet, &again, peer, conn, &tx).await;
                    }
                    crate::fencing::Presence::Replaced => {
                        info!(sidecar = %name, "another connection holds this name now; closing this one");
                        break;
                    }
                }
                handle(&fleet, &name, conn, m, &tx).await;
            }
            Ok(None) => break,
            Err(e) => {
                debug!(sidecar = %name, error = %e, "link stream error");
                break;
            }
        }
    }
    {
        let mut state = fleet.state();
        if let Some(s) = state.sidecars.get_mut(&name).filter(|s| s.conn == conn) {
            s.tx = None;
            s.ready = false;
        }
    }
    info!(sidecar = %name, "sidecar disconnected");
    fleet.notify();
}

async fn handle(fleet: &Fleet, name: &str, conn: u64, m: SidecarMessage, tx: &Outbound) {
    let report = matches!(m.msg, Some(SidecarMsg::Result(_) | SidecarMsg::Refused(_) | SidecarMsg::Exec(_)));
    if report && fleet.intake_closed() {
        // Shutting down: left unacknowledged in the sidecar's spool for the next start.
        return;
    }
    match m.msg {
        Some(SidecarMsg::Heartbeat(beat)) => {
            if let Some(s) = fleet.state().sidecars.get_mut(name).filter(|s| s.conn == conn) {
                s.reported_running = beat.running;
            }
        }
        Some(SidecarMsg::Ready(_)) => ready(fleet, name, conn),
        Some(SidecarMsg::Result(result)) => {
            let id = result.report_id.clone();
            let taken = match crate::provenance::check(fleet, name, &result).await {
                crate::provenance::Verdict::Take => take_result(fleet, name, result),
                crate::provenance::Verdict::Refused => true,
                crate::provenance::Verdict::Unsure => false,
            };
            if taken {
                let _ = tx.send(msg(ControlMsg::Ack(Ack { report_id: id, refused: String::new() }))).await;
            }
        }
        Some(SidecarMsg::Refused(refused)) => {
            let id = refused.report_id.clone();
            take_refusal(fleet, name, refused);
            let _ = tx.send(msg(ControlMsg::Ack(Ack { report_id: id, refused: String::new() }))).await;
        }
        Some(SidecarMsg::Exec(report)) => {
            let id = report.report_id.clone();
            let answer = match crate::observe::check(fleet, name, &report).await {
                Ok(()) => take_exec(fleet, name, report).await,
                Err(refused) => Some(refused),
            };
            if let Some(refused) = answer {
                let _ = tx.send(msg(ControlMsg::Ack(Ack { report_id: id, refused }))).await;
            }
        }
        Some(SidecarMsg::Log(chunk)) => live_output(fleet, name, chunk),
        Some(SidecarMsg::Started(_)) | Some(SidecarMsg::Hello(_)) | None => {}
    }
}

/// The spool is delivered: attempts the control plane placed here that the
/// sidecar neither runs nor reported are gone (it restarted); move them.
fn ready(fleet: &Fleet, name: &str, conn: u64) {
    {
        let mut state = fleet.state();
        let Some(s) = state.sidecars.get_mut(name).filter(|s| s.conn == conn) else {
            return;
        };
        s.ready = true;
        let running = s.hello_running.clone();
        let vanished: Vec<String> = state
            .pending
            .iter()
            .filter(|(id, p)| p.sidecar == name && !running.contains(*id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in vanished {
            if let Some(p) = state.pending.remove(&id) {
                warn!(sidecar = %name, assignment = %id, "sidecar came back without this attempt; moving it");
                let _ = p.events.send(Event::Lost { sidecar: name.to_string() });
            }
        }
    }
    fleet.notify();
}

/// Takes a result; true when it is to be acknowledged now (a repeat whose commit
/// is not awaited, a fenced one, or no engine to wait for), false when the ack
/// waits for the engine's commit.
fn take_result(fleet: &Fleet, name: &str, result: AttemptResult) -> bool {
    let mut state = fleet.state();
    if !state.first_time(&result.report_id) {
        debug!(report = %result.report_id, "result delivered again; already taken");
        return !state.awaits_commit(&result.report_id);
    }
    let key = (result.idempotency_key.clone(), result.shard_index);
    if let Some(moved) = state.moved.get_mut(name) {
        moved.remove(&result.assignment_id);
    }
    if state.is_stale(&key, result.epoch) {
        let group = match state.sidecars.get_mut(name) {
            Some(s) => {
                s.stale_refused += 1;
                s.group.clone()
            }
            None => String::new(),
        };
        fleet.inner.metrics.fenced(&group);
        warn!(
            sidecar = %name, run_id = %result.run_id, node = %result.node, assignment = %result.assignment_id,
            epoch = result.epoch, "result of an attempt that moved to another sidecar refused (fenced); not applied"
        );
        return true;
    }
    if state.orphans.get(&key).is_some_and(|o| o.assignment_id == result.assignment_id) {
        state.orphans.remove(&key);
    }
    let wait_for_commit = fleet.inner.engine.get().is_some();
    if wait_for_commit {
        let kept = crate::acks::Unacked {
            report_id: result.report_id.clone(),
            sidecar: name.to_string(),
            result: result.clone(),
            since: Instant::now(),
        };
        state.unacked.insert(key.clone(), kept);
    }
    match state.pending.remove(&result.assignment_id) {
        Some(p) => {
            let _ = p.events.send(Event::Result(Box::new(result)));
        }
        None => {
            info!(sidecar = %name, run_id = %result.run_id, node = %result.node, "result with nobody waiting kept for the next dispatch of its attempt");
            state.inbox.insert(key, (result, Instant::now()));
            // A resumed attempt may be waiting for exactly this.
            fleet.inner.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
    !wait_for_commit
}

/// A chunk of a running job's output: kept per attempt for `logs -f` and the console.
fn live_output(fleet: &Fleet, name: &str, chunk: madeira_proto::v1::LogChunk) {
    let Some(engine) = fleet.inner.engine.get() else {
        return;
    };
    let key = fleet
        .state()
        .pending
        .get(&chunk.assignment_id)
        .filter(|p| p.sidecar == name)
        .map(|p| p.attempt.clone());
    if let Some(key) = key {
        engine.live_logs().append(&key, &chunk.data);
    }
}

fn take_refusal(fleet: &Fleet, name: &str, refused: Refused) {
    let mut state = fleet.state();
    if !state.first_time(&refused.report_id) {
        return;
    }
    // Only the sidecar an assignment went to may give it back.
    if state.pending.get(&refused.assignment_id).is_some_and(|p| p.sidecar != name) {
        warn!(sidecar = %name, assignment = %refused.assignment_id, "refusal of an assignment not placed on this sidecar ignored");
        return;
    }
    warn!(sidecar = %name, job = %refused.job, run_id = %refused.run_id, node = %refused.node, reason = %refused.reason, "sidecar refused an assignment");
    if let Some(p) = state.pending.remove(&refused.assignment_id) {
        let _ = p.events.send(Event::Refused { sidecar: name.to_string(), reason: refused.reason });
    }
}

/// Records an exec report through the engine: `Some("")` once it is durable,
/// `Some(why)` when it can never be recorded (acknowledged as refused, so it is
/// not redelivered forever), `None` to leave it unacknowledged (delivered again).
async fn take_exec(fleet: &Fleet, name: &str, report: ExecReport) -> Option<String> {
    let engine = fleet.inner.engine.get().cloned()?;
    let group = fleet.state().sidecars.get(name).map(|s| s.group.clone()).unwrap_or_default();
    let observed = ObservedReport {
        exec_id: report.exec_id,
        flow: report.flow,
        job: report.job,
        group,
        // Who reported it, as authenticated, never the host it claims.
        host: name.to_string(),
        finished: report.finished,
        started_at_ms: report.started_at_ms,
        finished_at_ms: report.finished_at_ms,
        exit_code: report.exit_code,
        signal: report.signal,
        log_tail: String::from_utf8_lossy(&report.log_tail).into_owned(),
    };
    match engine.observe_exec(observed).await {
        Ok(run_id) => {
            debug!(sidecar = %name, run_id = %run_id, "exec report recorded");
            Some(String::new())
        }
        Err(e) => {
            warn!(sidecar = %name, error = %e, "exec report not recorded; dropped");
            match e {
                madeira_engine::EngineError::ShuttingDown | madeira_engine::EngineError::Store(_) => None,
                e => Some(e.to_string()),
            }
        }
    }
}
