//! The CLI against a running `madeira dev`: apply, run --wait exit codes,
//! show, logs, validate output format.

use std::process::Command;

use crate::support::{BIN, Dev};

fn madeira(dev: &Dev, args: &[&str]) -> std::process::Output {
    dev.cli(args)
}

#[tokio::test]
async fn apply_run_wait_show_and_logs() {
    let (dir, dev) = Dev::start();
    let ok = dir.path().join("ok.yaml");
    std::fs::write(&ok, "flow: cli-ok\nnodes:\n  a: {run: {builtin: noop, outputs: {n: 1}}}\n")
        .expect("write");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "flow: cli-bad\nnodes:\n  a: {run: {builtin: fail, message: nope}}\n")
        .expect("write");
    let out = madeira(&dev, &["apply", "-f", ok.to_str().expect("path"), "-f", bad.to_str().expect("path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("flow cli-ok version 1 (created)"));

    let out = madeira(&dev, &["run", "cli-ok", "--wait", "--output", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(run["status"], "SUCCESS");
    let run_id = run["run_id"].as_str().expect("id").to_string();

    let out = madeira(&dev, &["run", "cli-bad", "--wait"]);
    assert_eq!(out.status.code(), Some(1), "a failed run exits 1");

    let out = madeira(&dev, &["show", &run_id]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("a") && text.contains("SUCCESS"), "{text}");
    assert!(
        text.contains(&format!("{}/runs/{run_id}", dev.base)),
        "show links the console's run page: {text}"
    );
    let out = madeira(&dev, &["logs", &run_id, "a"]);
    // noop prints nothing: its attempt is listed with no output.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "--- attempt 1 ---\n");
    let out = madeira(&dev, &["confirm", &run_id, "a", "--reason", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("409"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn validate_prints_file_line_node_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cycle.yaml");
    std::fs::write(
        &file,
        "flow: cyc\nnodes:\n  alpha: {needs: [gamma], run: {builtin: noop}}\n  beta: {needs: [alpha], run: {builtin: noop}}\n  gamma: {needs: [beta], run: {builtin: noop}}\n",
    )
    .expect("write");
    let out = Command::new(BIN).arg("validate").arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    let expected =
        format!("{}:3: node alpha: dependency cycle: alpha -> beta -> gamma -> alpha", file.display());
    assert!(text.starts_with(&expected), "{text}");
}

#[test]
fn cron_next_prints_instants_with_offsets() {
    let out = Command::new(BIN)
        .args([
            "cron",
            "next",
            "30 2 * * *",
            "--timezone",
            "Europe/Berlin",
            "--from",
            "2026-03-28T12:00:00Z",
            "--count",
            "2",
        ])
        .output()
        .expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    // 2026-03-29 02:30 does not exist in Berlin (spring forward): it fires once at 03:00.
    assert_eq!(text, "2026-03-29T03:00:00+02:00\n2026-03-30T02:30:00+02:00\n");
}

#[test]
fn a_closed_pipe_ends_a_printing_command_quietly() {
    // `head` closes the pipe after one line; the rest of 5,000 lines meets EPIPE.
    let script = format!("'{BIN}' cron next '* * * * *' --count 5000 | head -n 1");
    let out = Command::new("sh").args(["-c", &script]).output().expect("run sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
}

/// `run --wait` at a manual node says who must decide and how, keeps waiting,
/// and exits 0 once a person confirms.
#[tokio::test]
async fn run_wait_says_it_waits_for_a_person() {
    use std::io::BufRead;
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: cli-manual\nnodes:\n  approve: {manual: {prompt: \"check the totals\"}}\n").await;
    let mut child = Command::new(BIN)
        .args(["run", "cli-manual", "--wait"])
        .env("MADEIRA_SERVER", &dev.base)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run --wait");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("waiting for a person to confirm node approve: check the totals"))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("run --wait never said it waits for a person: {seen:?}"),
        }
    }
    let run_id = seen[0].split_whitespace().nth(1).expect("run id").to_string();
    assert!(rx.recv_timeout(std::time::Duration::from_secs(1)).is_ok_and(|l| l.contains("madeira confirm")));
    assert!(child.try_wait().expect("wait").is_none(), "still waiting for the person");
    let out = dev.cli(&["confirm", &run_id, "approve", "--reason", "totals match"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status = crate::support::wait_exit(&mut child, 20).await;
    assert_eq!(status.code(), Some(0), "confirmed: the run succeeds and --wait exits 0");
}
