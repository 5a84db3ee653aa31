use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::*;

/// A CA, and a server certificate it signed for `localhost`, written to `dir`.
fn write_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let key = KeyPair::generate().expect("key");
    let params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
    let cert = params.signed_by(&key, &Issuer::from_params(&ca_params, &ca_key)).expect("cert");
    let paths = (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&paths.0, ca.pem()).expect("write");
    std::fs::write(&paths.1, cert.pem()).expect("write");
    std::fs::write(&paths.2, key.serialize_pem()).expect("write");
    paths
}

#[test]
fn good_files_make_configs_with_the_right_alpn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = write_pki(dir.path());
    let http = http_config(&HttpTls { cert_file: cert.clone(), key_file: key.clone() }).expect("http");
    assert_eq!(http.alpn_protocols, vec![b"http/1.1".to_vec()]);
    let grpc =
        grpc_config(&GrpcTls { cert_file: cert, key_file: key, client_ca_file: Some(ca) }).expect("grpc");
    assert_eq!(grpc.alpn_protocols, vec![b"h2".to_vec()]);
}

#[test]
fn errors_name_the_key_and_the_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = write_pki(dir.path());
    let missing = dir.path().join("missing.pem");
    let err = http_config(&HttpTls { cert_file: missing.clone(), key_file: key.clone() }).expect_err("bad");
    assert!(err.starts_with("tls.cert_file: ") && err.contains("missing.pem: cannot read"), "{err}");
    let section = GrpcTls { cert_file: cert.clone(), key_file: ca.clone(), client_ca_file: None };
    let err = grpc_config(&section).expect_err("a certificate is not a key");
    assert!(err.starts_with("grpc_tls.key_file:") && err.contains("ca.pem"), "{err}");
    let section = GrpcTls { cert_file: cert.clone(), key_file: key.clone(), client_ca_file: Some(key) };
    let err = grpc_config(&section).expect_err("a key is not a CA");
    assert!(err.starts_with("grpc_tls.client_ca_file:") && err.contains("server.key"), "{err}");
    let other = KeyPair::generate().expect("key");
    let other_file = dir.path().join("other.key");
    std::fs::write(&other_file, other.serialize_pem()).expect("write");
    let err = http_config(&HttpTls { cert_file: cert, key_file: other_file }).expect_err("mismatch");
    assert!(err.contains("does not go with the key"), "{err}");
}
