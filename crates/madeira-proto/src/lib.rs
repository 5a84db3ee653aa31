//! The sidecar link protocol (`proto/sidecar.proto`): one long-lived bidirectional
//! gRPC stream per sidecar carrying hello, heartbeats, assignments, cancels, log
//! chunks, results and exec reports. Code is generated at build time by protox and
//! tonic-prost-build; no system `protoc` is needed.

#![allow(clippy::all, missing_docs)]

/// Generated messages and the `Link` client and server.
pub mod v1 {
    tonic::include_proto!("madeira.sidecar.v1");
}

pub use v1::{
    ControlMessage, SidecarMessage, control_message::Msg as ControlMsg, sidecar_message::Msg as SidecarMsg,
};

/// The protocol version a sidecar announces in its hello.
pub const PROTOCOL_VERSION: &str = "v1";
