//! TLS on the real `madeira serve`: the API over HTTPS (trusted through a CA file,
//! refused to plain HTTP and to clients without the CA, the CLI with `--ca-file`),
//! the sidecar link with mTLS (a sidecar with a certificate from the CA runs jobs;
//! one without a certificate, with another CA's, or without its token is refused
//! and its job never runs), and bad certificate paths stopping `serve` and
//! `sidecar` with the key named.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;

use crate::pki::{Ca, Leaf, client_trusting};
use crate::support::{BIN, Dev, client, status_of};

const ADMIN: &str = "admin-token-0123456789abcdef";
const BILLING: &str = "billing-token-0123456789abcdef";

fn write_config(dir: &Path, extra: &str) -> PathBuf {
    let config = dir.join("madeira.yaml");
    let text = format!(
        "http: 127.0.0.1:0\nstore: sqlite://{}\nauth:\n  tokens:\n    - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n  \
         sidecar_tokens:\n    - {{group: billing, token_env: MADEIRA_T_BILLING}}\n{extra}",
        dir.join("madeira.db").display()
    );
    std::fs::write(&config, text).expect("write config");
    config
}

const ENV: &[(&str, &str)] = &[("MADEIRA_T_ADMIN", ADMIN), ("MADEIRA_T_BILLING", BILLING)];

fn cli(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .env_remove("MADEIRA_CA_FILE")
        .output()
        .expect("cli")
}

#[tokio::test]
async fn the_api_over_https_answers_clients_trusting_the_ca_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::new(dir.path(), "ca");
    let server = ca.server(dir.path(), "server");
    let tls = format!(
        "tls: {{cert_file: {}, key_file: {}}}\n",
        server.cert_file.display(),
        server.key_file.display()
    );
    let config = write_config(dir.path(), &tls);
    let mut dev = Dev::serve_with(&config, ENV, false, client_trusting(&ca.cert_file, Some(ADMIN)));
    assert!(dev.base.starts_with("https://127.0.0.1:"), "{}", dev.base);
    let (status, _) = dev.get("/flows").await;
    assert_eq!(status, 200);

    let plain = dev.base.replacen("https://", "http://", 1);
    let refused = client(Some(ADMIN)).get(format!("{plain}/healthz")).send().await;
    assert!(refused.is_err(), "plain HTTP on the TLS port must fail: {refused:?}");
    let untrusting = client(Some(ADMIN)).get(format!("{}/healthz", dev.base)).send().await;
    assert!(untrusting.is_err(), "a client without the CA must fail: {untrusting:?}");

    dev.put_flow("flow: hello\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let ca_file = ca.cert_file.to_str().expect("path");
    let with_ca = [("MADEIRA_SERVER", dev.base.as_str()), ("MADEIRA_TOKEN", ADMIN)];
    let out = cli(&["run", "hello", "--wait", "--ca-file", ca_file], &with_ca);
    assert!(out.status.success(), "madeira run over https: {}", String::from_utf8_lossy(&out.stderr));
    let env_ca = [with_ca[0], with_ca[1], ("MADEIRA_CA_FILE", ca_file)];
    let out = Command::new(BIN).args(["runs", "--output", "json"]).envs(env_ca).output().expect("runs");
    assert!(out.status.success(), "madeira runs: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"SUCCESS\""), "{out:?}");
    let out = cli(&["runs"], &with_ca);
    assert!(!out.status.success(), "the CLI without the CA must fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate"), "names the certificate problem: {stderr}");
    stops_cleanly(&mut dev).await;
}

/// SIGTERM, then a clean exit within 15 s: TLS connections drain like plain ones.
async fn stops_cleanly(dev: &mut Dev) {
    let status = crate::support::sigterm_and_wait(&mut dev.child, 15).await;
    assert!(status.success(), "{status:?}");
}

/// A `madeira sidecar` whose log lines arrive on a channel.
struct Sidecar {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Sidecar {
    fn start(dir: &Path, name: &str, grpc: &str, tls: &str, token: bool, job: &str) -> Sidecar {
        let config = dir.join(format!("{name}.yaml"));
        let marker = dir.join(format!("{job}.ran"));
        let text = format!(
            "name: {name}\ngroup: billing\ncontrol_plane: https://{grpc}\nspool_dir: {}\n{}{tls}\
             jobs:\n  {job}:\n    command: [\"/bin/sh\", \"-c\", \"echo {name} >> {}\"]\n",
            dir.join(format!("{name}-spool")).display(),
            if token { "token_env: MADEIRA_T_BILLING\n" } else { "" },
            marker.display()
        );
        std::fs::write(&config, text).expect("write sidecar config");
        let mut child = Command::new(BIN)
            .args(["sidecar", "--config"])
            .arg(&config)
            .envs(ENV.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sidecar");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Sidecar { child, lines }
    }

    /// Waits (up to 20 s) for a log line containing one of `needles`.
    fn wait_log(&self, needles: &[&str]) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if needles.iter().any(|n| line.contains(n)) => return line,
                Ok(_) => {}
                Err(e) => panic!("no log line with {needles:?} within 20s ({e})"),
            }
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_section(ca: &Path, client: Option<&Leaf>) -> String {
    let mut text = format!("tls:\n  ca_file: {}\n", ca.display());
    if let Some(leaf) = client {
        text.push_str(&format!(
            "  cert_file: {}\n  key_file: {}\n",
            leaf.cert_file.display(),
            leaf.key_file.display()
        ));
    }
    text
}

#[tokio::test]
async fn mtls_lets_only_sidecars_with_a_ca_signed_certificate_and_the_token_run_jobs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let ca = Ca::new(d, "ca");
    let rogue = Ca::new(d, "rogue-ca");
    let server = ca.server(d, "server");
    let grpc_tls = format!(
        "grpc: 127.0.0.1:0\ngrpc_tls: {{cert_file: {}, key_file: {}, client_ca_file: {}}}\n",
        server.cert_file.display(),
        server.key_file.display(),
        ca.cert_file.display()
    );
    let mut dev = Dev::serve_with(&write_config(d, &grpc_tls), ENV, true, client(Some(ADMIN)));

