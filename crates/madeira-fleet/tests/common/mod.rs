//! Helpers shared by the fleet's tests that speak the link protocol themselves:
//! wrapping a sidecar message, and reading the next control message in time.

use std::time::Duration;

use madeira_proto::{ControlMessage, ControlMsg, SidecarMessage, SidecarMsg};

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
