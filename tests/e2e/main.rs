//! End-to-end tests: each starts the real `madeira` binary (`madeira dev` on a fresh
//! data directory) and drives it over HTTP and the CLI.

mod alerts;
mod api;
mod auth;
mod cli;
mod cli_files;
mod cluster;
mod cluster_alerts;
mod cluster_sidecars;
mod console;
mod crontab;
mod exec;
mod faults;
mod fleet_fencing;
mod fleet_identity;
mod fleet_routing;
mod fleet_security;
mod fleet_shutdown;
mod forwarding;
mod governance;
mod hostile;
mod nodelay;
mod observability;
mod otlp;
mod permits;
mod pki;
mod prometheus;
mod recovery;
mod replicas;
mod semantics;
mod sidecar;
mod sql;
mod support;
mod tls;
mod triggers;
mod webhook;
