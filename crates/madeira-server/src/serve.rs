//! Serving a router over HTTP/1.1 on a listener of accepted connections (plain
//! TCP, or TLS terminated by the listener). Each connection must finish a
//! request's headers within `header_read_timeout` — idle keep-alive connections
//! included — or it is closed, so clients that trickle their headers (slowloris)
//! cannot hold connections; at most `max_connections` are open at once (more are
//! closed on accept and logged). Every request carries its peer's address
//! (`ConnectInfo<SocketAddr>`), which the failed-auth limit and its logs use. On
//! shutdown the listener stops and open connections finish their requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::AuthConfig;

/// How long a client may take to send a request's headers (and how long an idle
/// keep-alive connection stays open).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Open HTTP connections at most (the process's file descriptors are shared with
/// the store, the sidecar link and the executors).
pub const MAX_CONNECTIONS: usize = 4096;

/// How often a full connection table is logged at most.
const FULL_WARN_EVERY: Duration = Duration::from_secs(10);

/// How `serve_router` guards the server.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// The server checks bearer tokens: failed attempts are limited per client
    /// address. Without (`madeira dev`): requests must be addressed to loopback or
    /// `public_names` (`Host`) and come from the server's own origin (`Origin`).
    pub authenticated: bool,
    /// Host names (no port) a server without authentication answers to besides
    /// loopback ones, e.g. the host of `alerts.external_url`.
    pub public_names: Vec<String>,
}

impl ServeOptions {
    /// The defaults for a server with this authentication.
    pub fn for_auth(auth: &AuthConfig) -> Self {
        Self {
            header_read_timeout: HEADER_READ_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            authenticated: auth.tokens.is_some(),
            public_names: Vec::new(),
        }
    }

    /// Also answers to `names` when unauthenticated.
    pub fn with_public_names(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.public_names.extend(names);
        self
    }
}

/// Accepts connections until `shutdown` fires, then waits for open ones to finish.
pub(crate) async fn run<L>(mut listener: L, app: Router, shutdown: CancellationToken, options: &ServeOptions)
where
    L: Listener<Addr = SocketAddr>,
{
    let permits = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let connections = TaskTracker::new();
    let mut warned_full: Option<Instant> = None;
    loop {
        let (io, peer) = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            if warned_full.is_none_or(|at| at.elapsed() >= FULL_WARN_EVERY) {
                warned_full = Some(Instant::now());
                tracing::warn!(
                    client = %peer.ip(),
                    max_connections = options.max_connections,
                    "HTTP connection refused: too many open connections"
                );
            }
            drop(io);
            continue;
        };
        let app = app.clone();
        let shutdown = shutdown.clone();
        let timeout = options.header_read_timeout;
        connections.spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                app.clone().oneshot(request)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(timeout);
            let conn = builder.serve_connection(TokioIo::new(io), service);
            tokio::pin!(conn);
            let served = tokio::select! {
                served = conn.as_mut() => served,
                () = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                tracing::debug!(client = %peer, error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}
