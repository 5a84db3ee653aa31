//! The sidecar's end of the link: connect, authenticate with the group token, say
//! hello (declared jobs, attempts still running), deliver the spool, then `Ready`;
//! heartbeat and take assignments, cancels and acks until the stream ends; then
//! reconnect with jittered exponential backoff.

use std::sync::Arc;
use std::time::{Duration, Instant};

use madeira_proto::v1::link_client::LinkClient;
use madeira_proto::v1::{Heartbeat, Hello, JobDecl, Ready};
use madeira_proto::{ControlMsg, SidecarMessage, SidecarMsg};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::worker::Shared;

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// `http://host:port` (or `https://` with `tls`) of the control plane's gRPC endpoint.
    pub endpoint: String,
    /// The group's token; `None` when the control plane needs none (dev).
    pub token: Option<String>,
    /// TLS (and mTLS) for an `https://` endpoint.
    pub tls: Option<crate::LinkTls>,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl Default for LinkOptions {
    fn default() -> Self {
        Self {
            endpoint: "http://127.0.0.1:7071".into(),
            token: None,
            tls: None,
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(10),
        }
    }
}

/// Why one connection ended.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("bad endpoint `{0}`: {1}")]
    Endpoint(String, String),
    #[error("cannot connect: {}", chain(.0))]
    Connect(#[from] tonic::transport::Error),
    #[error("control plane answered: {0}")]
    Status(#[from] tonic::Status),
    #[error("refused by the control plane: {0}")]
    Rejected(String),
    #[error("the token contains characters not allowed in a header")]
    BadToken,
    #[error("the stream ended")]
    Closed,
}

/// Runs the link until `cancel`, reconnecting as needed. `connected` is true while
/// a connection is up and its spool delivered.
pub(crate) async fn run(
    shared: Arc<Shared>,
    options: LinkOptions,
    connected: watch::Sender<bool>,
    cancel: CancellationToken,
) {
    let mut failures: u32 = 0;
    loop {
        let began = Instant::now();
        let result = tokio::select! {
            r = connect_once(&shared, &options, &connected) => r,
            _ = cancel.cancelled() => Err(LinkError::Closed),
        };
        shared.outbox.send_replace(None);
        connected.send_replace(false);
        if cancel.is_cancelled() {
            break;
        }
        match &result {
            Err(LinkError::Rejected(reason)) => warn!(reason = %reason, "control plane refused this sidecar"),
            // The first failure in a row is worth a warning (a TLS or address
            // problem shows here); the retries that follow are not.
            Err(e) if failures == 0 => warn!(error = %e, "link down; reconnecting with backoff"),
            Err(e) => debug!(error = %e, "link down"),
            Ok(()) => {}
        }
        if began.elapsed() > Duration::from_secs(10) {
            failures = 0;
        }
        let delay = backoff(&options, failures, rand::random::<f64>());
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = cancel.cancelled() => break,
        }
    }
}

/// `min * 2^n` capped at `max`, then scaled by a uniform factor in [0.5, 1).
pub fn backoff(options: &LinkOptions, failures: u32, unit: f64) -> Duration {
    let base = options.backoff_min.as_secs_f64() * 2f64.powi(failures.min(30) as i32);
    let capped = base.min(options.backoff_max.as_secs_f64());
    Duration::from_secs_f64(capped * (0.5 + unit.clamp(0.0, 1.0) / 2.0))
}

/// The endpoint to connect to, TLS included; fails on a bad URL or bad TLS
/// material (the sidecar checks this once at startup).
pub fn endpoint(options: &LinkOptions) -> Result<tonic::transport::Endpoint, LinkError> {
    let bad = |e: String| LinkError::Endpoint(options.endpoint.clone(), e);
    let endpoint = tonic::transport::Endpoint::from_shared(options.endpoint.clone())
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10));
    match &options.tls {
        Some(tls) => endpoint.tls_config(tls.client_config()).map_err(|e| bad(format!("TLS: {}", chain(&e)))),
        None => Ok(endpoint),
    }
}

/// An error with its sources, `a: b: c` (the transport's own text hides the cause).
fn chain(e: &dyn std::error::Error) -> String {
    madeira_core::text::error_chain(e)
}

