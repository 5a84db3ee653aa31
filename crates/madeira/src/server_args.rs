//! Where the control plane is, how to authenticate and how to print: the
//! arguments every client command takes (flattened into each of them).

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Output {
    #[default]
    Text,
    Json,
}

/// Where the control plane is and how to authenticate.
#[derive(Debug, Args, Clone)]
pub struct ServerArgs {
    /// Control plane URL (`https://` for TLS); secrets in it are never printed.
    #[arg(long, env = "MADEIRA_SERVER", default_value = "http://127.0.0.1:7070")]
    pub server: String,
    /// API bearer token (prefer the MADEIRA_TOKEN environment variable).
    #[arg(long, env = "MADEIRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM CA certificate(s) to trust for an https:// server, instead of the system's roots.
    #[arg(long, env = "MADEIRA_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    /// `text` for people, `json` (one document on stdout) for scripts.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}
