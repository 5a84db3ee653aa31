//! Runner tests with real processes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::{JobConfig, SidecarConfig};

fn job(command: &[&str], timeout: Option<&str>, grace: &str) -> JobSpec {
    job_as(command, timeout, grace, None)
}

fn job_as(command: &[&str], timeout: Option<&str>, grace: &str, user: Option<&str>) -> JobSpec {
    let mut config = SidecarConfig::default();
    config.jobs.insert(
        "j".into(),
        JobConfig {
            command: command.iter().map(|s| s.to_string()).collect(),
            workdir: None,
            env: BTreeMap::from([("JOB_ENV".to_string(), "yes".to_string())]),
            clear_env: false,
            user: user.map(str::to_string),
            stdin: None,
            timeout: timeout.map(str::to_string),
            grace: Some(grace.to_string()),
            max_concurrency: None,
        },
    );
    config.jobs("test").expect("valid job").remove("j").expect("job j")
}

fn attempt() -> Attempt {
    Attempt {
        assignment_id: "a-1".into(),
        run_id: "run-1".into(),
        flow: "f".into(),
        node: "n".into(),
        attempt: 2,
        idempotency_key: "run-1:n:v1".into(),
        input: json!({"params": {"date": "2026-11-30 x;y"}, "nodes": {"up": {"status": "SUCCESS", "outputs": {"k": 1}, "data_version": 1}}}),
        timeout: None,
        traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
        shard: Some((1, 4)),
        no_retry_exit_codes: vec![3],
    }
}

async fn run_in(dir: &Path, job: &JobSpec, attempt: &Attempt, cancel: CancellationToken) -> Outcome {
    let ctx = RunCtx { work_root: dir, hide_env: &[], log_sink: None, on_spawn: None, keep_dir: false };
    run(job, attempt, ctx, cancel).await
}

#[tokio::test]
async fn hands_the_spec_environment_and_reads_outputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = r#"
printf '{"trace":"%s","key":"%s","shard":"%s/%s","attempt":"%s","env":"%s","arg":"%s","input":%s}' \
  "$TRACEPARENT" "$MADEIRA_IDEMPOTENCY_KEY" "$MADEIRA_SHARD_INDEX" "$MADEIRA_SHARD_TOTAL" \
  "$MADEIRA_ATTEMPT" "$JOB_ENV" "$1" "$(cat "$MADEIRA_INPUT_FILE")" > "$MADEIRA_OUTPUT_FILE"
echo to-stdout; echo to-stderr >&2
"#;
    let job = job(&["/bin/sh", "-c", script, "sh", "{{ params.date }}"], None, "1s");
    let out = run_in(dir.path(), &job, &attempt(), CancellationToken::new()).await;
    assert_eq!(out.status, Status::Success, "{}", out.error);
    assert_eq!(out.outputs["trace"], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    assert_eq!(out.outputs["key"], "run-1:n:v1");
    assert_eq!(out.outputs["shard"], "1/4");
    assert_eq!(out.outputs["attempt"], "2");
    assert_eq!(out.outputs["env"], "yes");
    assert_eq!(out.outputs["arg"], "2026-11-30 x;y", "a templated value is one argument");
    assert_eq!(out.outputs["input"]["nodes"]["up"]["outputs"]["k"], 1);
    let log = String::from_utf8_lossy(&out.log_tail);
    assert!(log.contains("to-stdout") && log.contains("to-stderr"), "{log}");
    assert_left_only_spares(dir.path());
}

/// The work root holds no attempt directory any more, only empty spares.
fn assert_left_only_spares(root: &Path) {
    for entry in std::fs::read_dir(root).expect("work root") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name").to_string_lossy().to_string();
        assert!(name.starts_with(".spare-"), "attempt dir {name} left behind");
        let entries: Vec<String> = std::fs::read_dir(&path)
            .expect("spare")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        assert!(
            entries.iter().all(|e| e == "input.json"),
            "spare {name} holds more than its input: {entries:?}"
        );
    }
}

