//! Why the control plane did not start or a file it reads was refused: one
//! variant per part that can fail, each naming the place (the store URL without
//! its password, the address, the file) and wrapping its cause. A bad config file
//! is `Config`, which the binary turns into exit code 64 before binding a port.

use crate::files::FileError;

/// A config problem; the binary exits with code 64 on it.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

/// The app's error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server config (or a file it names) is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file or directory could not be read.
    #[error(transparent)]
    File(#[from] FileError),
    /// A directory listing that failed, with what it was for.
    #[error("{what}")]
    Dir {
        what: &'static str,
        #[source]
        source: FileError,
    },
    /// The store did not open (`url` shown without its password).
    #[error("opening store {url}")]
    Store {
        url: String,
        #[source]
        source: madeira_store::StoreError,
    },
    /// A store URL of no backend Madeira has.
    #[error(
        "store `{0}`: use sqlite:///path/madeira.db, postgres://user@host/db or mysql://user:pass@host/db"
    )]
    StoreUrl(String),
    /// Binding a listener or preparing the data directory.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("starting telemetry")]
    Telemetry(#[source] madeira_telemetry::TelemetryError),
    #[error(transparent)]
    Alerts(#[from] madeira_alert::AlertError),
    #[error(transparent)]
    Sql(#[from] madeira_sql::SqlError),
    #[error(transparent)]
    Xxl(#[from] madeira_xxl::XxlError),
    #[error("starting the in-process sidecar")]
    Sidecar(#[source] madeira_sidecar::SidecarError),
    /// A calendar definition that is refused, with where it came from.
    #[error("{what}")]
    Calendar {
        what: String,
        #[source]
        source: madeira_calendar::DefinitionError,
    },
    /// A flow of the flows directory that did not apply.
    #[error("{0}")]
    Flow(madeira_engine::EngineError),
}

impl Error {
    /// True when the cause is a bad config, flag or file the operator gave.
    pub fn is_config(&self) -> bool {
        matches!(self, Error::Config(_))
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
