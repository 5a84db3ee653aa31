//! `madeira exec`: the wrapped command's exit status, stdout and stderr are exactly
//! those of the command alone, with or without a sidecar; the run is recorded in an
//! observe-only flow; a missed cron instant of such a flow is audited and raises
//! one warning, which the next successful run resolves. An observed node cannot be
//! rerun (nothing Madeira may start runs it): the rerun is refused, saying what to
//! do, and mark-success is taken.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{BIN, Dev, wait_until};

const SCRIPT: &str = r#"printf 'bin\000ary\377\n'; printf 'to stderr\n' >&2; printf 'no newline'; exit 42"#;

fn direct(args: &[&str]) -> Output {
    Command::new(args[0]).args(&args[1..]).output().expect("run directly")
}

fn wrapped(socket: &std::path::Path, job: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["exec", "--job", job, "--sidecar"])
        .arg(socket)
        .arg("--")
        .args(args)
        .output()
        .expect("run madeira exec")
}

#[tokio::test]
async fn exec_preserves_exit_code_and_output_byte_for_byte_and_reports_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let dev = Dev::start_with(&data, &[]);
    let socket = data.join("sidecar.sock");
    let args = ["/bin/sh", "-c", SCRIPT];
    let alone = direct(&args);
    let through = wrapped(&socket, "nightly-report", &args);
    assert_eq!(through.status.code(), Some(42));
    assert_eq!(through.status.code(), alone.status.code());
    assert_eq!(through.stdout, alone.stdout, "stdout byte for byte");
    assert_eq!(through.stderr, alone.stderr, "stderr byte for byte");

    let ok = wrapped(&socket, "nightly-report", &["/bin/echo", "fine"]);
    assert_eq!((ok.status.code(), ok.stdout.as_slice()), (Some(0), &b"fine\n"[..]));

    let runs = wait_until(Duration::from_secs(10), "the wrapped runs recorded", async || {
        let (_, body) = dev.get("/runs?flow=nightly-report").await;
        let done = body["runs"]
            .as_array()
            .is_some_and(|r| r.len() == 2 && r.iter().all(|r| r["finished_at"] != Value::Null));
        if done { Ok(body) } else { Err(body.to_string()) }
    })
    .await;
    let statuses: Vec<&str> =
        runs["runs"].as_array().into_iter().flatten().filter_map(|r| r["status"].as_str()).collect();
    assert_eq!(statuses, ["SUCCESS", "FAILED"], "newest first: {runs}");
    let failed = runs["runs"][1]["run_id"].as_str().expect("run id");
    let (_, run) = dev.get(&format!("/runs/{failed}")).await;
    let node = &run["nodes"]["nightly_report"];
    assert!(node["reason"].as_str().is_some_and(|r| r.contains("exit code 42")), "{run}");
    let (_, logs) = dev.get(&format!("/runs/{failed}/nodes/nightly_report/logs")).await;
    assert!(logs.to_string().contains("to stderr"), "{logs}");
    let (_, flow) = dev.get("/flows/nightly-report").await;
    assert_eq!(flow["observe"], true, "{flow}");
}

#[tokio::test]
async fn an_observed_node_refuses_a_rerun_and_takes_mark_success() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let dev = Dev::start_with(&data, &[]);
    let socket = data.join("sidecar.sock");
    let out = wrapped(&socket, "backup-db", &["/bin/sh", "-c", "echo hi; exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let run_id = wait_until(Duration::from_secs(10), "the exec run recorded FAILED", async || {
        let (_, body) = dev.get("/runs?flow=backup-db").await;
        match body["runs"].as_array().and_then(|r| r.first()).filter(|r| r["status"] == "FAILED") {
            Some(run) => Ok(run["run_id"].as_str().expect("run id").to_string()),
            None => Err(body.to_string()),
        }
    })
    .await;
    let why = json!({"reason": "try again"});
    for body in [why.clone(), json!({"reason": "try again", "downstream": true})] {
        let (status, refused) = dev.post(&format!("/runs/{run_id}/nodes/backup_db/rerun"), body, &[]).await;
        assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("observe_only")), "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(
                "observe-only job: Madeira does not run it; promote it (`madeira promote backup-db`)"
            ),
            "{refused}"
        );
    }
    let cli = dev.cli(&["rerun", &run_id, "backup_db", "--reason", "try again"]);
    assert!(!cli.status.success(), "the CLI's rerun is refused too");
    assert!(String::from_utf8_lossy(&cli.stderr).contains("mark-success"), "{cli:?}");
    let (_, run) = dev.get(&format!("/runs/{run_id}")).await;
    let attempts = run["nodes"]["backup_db"]["attempt_history"].as_array().map(Vec::len);
    assert_eq!((run["status"].as_str(), attempts), (Some("FAILED"), Some(1)), "nothing started: {run}");
    let panel =
        dev.http.get(format!("{}/runs/{run_id}/nodes/backup_db", dev.base)).send().await.expect("panel");
    let panel = panel.text().await.expect("panel html");
    assert!(panel.contains("dlg-mark-success-backup_db"), "mark-success offered: {panel}");
    assert!(!panel.contains("dlg-rerun"), "no rerun button: {panel}");
    let (status, marked) = dev.post(&format!("/runs/{run_id}/nodes/backup_db/mark-success"), why, &[]).await;
    assert_eq!(status, 200, "{marked}");
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
}

