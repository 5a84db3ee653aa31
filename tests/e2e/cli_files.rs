//! Files the CLI is given (issue 13): a FIFO or a device is refused at once, not
//! waited on or read until memory runs out; a symlink leaving the directory is
//! reported and not followed, so its target's lines never reach the output.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{BIN, try_wait_blocking};

/// Runs the CLI with `args`, killing it (and failing) if it is not done in 10 s.
fn run(args: &[&str], extra: &[&Path]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .args(extra)
        .env_remove("MADEIRA_SERVER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the CLI");
    if try_wait_blocking(Duration::from_secs(10), || child.try_wait().expect("wait")).is_none() {
        let _ = child.kill();
        panic!("madeira {args:?} {extra:?} still runs after 10 s");
    }
    child.wait_with_output().expect("output")
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.display().to_string()).expect("path");
    // SAFETY: mkfifo(3) on a NUL-terminated path in our temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn fifos_and_devices_are_refused_at_once_by_every_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("crontab");
    mkfifo(&fifo);
    let zero = Path::new("/dev/zero");
    let cases: [(&[&str], &Path); 6] = [
        (&["crontab", "import"], &fifo),
        (&["crontab", "import"], zero),
        (&["validate"], &fifo),
        (&["validate"], zero),
        (&["apply", "--server", "http://127.0.0.1:9", "-f"], zero),
        (&["serve", "--config"], &fifo),
    ];
    for (args, path) in cases {
        let out = run(args, &[path]);
        let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!out.status.success(), "{args:?} {path:?}: {all}");
        assert!(all.contains("not a regular file"), "{args:?} {path:?}: {all}");
        assert!(all.contains(&path.display().to_string()), "names the path: {all}");
    }
    let out = run(&["serve", "--config"], &[&fifo]);
    assert_eq!(out.status.code(), Some(64), "a bad config file exits 64");
}

#[test]
fn symlinks_out_of_the_directory_are_reported_not_followed() {
    let outside = tempfile::tempdir().expect("tempdir");
    let shadow = outside.path().join("shadow");
    std::fs::write(&shadow, "root:$6$very-secret-hash:19000:0:99999:7:::\n").expect("write");
    let dir = tempfile::tempdir().expect("tempdir");
    let crond = dir.path().join("cron.d");
    std::fs::create_dir_all(&crond).expect("mkdir");
    std::fs::write(crond.join("web"), "0 4 * * * root /usr/sbin/logrotate /etc/logrotate.conf\n")
        .expect("web");
    std::os::unix::fs::symlink(&shadow, crond.join("evil")).expect("symlink");

    let out = run(&["crontab", "import"], &[&crond]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cron.d/evil:1: warning: skipped: a symlink to"), "{stderr}");
    assert!(stderr.contains("not followed"), "{stderr}");
    assert!(stdout.contains("flow: logrotate"), "the real file is imported: {stdout}");
    assert!(!stdout.contains("very-secret") && !stderr.contains("very-secret"), "target's lines leaked");

    // Named directly, the link is refused too: it leaves its own directory.
    let out = run(&["crontab", "import"], &[&crond.join("evil")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("not followed"), "{stderr}");
    assert!(!stderr.contains("very-secret"), "{stderr}");
}
