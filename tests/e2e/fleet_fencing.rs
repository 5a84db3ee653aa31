//! Fencing a frozen host (SPEC §4.1): a sidecar stopped with SIGSTOP past
//! `sidecar_lost_after` loses its attempt to another sidecar of the group; once
//! resumed (SIGCONT) it is re-registered, told to kill its stale copy (which it
//! does), its result is refused, exactly one result is applied, and it receives
//! work again.

use std::path::Path;

use serde_json::{Value, json};

use crate::sidecar::{SidecarProc, wait_for, wait_sidecars};
use crate::support::{Dev, status_of, wait_until};

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

fn jobs(dir: &Path, who: &str) -> String {
    let script = dir.join("long.sh");
    let d = dir.display();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntrap 'echo \"$WHO\" >> {d}/killed; exit 143' TERM\necho \"$WHO\" >> {d}/started\nsleep 6 &\nwait $!\necho \"$WHO\" >> {d}/ran\nprintf '{{\"who\": \"%s\"}}' \"$WHO\" > \"$MADEIRA_OUTPUT_FILE\"\n"
        ),
    )
    .expect("script");
    format!(
        "jobs:\n  long:\n    command: [\"/bin/sh\", \"{}\"]\n    env: {{WHO: {who}}}\n    grace: 2s\n  quick:\n    command: [\"/bin/sh\", \"-c\", \"printf '{{\\\"who\\\": \\\"%s\\\"}}' $WHO > $MADEIRA_OUTPUT_FILE\"]\n    env: {{WHO: {who}}}\n",
        script.display()
    )
}

async fn sidecar(dev: &Dev, name: &str) -> Value {
    let body = dev.get("/sidecars").await.1;
    body["sidecars"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_frozen_sidecar_is_fenced_on_return_and_gets_work_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("server.yaml");
    std::fs::write(&config, "sidecar_lost_after: 1s\n").expect("config");
    let dev = Dev::start_with(&dir.path().join("data"), &["--config", config.to_str().expect("path")]);
    let mut a = SidecarProc::start(dir.path(), "f-a", &dev.grpc, &jobs(dir.path(), "a"));
    let mut b = SidecarProc::start(dir.path(), "f-b", &dev.grpc, &jobs(dir.path(), "b"));
    wait_sidecars(&dev, "billing", 2).await;
    dev.put_flow("flow: fenced\nnodes:\n  n: {run: {sidecar: {group: billing, job: long}}}\n").await;
    let run_id = dev.trigger("fenced", json!({})).await;
    let started = dir.path().join("started");
    wait_for("the job to start", 10, || lines(&started).len() == 1).await;
    let first = lines(&started)[0].clone();
    let (victim, survivor, frozen) = if first == "a" { ("a", "b", &mut a) } else { ("b", "a", &mut b) };

    frozen.signal(libc::SIGSTOP);
    wait_for("the attempt to move to the other sidecar", 15, || lines(&started).len() == 2).await;
    assert_eq!(lines(&started)[1], survivor);
    frozen.signal(libc::SIGCONT);

    let killed = dir.path().join("killed");
    wait_for("the stale copy to be killed", 15, || lines(&killed) == [victim]).await;
    let run = dev.wait_run(&run_id, 30, |r| r["status"] != "RUNNING").await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["n"]["outputs"]["who"], survivor, "the moved attempt's result: {run}");
    assert_eq!(run["nodes"]["n"]["data_version"], 1, "exactly one result applied: {run}");
    assert_eq!(lines(&dir.path().join("ran")), [survivor], "only the survivor's copy ran to its end");
    let name = format!("f-{victim}");
    let back = wait_until(std::time::Duration::from_secs(10), "the stale result refused", async || {
        let s = sidecar(&dev, &name).await;
        if s["stale_results_refused"] == 1 { Ok(s) } else { Err(s.to_string()) }
    })
    .await;
    assert_eq!((&back["connected"], &back["ready"]), (&json!(true), &json!(true)), "re-registered: {back}");

    dev.put_flow("flow: again\nnodes:\n  q: {run: {sidecar: {group: billing, job: quick, shards: all}}}\n")
        .await;
    let again = dev.trigger("again", json!({})).await;
    let run = dev.finished(&again).await;
    assert_eq!(status_of(&run, "q"), "SUCCESS", "{run}");
    let who: Vec<&str> = run["nodes"]["q"]["outputs"]["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["who"].as_str())
        .collect();
    assert_eq!(who, ["a", "b"], "the returned sidecar gets work again: {run}");
}