#[test]
fn exec_without_a_sidecar_still_runs_the_command_and_says_so() {
    let args = ["/bin/sh", "-c", SCRIPT];
    let alone = direct(&args);
    let through = wrapped(std::path::Path::new("/nonexistent/madeira.sock"), "x", &args);
    assert_eq!(through.status.code(), alone.status.code());
    assert_eq!(through.stdout, alone.stdout);
    let stderr = String::from_utf8_lossy(&through.stderr);
    assert!(stderr.starts_with("madeira exec: no sidecar answers"), "{stderr}");
    assert!(through.stderr.ends_with(&alone.stderr), "the command's stderr follows unchanged");
}

#[test]
fn exec_dies_of_the_same_signal() {
    use std::os::unix::process::ExitStatusExt;
    let through =
        wrapped(std::path::Path::new("/nonexistent/madeira.sock"), "x", &["/bin/sh", "-c", "kill -TERM $$"]);
    assert_eq!(through.status.signal(), Some(libc::SIGTERM));
}

#[tokio::test]
async fn a_missed_cron_instant_of_an_observed_flow_is_audited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_with(&dir.path().join("data"), &[]);
    dev.put_flow(
        "flow: watched\nobserve: true\ntriggers:\n  - cron: \"*/2 * * * * *\"\n    grace: 1s\nnodes:\n  watched: {run: {sidecar: {group: cron, job: watched}}}\n",
    )
    .await;
    let audit = wait_until(Duration::from_secs(15), "a missed run audited", async || {
        let (_, audit) = dev.get("/audit?limit=20").await;
        if audit.to_string().contains("missed_run") { Ok(audit) } else { Err(audit.to_string()) }
    })
    .await;
    assert!(audit.to_string().contains("did not start within its grace"), "{audit}");
}

#[tokio::test]
async fn missed_runs_raise_one_warning_that_the_next_successful_run_resolves() {
    let hook = crate::webhook::Webhook::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = hook.dev(dir.path(), "1s");
    let data = dir.path().join("data");
    dev.put_flow(
        "flow: watched\nobserve: true\ntriggers:\n  - cron: \"*/2 * * * * *\"\n    grace: 1s\nnodes:\n  watched: {run: {sidecar: {group: cron, job: watched}}}\n",
    )
    .await;
    let missed =
        |kind: &str| hook.alerts(kind, |a| a["alertname"] == "MadeiraMissedRun" && a["flow"] == "watched");
    crate::sidecar::wait_for("a missed-run warning", 20, || !missed("firing").is_empty()).await;
    let warning = &missed("firing")[0];
    assert_eq!(warning["severity"], "warning");
    assert!(
        warning["summary"].as_str().is_some_and(|s| s.contains("did not start within its grace")),
        "{warning}"
    );

    // The job runs (wrapped) and succeeds: the warning resolves, and only one was sent.
    let ok = wrapped(&data.join("sidecar.sock"), "watched", &["/bin/true"]);
    assert_eq!(ok.status.code(), Some(0));
    crate::sidecar::wait_for("the warning resolved by a successful run", 20, || {
        !missed("resolved").is_empty()
    })
    .await;
    // Misses go on every 2 s after that (nothing else runs the job): count the
    // warnings sent before the first `resolved`.
    let hits = hook.bodies();
    let resolved_at = hits.iter().position(|b| b["kind"] == "resolved").expect("a resolved message");
    let ids: std::collections::BTreeSet<&str> = hits[..resolved_at]
        .iter()
        .flat_map(|b| b["alerts"].as_array().into_iter().flatten())
        .filter(|a| a["alertname"] == "MadeiraMissedRun")
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 1, "misses every 2 s are one warning until a run succeeds");
}

#[tokio::test]
async fn missed_run_detection_starts_at_the_flows_first_apply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_with(&dir.path().join("data"), &[]);
    // Let the checker run for a while before the flow exists: ticks of that time are not misses
    // (a window of time, not a wait for a condition).
    tokio::time::sleep(Duration::from_secs(4)).await;
    dev.put_flow(
        "flow: late-import\nobserve: true\ntriggers:\n  - cron: \"* * * * * *\"\n    grace: 1s\nnodes:\n  late_import: {run: {sidecar: {group: cron, job: late-import}}}\n",
    )
    .await;
    let (_, versions) = dev.get("/flows/late-import/versions").await;
    let applied =
        chrono::DateTime::parse_from_rfc3339(versions["versions"][0]["created_at"].as_str().expect("time"))
            .expect("rfc3339");
    let misses = wait_until(Duration::from_secs(15), "missed runs after the apply", async || {
        let (_, audit) = dev.get("/audit?limit=100").await;
        let misses: Vec<serde_json::Value> = audit["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .filter(|e| e["action"] == "missed_run" && e["details"]["flow"] == "late-import")
            .cloned()
            .collect();
        if misses.len() >= 2 { Ok(misses) } else { Err(audit.to_string()) }
    })
    .await;
    for miss in &misses {
        let at = chrono::DateTime::parse_from_rfc3339(miss["details"]["scheduled_at"].as_str().expect("at"))
            .expect("rfc3339");
        assert!(
            at >= applied,
            "a tick from before the flow existed counted as missed: {miss} (applied {applied})"
        );
    }
}
