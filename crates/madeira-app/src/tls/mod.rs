//! TLS for the control plane's listeners (rustls on the ring provider, no
//! process-wide default): the `tls:` (HTTPS API) and `grpc_tls:` (sidecar link,
//! optionally mTLS) config sections, turned into rustls server configs at startup
//! so a bad file is a `ConfigError` naming the key and the path before any port is
//! bound. Keys are read, never logged.

mod listener;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;

pub use listener::TlsListener;

/// `tls:` — HTTPS on the `http:` listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpTls {
    /// PEM: the server certificate, then its intermediates.
    pub cert_file: PathBuf,
    /// PEM: the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// `grpc_tls:` — TLS on the sidecar link; with `client_ca_file`, mTLS: every
/// sidecar must present a certificate signed by that CA (and still its group token).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// PEM: the CA(s) sidecar client certificates must chain to.
    pub client_ca_file: Option<PathBuf>,
}

/// A rustls server config for the API: HTTP/1.1 only (the API does not speak h2).
pub fn http_config(section: &HttpTls) -> Result<Arc<rustls::ServerConfig>, String> {
    server_config("tls", &section.cert_file, &section.key_file, None, b"http/1.1")
}

/// A rustls server config for the sidecar link (gRPC needs ALPN `h2`).
pub fn grpc_config(section: &GrpcTls) -> Result<Arc<rustls::ServerConfig>, String> {
    let ca = section.client_ca_file.as_deref();
    server_config("grpc_tls", &section.cert_file, &section.key_file, ca, b"h2")
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(
    section: &str,
    cert_file: &Path,
    key_file: &Path,
    client_ca_file: Option<&Path>,
    alpn: &[u8],
) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = read_certs(&format!("{section}.cert_file"), cert_file)?;
    let key = read_key(&format!("{section}.key_file"), key_file)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("{section}: {e}"))?;
    let builder = match client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let key = format!("{section}.client_ca_file");
            let roots = read_roots(&key, path)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| format!("{key}: {}: {e}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "{section}: the certificate in {} does not go with the key in {}: {e}",
            cert_file.display(),
            key_file.display()
        )
    })?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// Every certificate in a PEM file; at least one.
pub fn read_certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{key}: {}: not PEM certificates ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{key}: {} holds no `BEGIN CERTIFICATE` block", path.display()));
    }
    Ok(certs)
}

fn read_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read(key, path)?;
    // The parse error is not echoed: it could quote part of the key.
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|_| format!("{key}: {} holds no PEM private key", path.display()))
}

fn read_roots(key: &str, path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(key, path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{key}: {}: not a usable CA certificate ({e})", path.display()))?;
    }
    Ok(roots)
}

fn read(key: &str, path: &Path) -> Result<Vec<u8>, String> {
    crate::files::read_bytes(path, crate::files::Confine::Anywhere).map_err(|e| format!("{key}: {e}"))
}

#[cfg(test)]
mod tests;
