//! TLS for the sidecar's link: the `tls:` section of its config (`ca_file` to trust
//! the control plane's certificate, else the system roots; `cert_file` and
//! `key_file` to present a client certificate for mTLS), read and checked once at
//! startup. The key stays in memory and out of `Debug` and logs.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tonic::transport::{Certificate, ClientTlsConfig};

/// `tls:` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// PEM: the CA(s) the control plane's certificate must chain to (default: the
    /// system's roots).
    pub ca_file: Option<PathBuf>,
    /// PEM: this sidecar's client certificate (mTLS), with `key_file`.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// The link's TLS material, read.
#[derive(Clone)]
pub struct LinkTls {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for LinkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkTls")
            .field("custom_ca", &self.ca.is_some())
            .field("client_cert", &self.identity.is_some())
            .finish()
    }
}

impl LinkTls {
    /// Reads the files `section` names; errors name the key and the path.
    pub fn load(section: &TlsSection) -> Result<Self, String> {
        let ca = match &section.ca_file {
            Some(path) => Some(read_pem("tls.ca_file", path, "CERTIFICATE-----")?),
            None => None,
        };
        let identity = match (&section.cert_file, &section.key_file) {
            (Some(cert), Some(key)) => Some((
                read_pem("tls.cert_file", cert, "CERTIFICATE-----")?,
                read_pem("tls.key_file", key, "PRIVATE KEY-----")?,
            )),
            (None, None) => None,
            (Some(_), None) => return Err("tls.cert_file is set without tls.key_file; give both".into()),
            (None, Some(_)) => return Err("tls.key_file is set without tls.cert_file; give both".into()),
        };
        Ok(Self { ca, identity })
    }

    /// The system's roots only, no client certificate.
    pub fn system_roots() -> Self {
        Self { ca: None, identity: None }
    }

    /// tonic's client config: the CA given (only it), or the system roots.
    pub fn client_config(&self) -> ClientTlsConfig {
        let config = match &self.ca {
            Some(ca) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)),
            None => ClientTlsConfig::new().with_native_roots(),
        };
        match &self.identity {
            Some((cert, key)) => config.identity(tonic::transport::Identity::from_pem(cert, key)),
            None => config,
        }
    }
}

/// Reads `path`, which must hold a PEM block ending in `marker`.
fn read_pem(key: &str, path: &Path, marker: &str) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{key}: cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    if !text.lines().any(|l| l.starts_with("-----BEGIN ") && l.ends_with(marker)) {
        return Err(format!(
            "{key}: {} holds no PEM `{}` block",
            path.display(),
            marker.trim_end_matches('-')
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key_and_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("nope.pem");
        let err = LinkTls::load(&TlsSection { ca_file: Some(missing.clone()), ..Default::default() })
            .expect_err("missing file");
        assert!(err.starts_with("tls.ca_file: cannot read") && err.contains("nope.pem"), "{err}");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not pem").expect("write");
        let err = LinkTls::load(&TlsSection {
            cert_file: Some(junk.clone()),
            key_file: Some(junk),
            ..Default::default()
        })
        .expect_err("junk");
        assert!(err.starts_with("tls.cert_file:") && err.contains("CERTIFICATE"), "{err}");
        let err =
            LinkTls::load(&TlsSection { key_file: Some(missing), ..Default::default() }).expect_err("half");
        assert!(err.contains("without tls.cert_file"), "{err}");
    }
}
