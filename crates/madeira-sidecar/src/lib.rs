//! Madeira's sidecar: declares the jobs of its host, runs them as real processes
//! when the control plane assigns them over one long-lived gRPC stream, streams
//! their logs and results back, spools what cannot be delivered, and takes
//! `madeira exec` reports on a Unix socket.

pub mod config;
pub mod runner;
pub mod template;

pub use config::{ConfigError, JobSpec, SidecarConfig};
