//! One process per SQLite store: a second `madeira dev` on the same `--data`, or a
//! `madeira serve` on the same store file, is refused naming the holder's pid, and
//! the first one's exec socket keeps working.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{BIN, Dev, bin, try_wait_blocking, wait_until};

/// Waits (at most 30 s) for `child` to exit; a child still running then is killed
/// and the test fails (it was not refused).
fn exit_of(mut child: Child, what: &str) -> (Option<i32>, String) {
    if try_wait_blocking(Duration::from_secs(30), || child.try_wait().expect("try_wait")).is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what} still runs after 30 s: it was not refused");
    }
    let out = child.wait_with_output().expect("output");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn a_second_process_on_the_same_store_is_refused_naming_the_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let dev = Dev::start_with(&data, &[]);
    let holder = format!("pid {}", dev.child.id());

    let second = Command::new(bin())
        .args(["dev", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--data"])
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the second dev");
    let (code, stderr) = exit_of(second, "a second madeira dev");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is in use by another madeira process") && stderr.contains(&holder), "{stderr}");
    assert!(stderr.contains("or give another --data"), "{stderr}");

    let config = dir.path().join("serve.yaml");
    let store = data.join("madeira.db");
    let yaml = format!(
        "store: sqlite://{}\nhttp: 127.0.0.1:0\nauth:\n  tokens:\n    - {{name: a, role: admin, token_env: LOCK_T}}\n",
        store.display()
    );
    std::fs::write(&config, yaml).expect("write config");
    let serve = Command::new(bin())
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("LOCK_T", "lock-test-token-0123456789abcdef")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let (code, stderr) = exit_of(serve, "madeira serve on the dev's store");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("store sqlite://{}", store.display())) && stderr.contains(&holder),
        "{stderr}"
    );

    // The first dev's exec socket still answers: the wrapped run is recorded.
    let out = Command::new(BIN)
        .args(["exec", "--job", "after-refusal", "--sidecar"])
        .arg(data.join("sidecar.sock"))
        .args(["--", "/bin/echo", "fine"])
        .output()
        .expect("madeira exec");
    assert_eq!((out.status.code(), out.stdout.as_slice()), (Some(0), &b"fine\n"[..]));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_until(Duration::from_secs(10), "the exec'd run recorded", async || {
        let (_, body) = dev.get("/runs?flow=after-refusal").await;
        let runs = body["runs"].as_array().cloned().unwrap_or_default();
        if runs.len() == 1 && runs[0]["status"] == "SUCCESS" { Ok(()) } else { Err(body.to_string()) }
    })
    .await;
}
