//! Certificates made at test time with rcgen (ring): a CA that signs server
//! certificates (SANs `localhost`, `127.0.0.1`) and client certificates, written
//! as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    /// The CA certificate's PEM file.
    pub cert_file: PathBuf,
}

/// A certificate and its key, as files.
pub struct Leaf {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl Ca {
    /// A new self-signed CA named `name`, its certificate written to `dir/name.pem`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        let key = KeyPair::generate().expect("ca key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).expect("self-sign ca");
        let cert_file = dir.join(format!("{name}.pem"));
        std::fs::write(&cert_file, cert.pem()).expect("write ca");
        Ca { params, key, cert_file }
    }

    /// A server certificate for `localhost` and `127.0.0.1`.
    pub fn server(&self, dir: &Path, name: &str) -> Leaf {
        let sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        self.issue(dir, name, sans, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate (mTLS) with common name `name`.
    pub fn client(&self, dir: &Path, name: &str) -> Leaf {
        self.issue(dir, name, Vec::new(), ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(&self, dir: &Path, name: &str, sans: Vec<String>, usage: ExtendedKeyUsagePurpose) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let mut params = CertificateParams::new(sans).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &Issuer::from_params(&self.params, &self.key)).expect("sign");
        let leaf =
            Leaf { cert_file: dir.join(format!("{name}.pem")), key_file: dir.join(format!("{name}.key")) };
        std::fs::write(&leaf.cert_file, cert.pem()).expect("write cert");
        std::fs::write(&leaf.key_file, key.serialize_pem()).expect("write key");
        leaf
    }
}

/// A reqwest client trusting only `ca` (and sending `token` as a bearer token).
pub fn client_trusting(ca: &Path, token: Option<&str>) -> reqwest::Client {
    let pem = std::fs::read(ca).expect("read ca");
    let certs = reqwest::Certificate::from_pem_bundle(&pem).expect("ca pem");
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {token}").parse().expect("header"));
    }
    reqwest::Client::builder().default_headers(headers).tls_certs_only(certs).build().expect("client")
}
