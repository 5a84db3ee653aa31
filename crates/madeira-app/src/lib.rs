//! The Madeira control plane as a library: `ControlPlane` and its assembly
//! (telemetry, store, engine, API and console, alerts, sidecar link, message
//! sources, SQL datasources, XXL-JOB admin), the server config file, TLS for the
//! listeners, and the file reading they share. The `madeira` binary parses its
//! command line and runs what this builds; tests build the same app in-process.

pub mod app;
pub mod calendars;
pub mod config;
pub mod error;
pub mod files;
pub mod sidecars;
pub mod sources;
pub mod tls;
pub mod xxl;

pub use app::{ControlPlane, PlaneOptions};
pub use error::{Error, Result};
