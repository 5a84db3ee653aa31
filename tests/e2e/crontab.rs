//! `madeira crontab import` on an /etc/cron.d-style directory: flows that
//! validate, a jobs config, rewritten lines that run (as cron would run them) and
//! report through the sidecar, and every line it could not translate reported.

use std::process::Command;
use std::time::Duration;

use crate::support::{BIN, Dev, wait_until};

const WEB: &str = "# web jobs\nSHELL=/bin/sh\nMAILTO=root\n*/10 * * * * www-data /usr/bin/php /var/www/cron.php\n0 4 * * 0 root /usr/sbin/logrotate /etc/logrotate.conf\n61 * * * * root /opt/bad-minute.sh\n";
const BILLING: &str = "API_TOKEN=abcdef0123456789\n30 1 * * * billing printf 'settled \\%s' \"$API_TOKEN\" > /dev/null%stdin text\n#15 2 * * * billing /opt/old.sh\n";

#[tokio::test]
async fn imports_a_cron_d_directory_with_nothing_dropped_silently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let crond = dir.path().join("cron.d");
    std::fs::create_dir_all(&crond).expect("mkdir");
    std::fs::write(crond.join("web"), WEB).expect("web");
    std::fs::write(crond.join("billing"), BILLING).expect("billing");
    std::fs::write(crond.join("billing~"), BILLING).expect("backup file");
    let out = Command::new(BIN).args(["crontab", "import"]).arg(&crond).output().expect("run import");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "an untranslated line makes it exit 1\n{stderr}");
    assert!(stderr.contains("cron.d/web:6: error: not translated"), "{stderr}");
    assert!(stderr.contains("cron.d/billing~:1: warning: skipped"), "{stderr}");
    assert!(stderr.contains("cron.d/billing:3: info: commented-out job"), "{stderr}");
    assert!(stderr.contains("API_TOKEN looks like a secret"), "{stderr}");
    assert!(!stdout.contains("abcdef0123456789") && !stderr.contains("abcdef0123456789"), "secret echoed");
    assert!(stdout.contains("61 * * * * root /opt/bad-minute.sh"), "untranslated line kept");
    assert!(
        stdout.contains("flow: cron")
            && stdout.contains("flow: logrotate-conf")
            && stdout.contains("flow: printf-settled"),
        "flows are named after the script, else the program and its first argument\n{stdout}"
    );

    let written = dir.path().join("out");
    let out = Command::new(BIN)
        .args(["crontab", "import", "--out"])
        .arg(&written)
        .arg(&crond)
        .output()
        .expect("import --out");
    assert_eq!(out.status.code(), Some(1));
    let flows: Vec<_> =
        std::fs::read_dir(written.join("flows")).expect("flows").flatten().map(|e| e.path()).collect();
    assert_eq!(flows.len(), 3);
    let valid = Command::new(BIN).arg("validate").args(&flows).output().expect("validate");
    assert!(valid.status.success(), "{}", String::from_utf8_lossy(&valid.stdout));
    let jobs = std::fs::read_to_string(written.join("sidecar-jobs.yaml")).expect("jobs");
    assert!(jobs.contains("user: \"www-data\"") && jobs.contains("stdin: \"stdin text\""), "{jobs}");
    let crontab = std::fs::read_to_string(written.join("crontab.billing")).expect("crontab");
    assert!(crontab.contains("API_TOKEN=abcdef0123456789"), "the installable crontab keeps the env line");

    // Run the rewritten billing line as cron would: `%` → stdin, `\%` → `%`, via sh -c.
    let data = dir.path().join("data");
    let dev = Dev::start_with(&data, &[]);
    let line = crontab.lines().find(|l| l.starts_with("30 1 * * * billing ")).expect("wrapped line");
    // The wrapped line names this binary by its absolute path (cron's PATH is /usr/bin:/bin).
    let command = line.splitn(7, ' ').nth(6).expect("command").to_string();
    let absolute = std::fs::canonicalize(BIN).expect("binary path");
    assert!(command.starts_with(&format!("{} exec ", absolute.display())), "{command}");
    let (command, stdin) = cron_split(&command);
    let mut child = Command::new("/bin/sh")
        .args(["-c", &command])
        .env("MADEIRA_SIDECAR", data.join("sidecar.sock"))
        .env("API_TOKEN", "x")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run the wrapped line");
    use std::io::Write;
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    let done = child.wait_with_output().expect("wait");
    assert!(done.status.success(), "{done:?}");
    wait_until(Duration::from_secs(30), "the wrapped run recorded", async || {
        let (_, runs) = dev.get("/runs?flow=printf-settled").await;
        if runs["runs"][0]["status"] == "SUCCESS" { Ok(()) } else { Err(runs.to_string()) }
    })
    .await;
}

/// Cron's reading of a command: `\%` is `%`, the first `%` starts stdin, later ones are newlines.
fn cron_split(raw: &str) -> (String, String) {
    let mut parts: Vec<String> = vec![String::new()];
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'%') => {
                parts.last_mut().expect("part").push('%');
                chars.next();
            }
            '%' => parts.push(String::new()),
            c => parts.last_mut().expect("part").push(c),
        }
    }
    let command = parts.remove(0);
    (command, parts.join("\n"))
}

const MIDNIGHT: &str = "0 0 * * * /opt/bin/backup-db.sh\n0 0 * * * /opt/bin/vacuum.sh\n@daily /opt/bin/report.sh\n0 0 * * * /opt/bin/rotate.sh\n30 2 * * * /opt/bin/late.sh\n";