/// An attempt's directory is emptied and kept for the next attempt, which finds it
/// as a new one: empty but for its own input, 0700, with no output of the last job.
#[tokio::test]
async fn a_recycled_attempt_directory_is_empty_and_private() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    let first = r#"
d=$(dirname "$MADEIRA_INPUT_FILE")
echo '{"left": true}' > "$MADEIRA_OUTPUT_FILE"
mkdir -p "$d/sub/deeper" && echo x > "$d/sub/deeper/file" && echo y > "$d/stray"
ln -s /etc/hostname "$d/link"; chmod 755 "$d"
"#;
    let out =
        run_in(&work, &job(&["/bin/sh", "-c", first], None, "1s"), &attempt(), CancellationToken::new())
            .await;
    assert_eq!((out.status, out.outputs["left"].clone()), (Status::Success, json!(true)), "{}", out.error);
    assert_eq!(workdir::spare_count(&work), 1, "the directory is kept");
    assert_left_only_spares(&work);
    assert!(Path::new("/etc/hostname").exists(), "a link in the directory is removed, not followed");

    let second = r#"
d=$(dirname "$MADEIRA_INPUT_FILE")
printf '{"entries":"%s","mode":"%s","output_there":"%s"}' "$(ls -A "$d" | tr '\n' ' ')" \
  "$(stat -c %a "$d")" "$(test -e "$MADEIRA_OUTPUT_FILE.tmp" -o -e "$MADEIRA_OUTPUT_FILE" && echo yes || echo no)" > "$d/out.tmp"
mv "$d/out.tmp" "$MADEIRA_OUTPUT_FILE"
"#;
    let next = Attempt { assignment_id: "a-2".into(), ..attempt() };
    let out =
        run_in(&work, &job(&["/bin/sh", "-c", second], None, "1s"), &next, CancellationToken::new()).await;
    assert_eq!(out.status, Status::Success, "{}", out.error);
    assert_eq!(out.outputs["entries"], "input.json ", "only its own input");
    assert_eq!(out.outputs["mode"], "700");
    assert_eq!(out.outputs["output_there"], "no", "the last job's output is gone");
    assert_eq!(workdir::spare_count(&work), 1, "taken, then kept again");
    assert_left_only_spares(&work);
}