async fn connect_once(
    shared: &Arc<Shared>,
    options: &LinkOptions,
    connected: &watch::Sender<bool>,
) -> Result<(), LinkError> {
    let channel = endpoint(options)?.connect().await?;
    let mut client = LinkClient::new(channel);
    let (tx, rx) = mpsc::channel::<SidecarMessage>(1024);
    let pending = shared.spool.pending();
    let (observe, observe_max_flows) = shared.exec.declared();
    let hello = Hello {
        name: shared.identity.name.clone(),
        group: shared.identity.group.clone(),
        version: shared.identity.version.clone(),
        jobs: shared
            .jobs
            .values()
            .map(|j| JobDecl { name: j.name.clone(), max_concurrency: j.max_concurrency })
            .collect(),
        running: shared.running_list(),
        spooled: u32::try_from(pending.len()).unwrap_or(u32::MAX),
        instance: shared.instance.clone(),
        observe,
        observe_max_flows,
    };
    let _ = tx.send(SidecarMessage { msg: Some(SidecarMsg::Hello(hello)) }).await;
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    if let Some(token) = &options.token {
        let value = format!("Bearer {token}").parse().map_err(|_| LinkError::BadToken)?;
        request.metadata_mut().insert("authorization", value);
    }
    let mut inbound = client.attach(request).await?.into_inner();
    let heartbeat = match inbound.message().await? {
        Some(m) => match m.msg {
            Some(ControlMsg::Welcome(w)) => Duration::from_millis(w.heartbeat_ms.max(100)),
            Some(ControlMsg::Reject(r)) => return Err(LinkError::Rejected(r.reason)),
            _ => return Err(LinkError::Rejected("expected a welcome".into())),
        },
        None => return Err(LinkError::Closed),
    };
    shared.outbox.send_replace(Some(tx.clone()));
    // Read the spool again now that the outbox is set: a report spooled while the
    // connection was being made went nowhere else. Reports are idempotent on the
    // control plane, so one sent both ways is recorded once.
    let pending = shared.spool.pending();
    for (_, msg) in &pending {
        let _ = tx.send(msg.clone()).await;
    }
    let _ = tx.send(SidecarMessage { msg: Some(SidecarMsg::Ready(Ready {})) }).await;
    info!(endpoint = %options.endpoint, spooled = pending.len(), "connected to the control plane");
    connected.send_replace(true);
    // Aborted however this future ends (also when it is dropped on shutdown), so no
    // sender of the request stream outlives the connection.
    let _beat = AbortOnDrop(tokio::spawn(heartbeats(shared.clone(), tx.clone(), heartbeat)));
    drop(tx);
    serve(shared, &mut inbound).await
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn heartbeats(shared: Arc<Shared>, tx: mpsc::Sender<SidecarMessage>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let beat = Heartbeat { running: shared.running_count() };
        if tx.send(SidecarMessage { msg: Some(SidecarMsg::Heartbeat(beat)) }).await.is_err() {
            return;
        }
    }
}

async fn serve(
    shared: &Arc<Shared>,
    inbound: &mut tonic::Streaming<madeira_proto::ControlMessage>,
) -> Result<(), LinkError> {
    while let Some(msg) = inbound.message().await? {
        match msg.msg {
            Some(ControlMsg::Assign(a)) => shared.assign(a).await,
            Some(ControlMsg::Cancel(c)) => shared.cancel(&c.assignment_id, &c.reason),
            Some(ControlMsg::Ack(ack)) => {
                if !ack.refused.is_empty() {
                    shared.exec.refused_by_control_plane(&ack.report_id, &ack.refused);
                }
                shared.acked(&ack.report_id)
            }
            Some(ControlMsg::Reject(r)) => return Err(LinkError::Rejected(r.reason)),
            Some(ControlMsg::Welcome(_)) | None => {}
        }
    }
    Err(LinkError::Closed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_jitters() {
        let o = LinkOptions {
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
            ..Default::default()
        };
        assert_eq!(backoff(&o, 0, 1.0), Duration::from_millis(100));
        assert_eq!(backoff(&o, 0, 0.0), Duration::from_millis(50));
        assert_eq!(backoff(&o, 3, 1.0), Duration::from_millis(800));
        assert_eq!(backoff(&o, 20, 1.0), Duration::from_secs(2));
    }
}
