//! End-to-end tests: each starts the real `madeira` binary (`madeira dev` on a fresh
//! data directory) and drives it over HTTP and the CLI.

mod api;
mod cli;
mod crontab;
mod exec;
mod recovery;
mod semantics;
mod sidecar;
mod support;