/// The input file a recycled directory keeps is written over: a shorter input
/// leaves nothing of the longer one before it; one with another name (a hard
/// link a job made) is not kept.
#[tokio::test]
async fn a_kept_input_file_holds_exactly_the_next_input_and_a_linked_one_is_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    let echo = job(&["/bin/sh", "-c", r#"cp "$MADEIRA_INPUT_FILE" "$MADEIRA_OUTPUT_FILE""#], None, "1s");
    let long = Attempt { input: json!({"params": {"text": "x".repeat(5000)}}), ..attempt() };
    let out = run_in(&work, &echo, &long, CancellationToken::new()).await;
    assert_eq!(out.outputs["params"]["text"].as_str().map(str::len), Some(5000), "{}", out.error);
    let short = Attempt { assignment_id: "a-2".into(), input: json!({"params": {"n": 1}}), ..attempt() };
    let out = run_in(&work, &echo, &short, CancellationToken::new()).await;
    assert_eq!(serde_json::Value::Object(out.outputs), json!({"params": {"n": 1}}), "{}", out.error);

    let link = job(
        &["/bin/sh", "-c", r#"ln "$MADEIRA_INPUT_FILE" "$(dirname "$MADEIRA_INPUT_FILE")/../linked""#],
        None,
        "1s",
    );
    let third = Attempt { assignment_id: "a-3".into(), ..attempt() };
    let out = run_in(&work, &link, &third, CancellationToken::new()).await;
    assert_eq!(out.status, Status::Success, "{}", out.error);
    std::fs::remove_file(work.join("linked")).expect("the job's link");
    assert_left_only_spares(&work);
    let spares: Vec<_> =
        std::fs::read_dir(&work).expect("work").flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    assert!(
        spares.iter().all(|s| !s.join("input.json").exists()),
        "an input file with a second name is removed, not kept: {spares:?}"
    );
}

/// Spares an earlier process left are removed when the sidecar starts.
#[test]
fn spares_of_an_earlier_process_are_removed_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spare = dir.path().join(".spare-1-7");
    std::fs::create_dir_all(spare.join("sub")).expect("spare");
    std::fs::write(spare.join("sub/f"), b"x").expect("file");
    let attempt_dir = dir.path().join("a-9");
    std::fs::create_dir(&attempt_dir).expect("attempt dir");
    clear_spares(dir.path());
    assert!(!spare.exists(), "the spare is removed");
    assert!(attempt_dir.exists(), "an attempt's directory is not a spare");
}

#[tokio::test]
async fn exit_codes_are_classified() {
    let dir = tempfile::tempdir().expect("tempdir");
    let no_retry = run_in(
        dir.path(),
        &job(&["/bin/sh", "-c", "exit 3"], None, "1s"),
        &attempt(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!((no_retry.status, no_retry.exit_code), (Status::Failed, Some(3)));
    let retry = run_in(
        dir.path(),
        &job(&["/bin/sh", "-c", "exit 4"], None, "1s"),
        &attempt(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!((retry.status, retry.exit_code), (Status::Retryable, Some(4)));
    let missing =
        run_in(dir.path(), &job(&["/nonexistent/prog"], None, "1s"), &attempt(), CancellationToken::new())
            .await;
    assert_eq!(missing.status, Status::Failed);
    let bad_output = run_in(
        dir.path(),
        &job(&["/bin/sh", "-c", "echo '[1]' > $MADEIRA_OUTPUT_FILE"], None, "1s"),
        &attempt(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(bad_output.status, Status::Failed, "{}", bad_output.error);
}

#[tokio::test]
async fn an_output_file_that_is_a_symlink_a_hard_link_or_a_fifo_fails_the_attempt_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("secret.json");
    std::fs::write(&secret, r#"{"password": "hunter2"}"#).expect("secret");
    let secret = secret.display();
    for (script, why) in [
        (format!("ln -sf {secret} \"$MADEIRA_OUTPUT_FILE\""), "symbolic link"),
        (format!("ln -f {secret} \"$MADEIRA_OUTPUT_FILE\""), "hard links"),
        ("mkfifo \"$MADEIRA_OUTPUT_FILE\"".to_string(), "not a regular file"),
    ] {
        let job = job(&["/bin/sh", "-c", &script], None, "1s");
        let out = tokio::time::timeout(
            Duration::from_secs(10),
            run_in(dir.path(), &job, &attempt(), CancellationToken::new()),
        )
        .await
        .expect("the output file is not waited on");
        assert_eq!(out.status, Status::Failed, "{script}: {}", out.error);
        assert!(out.error.contains(why), "{script}: {}", out.error);
        assert!(out.outputs.is_empty(), "{script}: nothing read: {:?}", out.outputs);
    }
}

#[tokio::test]
async fn a_job_with_a_user_runs_as_that_user_and_reads_the_input_handed_to_it() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: switching to another user needs root"
        );
        eprintln!("skipping: switching to another user needs root");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // As the sidecar makes its work root when a job switches user: others may pass, not list.
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o711)).expect("chmod");
    let script = r#"printf '{"uid":"%s","input":%s}' "$(id -u)" "$(cat "$MADEIRA_INPUT_FILE")" > "$MADEIRA_OUTPUT_FILE""#;
    let job = job_as(&["/bin/sh", "-c", script], None, "1s", Some("nobody"));
    let out = run_in(dir.path(), &job, &attempt(), CancellationToken::new()).await;
    assert_eq!(out.status, Status::Success, "{}", out.error);
    assert_eq!(out.outputs["uid"], "65534", "ran as nobody");
    assert_eq!(
        out.outputs["input"]["params"]["date"], "2026-11-30 x;y",
        "the input file was the job's to read"
    );
}

fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_some_and(|s| s != "Z")
        }
        Err(_) => false,
    }
}

async fn wait_for_file(path: &Path, deadline: Duration) -> String {
    let end = Instant::now() + deadline;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(Instant::now() < end, "{} never appeared", path.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_job_ignoring_sigterm_is_killed_after_grace_with_its_grandchild() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    let script = format!(
        "trap '' TERM; (trap '' TERM; sleep 600) & echo $! > {p}.tmp; mv {p}.tmp {p}; echo >> {p}; sleep 600",
        p = pids.display()
    );
    let job = job(&["/bin/sh", "-c", &script], Some("500ms"), "300ms");
    let work = dir.path().join("work");
    let started = Instant::now();
    let out = run_in(&work, &job, &attempt(), CancellationToken::new()).await;
    let elapsed = started.elapsed();
    assert_eq!(out.status, Status::Retryable);
    assert!(out.error.contains("timed out"), "{}", out.error);
    assert!(String::from_utf8_lossy(&out.log_tail).contains("SIGKILL"), "killed after grace");
    assert!(elapsed >= Duration::from_millis(800), "waited the grace: {elapsed:?}");
    let grandchild: u32 = wait_for_file(&pids, Duration::from_secs(1)).await.trim().parse().expect("pid");
    assert!(!running(grandchild), "grandchild {grandchild} still runs");
}

#[tokio::test]
async fn a_cooperative_job_stops_on_sigterm_and_cancel_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let job = job(&["/bin/sh", "-c", "echo started; sleep 600"], None, "10s");
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let out = run_in(dir.path(), &job, &attempt(), cancel).await;
    assert!(out.cancelled);
    assert!(started.elapsed() < Duration::from_secs(5), "sh exits on SIGTERM, no need for the grace");
    assert!(!String::from_utf8_lossy(&out.log_tail).contains("SIGKILL"));
}

