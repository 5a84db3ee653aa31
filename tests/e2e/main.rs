//! End-to-end tests: each starts the real `madeira` binary (`madeira dev` on a fresh
//! data directory) and drives it over HTTP and the CLI.

mod api;
mod auth;
mod cli;
mod forwarding;
mod permits;
mod recovery;
mod replicas;
mod semantics;
mod support;
