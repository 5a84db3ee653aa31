//! Accepting TLS connections on a bound TCP listener: each handshake runs in its
//! own task (a slow or silent client never holds up the others) under a deadline;
//! failed handshakes — plain HTTP on the TLS port, an untrusted or missing client
//! certificate — are logged and dropped. Serves axum (as a `Listener`) and tonic
//! (as a stream of connections).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

type Accepted = (TlsStream<TcpStream>, SocketAddr);

pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<Option<Accepted>>,
    /// Names the listener in logs (`http`, `grpc`).
    name: &'static str,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, config: Arc<rustls::ServerConfig>, name: &'static str) -> Self {
        Self { tcp, acceptor: TlsAcceptor::from(config), handshakes: JoinSet::new(), name }
    }

    /// The next connection whose handshake succeeded. Cancel-safe.
    pub async fn next(&mut self) -> Accepted {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        self.handshakes.spawn(handshake(self.acceptor.clone(), stream, peer, self.name));
                    }
                    // Out of file descriptors and the like: back off a little.
                    Err(e) => {
                        tracing::warn!(listener = self.name, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    if let Ok(Some(conn)) = done {
                        return conn;
                    }
                }
            }
        }
    }

    /// The connections as a stream, for tonic's `serve_with_incoming_shutdown`.
    pub fn into_stream(self) -> impl Stream<Item = std::io::Result<TlsStream<TcpStream>>> + Send + 'static {
        futures::stream::unfold(self, |mut listener| async move {
            let (stream, _) = listener.next().await;
            Some((Ok(stream), listener))
        })
    }
}

async fn handshake(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    name: &'static str,
) -> Option<Accepted> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Some((tls, peer)),
        Ok(Err(e)) => {
            tracing::info!(listener = name, peer = %peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::info!(listener = name, peer = %peer, "TLS handshake timed out");
            None
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        self.next().await
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