#[tokio::test]
async fn leftover_processes_of_a_finished_job_are_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    let script =
        format!("sleep 600 & echo $! > {p}.tmp; mv {p}.tmp {p}; echo >> {p}; exit 0", p = pids.display());
    let out = run_in(
        &dir.path().join("w"),
        &job(&["/bin/sh", "-c", &script], None, "1s"),
        &attempt(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(out.status, Status::Success, "{}", out.error);
    let child: u32 = wait_for_file(&pids, Duration::from_secs(1)).await.trim().parse().expect("pid");
    assert!(!running(child), "background child {child} still runs");
}

#[tokio::test]
async fn stdin_text_is_fed_to_the_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut job = job(&["/bin/sh", "-c", "cat > \"$MADEIRA_OUTPUT_FILE\""], None, "1s");
    job.stdin = Some("{\"from\": \"stdin\"}".into());
    let out = run_in(dir.path(), &job, &attempt(), CancellationToken::new()).await;
    assert_eq!(out.status, Status::Success, "{}", out.error);
    assert_eq!(out.outputs["from"], "stdin");
}

/// stdout and stderr share one pipe: the log keeps the order the job wrote its
/// lines in, every time (two pipes read by two tasks swapped them about one run in three).
#[tokio::test]
async fn stdout_and_stderr_keep_the_order_they_were_written_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = "for i in 1 2 3 4 5 6 7 8; do echo out$i; echo err$i >&2; done";
    let expected: String = (1..=8).map(|i| format!("out{i}\nerr{i}\n")).collect();
    for _ in 0..20 {
        let out = run_in(
            dir.path(),
            &job(&["/bin/sh", "-c", script], None, "1s"),
            &attempt(),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(out.status, Status::Success, "{}", out.error);
        assert_eq!(String::from_utf8_lossy(&out.log_tail), expected);
    }
}

/// A failure message carries the job's last lines (bounded), with the values of
/// its secret-looking env vars masked: an alert tells why, not only `exit code 2`.
#[tokio::test]
async fn a_failure_names_the_last_lines_with_secrets_masked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut job =
        job(&["/bin/sh", "-c", "seq 1 9; echo \"login with $DB_PASSWORD refused\" >&2; exit 2"], None, "1s");
    job.env.insert("DB_PASSWORD".into(), "hunter2-secret".into());
    let out = run_in(dir.path(), &job, &attempt(), CancellationToken::new()).await;
    assert_eq!(out.status, Status::Retryable);
    assert_eq!(out.error, "exit code 2\nlast output:\n  6\n  7\n  8\n  9\n  login with *** refused");
    let ok = run_in(
        dir.path(),
        &self::job(&["/bin/sh", "-c", "echo fine"], None, "1s"),
        &attempt(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(ok.error, "", "a success carries no message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_jobs_at_once_short_and_long_are_each_reaped_with_their_own_code() {
    // Ten at once: more than the blocking waiters (`reap.rs`), some ending within
    // their fast wait and some after it, through the runtime's poller.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut jobs = tokio::task::JoinSet::new();
    for i in 0..10u32 {
        let root = dir.path().to_path_buf();
        let pause = ["0", "0.01", "0.2", "0.35"][i as usize % 4];
        let job = job(&["/bin/sh", "-c", &format!("sleep {pause}; exit {}", 10 + i)], None, "1s");
        let attempt = Attempt { assignment_id: format!("many-{i}"), ..attempt() };
        jobs.spawn(async move { (i, run_in(&root, &job, &attempt, CancellationToken::new()).await) });
    }
    let mut seen = Vec::new();
    while let Some(done) = jobs.join_next().await {
        let (i, outcome) = done.expect("job task");
        assert_eq!(outcome.exit_code, Some(10 + i as i32), "job {i}: {}", outcome.error);
        seen.push(i);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}