#[test]
fn a_stampede_is_reported_and_jitter_spreads_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let crontab = dir.path().join("crontab");
    std::fs::write(&crontab, MIDNIGHT).expect("crontab");
    let out = Command::new(BIN).args(["crontab", "import"]).arg(&crontab).output().expect("run import");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "crontab:1: warning: stampede: 4 jobs start at Mon 00:00 UTC (7 time(s) a week): backup-db, vacuum, report, rotate; spread them with `--jitter 10m`"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("late"), "a job alone at its minute is no stampede: {stderr}");

    let out = Command::new(BIN)
        .args(["crontab", "import", "--jitter", "20m", "--output", "json"])
        .arg(&crontab)
        .output()
        .expect("run import");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let import: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let text = import["crontabs"][0]["text"].as_str().expect("crontab text");
    let starts: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" exec --job "))
        .map(|l| l.split(" /").next().unwrap_or(l))
        .collect();
    assert_eq!(starts, ["0 0 * * *", "5 0 * * *", "10 0 * * *", "15 0 * * *", "30 2 * * *"], "{text}");
    let report = import["flows"].as_array().expect("flows");
    assert!(
        report.iter().any(|f| f["yaml"].as_str().unwrap_or_default().contains("15 0 * * *")),
        "{report:?}"
    );
    let notes = import["report"].to_string();
    assert!(notes.contains("--jitter: `@daily` now starts at `10 0 * * *`"), "{notes}");
    assert!(notes.contains("spread over 20m (--jitter)"), "{notes}");
}

/// `madeira promote` / `madeira demote` on an imported crontab: the observe flow
/// becomes governed (its cron trigger, the imported sidecar job running it), the
/// crontab line is commented out (`--write` keeps a `.bak`), and demote restores
/// both, each step audited.
#[tokio::test]
async fn promote_and_demote_round_trip_on_an_imported_crontab() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tab = dir.path().join("tab");
    std::fs::write(&tab, "SHELL=/bin/sh\n17 3 * * * /bin/echo promoted-run\n").expect("crontab");
    let out_dir = dir.path().join("out");
    let out = Command::new(BIN)
        .args(["crontab", "import", "--group", "local", "--out"])
        .arg(&out_dir)
        .arg(&tab)
        .output()
        .expect("import");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let jobs = out_dir.join("sidecar-jobs.yaml");
    let dev = Dev::start_with(&dir.path().join("data"), &["--jobs", jobs.to_str().expect("path")]);
    let out = dev.cli(&["apply", "-f", out_dir.join("flows").to_str().expect("path")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, flow) = dev.get("/flows/echo-promoted-run").await;
    assert_eq!(flow["observe"], true, "{flow}");
    let crontab = out_dir.join("crontab.tab");
    let original = std::fs::read_to_string(&crontab).expect("rewritten crontab");
    let path = crontab.to_str().expect("path");

    // Printed: the line commented out on stdout, the file untouched.
    let out = dev.cli(&["promote", "echo-promoted-run", "--crontab", path]);
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = original.lines().find(|l| l.starts_with("17 3 * * * ")).expect("wrapped line");
    assert!(
        printed.contains(&format!(
            "# madeira: promoted to flow echo-promoted-run (`madeira demote echo-promoted-run` restores this line): {line}"
        )),
        "{printed}"
    );
    assert!(!printed.lines().any(|l| l == line), "the line still runs from cron: {printed}");
    assert_eq!(std::fs::read_to_string(&crontab).expect("read"), original);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains("warning"), "the dev sidecar declares the imported job: {said}");
    // Written: the same edit in place, the old content in .bak; promoting again changes nothing.
    let out = dev.cli(&["promote", "echo-promoted-run", "--crontab", path, "--write", "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (&answer["observe"], &answer["changed"], &answer["crontab"]["written"]),
        (&false.into(), &false.into(), &true.into())
    );
    assert_eq!(std::fs::read_to_string(format!("{path}.bak")).expect("backup"), original);
    assert_eq!(std::fs::read_to_string(&crontab).expect("read"), printed);
    let (_, flow) = dev.get("/flows/echo-promoted-run").await;
    assert_eq!(
        (&flow["observe"], &flow["triggers"][0]["cron"]),
        (&false.into(), &"17 3 * * *".into()),
        "{flow}"
    );
    assert!(flow["triggers"][0]["next_run"].is_string(), "{flow}");

    // Governed: dispatched to the sidecar job the import declared.
    let out = dev.cli(&["run", "echo-promoted-run", "--wait", "--output", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let (_, logs) =
        dev.get(&format!("/runs/{}/nodes/echo-promoted-run/logs", run["run_id"].as_str().expect("id"))).await;
    assert!(logs.to_string().contains("promoted-run"), "{logs}");

    let out = dev.cli(&["demote", "echo-promoted-run", "--crontab", path, "--write"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&crontab).expect("read"), original, "demote restores the line");
    let (_, flow) = dev.get("/flows/echo-promoted-run").await;
    assert_eq!((&flow["observe"], &flow["version"]), (&true.into(), &3.into()), "{flow}");
    let out = dev.cli(&["run", "echo-promoted-run"]);
    assert!(!out.status.success(), "an observe flow is never dispatched");
    let (_, audit) = dev.get("/audit?limit=50").await;
    let actions: Vec<(&str, &str)> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| (e["action"].as_str().unwrap_or(""), e["actor"].as_str().unwrap_or("")))
        .collect();
    assert!(actions.contains(&("promote", "local")) && actions.contains(&("demote", "local")), "{actions:?}");
    let out = dev.cli(&["demote", "echo-promoted-run", "--crontab", path]);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("no line of this crontab was promoted")
    );
}
