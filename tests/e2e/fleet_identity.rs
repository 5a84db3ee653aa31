//! Sidecar names are unique (SPEC §4.1): a second `madeira sidecar` process with
//! the name of a live one is refused with an error naming the holder, the first
//! keeps its attempts and finishes them, and once the holder is gone the second
//! one takes the name.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::sidecar::{SidecarProc, wait_for, wait_sidecars};
use crate::support::{BIN, Dev};

/// A sidecar named `twin` whose job writes `who` to its output after 2 s.
fn config(dir: &Path, who: &str, grpc: &str) -> PathBuf {
    let path = dir.join(format!("twin-{who}.yaml"));
    let text = format!(
        "name: twin\ngroup: billing\ncontrol_plane: http://{grpc}\nspool_dir: {spool}\nshutdown_grace: 1s\njobs:\n  slow:\n    command: [\"/bin/sh\", \"-c\", \"touch {dir}/started-{who}; sleep 2; printf '{{\\\"who\\\": \\\"{who}\\\"}}' > $MADEIRA_OUTPUT_FILE\"]\n",
        spool = dir.join(format!("spool-{who}")).display(),
        dir = dir.display(),
    );
    std::fs::write(&path, text).expect("config");
    path
}

fn spawn_logged(config: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("log file");
    Command::new(BIN)
        .args(["sidecar", "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn sidecar")
}

async fn twins(dev: &Dev) -> Vec<Value> {
    let body = dev.get("/sidecars").await.1;
    body["sidecars"].as_array().into_iter().flatten().filter(|s| s["name"] == "twin").cloned().collect()
}

#[tokio::test]
async fn a_second_sidecar_with_a_live_name_is_refused_naming_the_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_with(&dir.path().join("data"), &[]);
    let mut first = SidecarProc::spawn(config(dir.path(), "a", &dev.grpc));
    wait_sidecars(&dev, "billing", 1).await;
    dev.put_flow("flow: twins\nnodes:\n  s: {run: {sidecar: {group: billing, job: slow}}}\n").await;
    let run_id = dev.trigger("twins", json!({})).await;
    wait_for("the job to start on the first sidecar", 10, || dir.path().join("started-a").exists()).await;

    let log = dir.path().join("second.log");
    let mut second = spawn_logged(&config(dir.path(), "b", &dev.grpc), &log);
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the second sidecar to be refused", 15, || read().contains("refused this sidecar")).await;
    let text = read();
    assert!(
        text.contains("sidecar name `twin` is held by a live sidecar (group billing, from 127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("give this sidecar another `name:`"), "{text}");

    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "the holder keeps and finishes its attempt: {run}");
    assert_eq!(run["nodes"]["s"]["outputs"]["who"], "a", "{run}");
    assert_eq!(run["nodes"]["s"]["attempts"], 1, "{run}");
    assert!(!dir.path().join("started-b").exists(), "the refused twin got no work");
    assert_eq!(twins(&dev).await.len(), 1);

    first.kill9();
    let again = dev.trigger("twins", json!({})).await;
    let run = dev.finished(&again).await;
    assert_eq!(run["nodes"]["s"]["outputs"]["who"], "b", "once the holder is gone the name is free: {run}");
    let _ = second.kill();
    let _ = second.wait();
}