    let good = ca.client(d, "good");
    let ok = Sidecar::start(d, "s-good", &dev.grpc, &tls_section(&ca.cert_file, Some(&good)), true, "hello");
    ok.wait_log(&["connected to the control plane"]);
    // TCP_NODELAY on both ends of the TLS link (the TLS listener sets it itself).
    let port = crate::nodelay::port_of(&dev.grpc);
    let dialled = crate::nodelay::wait_link_sockets(ok.child.id(), port, 1);
    let accepted = crate::nodelay::wait_link_sockets(dev.child.id(), port, 1);
    assert!(dialled.iter().chain(&accepted).all(|s| s.2), "without TCP_NODELAY: {dialled:?} {accepted:?}");
    dev.put_flow("flow: hello\nnodes:\n  h: {run: {sidecar: {group: billing, job: hello}}}\n").await;
    let run = dev.finished(&dev.trigger("hello", json!({})).await).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(std::fs::read_to_string(d.join("hello.ran")).expect("ran").trim(), "s-good");

    // Each of these declares `other`; none may connect, so `other` never runs.
    let stranger = rogue.client(d, "stranger");
    let refused = [
        Sidecar::start(d, "s-nocert", &dev.grpc, &tls_section(&ca.cert_file, None), true, "other"),
        Sidecar::start(d, "s-rogue", &dev.grpc, &tls_section(&ca.cert_file, Some(&stranger)), true, "other"),
        Sidecar::start(d, "s-notoken", &dev.grpc, &tls_section(&ca.cert_file, Some(&good)), false, "other"),
    ];
    for sidecar in &refused {
        sidecar.wait_log(&["link down", "refused this sidecar"]);
    }
    dev.put_flow("flow: other\nnodes:\n  o: {run: {sidecar: {group: billing, job: other}}}\n").await;
    let run_id = dev.trigger("other", json!({})).await;
    let run = dev.wait_run(&run_id, 10, |r| r["nodes"]["o"]["waiting"] == true).await;
    assert_eq!(status_of(&run, "o"), "INIT", "{run}");
    let (_, fleet) = dev.get("/sidecars").await;
    let names: Vec<&str> =
        fleet["sidecars"].as_array().into_iter().flatten().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(names, ["s-good"], "{fleet}");
    assert!(!d.join("other.ran").exists(), "a refused sidecar ran its job");
    stops_cleanly(&mut dev).await;
}

#[test]
fn bad_certificate_paths_stop_serve_and_sidecar_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let ca = Ca::new(d, "ca");
    let server = ca.server(d, "server");
    let missing = d.join("missing.pem");
    let cases = [
        (
            format!("tls: {{cert_file: {}, key_file: {}}}\n", missing.display(), server.key_file.display()),
            "tls.cert_file",
        ),
        (
            format!(
                "grpc_tls: {{cert_file: {}, key_file: {}, client_ca_file: {}}}\n",
                server.cert_file.display(),
                server.key_file.display(),
                missing.display()
            ),
            "grpc_tls.client_ca_file",
        ),
    ];
    for (section, key) in cases {
        let config = write_config(d, &section);
        let out =
            Command::new(BIN).arg("serve").arg("--config").arg(&config).envs(ENV.iter().copied()).output();
        let out = out.expect("run serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains(key) && stderr.contains("missing.pem"), "{key}: {stderr}");
        assert!(!stderr.contains("API on"), "nothing was served: {stderr}");
    }
    let config = d.join("sidecar.yaml");
    let text = format!(
        "group: billing\ncontrol_plane: https://127.0.0.1:1\nspool_dir: {}\ntls: {{ca_file: {}}}\njobs: {{}}\n",
        d.join("spool").display(),
        missing.display()
    );
    std::fs::write(&config, text).expect("write");
    let out = Command::new(BIN).args(["sidecar", "--config"]).arg(&config).output().expect("run sidecar");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("tls.ca_file") && stderr.contains("missing.pem"), "{stderr}");
}
