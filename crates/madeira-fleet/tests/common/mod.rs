//! Helpers shared by the fleet's tests that speak the link protocol themselves:
//! a control plane (engine and fleet over a SQLite store, the link on loopback),
//! wrapping a sidecar message, and reading the next control message in time.

// Each test binary uses part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use madeira_engine::{EngineHandle, Executors};
use madeira_fleet::{Fleet, FleetOptions};
use madeira_proto::{ControlMessage, ControlMsg, SidecarMessage, SidecarMsg};
use madeira_store::sqlite::SqliteStore;
use tokio_util::sync::CancellationToken;

/// An engine with `options`' fleet as its sidecar executor, running on `store`,
/// the link served on a loopback port.
pub struct Plane {
    pub fleet: Fleet,
    pub handle: EngineHandle,
    /// `http://127.0.0.1:PORT` of the link.
    pub endpoint: String,
    pub cancel: CancellationToken,
    /// The fleet's metrics.
    pub registry: prometheus_client::registry::Registry,
}

pub async fn plane(store: Arc<SqliteStore>, options: FleetOptions) -> Plane {
    let mut registry = prometheus_client::registry::Registry::default();
    let fleet = Fleet::new(options, &mut registry);
    let mut executors = Executors::new(Default::default());
    executors.sidecar = Some(fleet.executor());
    let (engine, handle) = madeira_engine::build(store.clone(), executors, Vec::new(), Default::default());
    fleet.attach_engine(handle.clone(), store);
    let cancel = CancellationToken::new();
    tokio::spawn(engine.run(cancel.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(fleet.clone().serve(listener, cancel.clone()));
    Plane { fleet, handle, endpoint, cancel, registry }
}

pub fn send(m: SidecarMsg) -> SidecarMessage {
    SidecarMessage { msg: Some(m) }
}

/// The next control message, within `within`.
pub async fn next(inbound: &mut tonic::Streaming<ControlMessage>, within: Duration) -> ControlMsg {
    let m = tokio::time::timeout(within, inbound.message())
        .await
        .expect("a control message in time")
        .expect("stream")
        .expect("open");
    m.msg.expect("a message")
}
