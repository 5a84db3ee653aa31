//! Import of a realistic user crontab and of /etc/cron.d-style system files.

use std::path::Path;

use super::emit::{Import, ImportOptions, derive_name, is_secret};

fn options() -> ImportOptions {
    ImportOptions {
        group: "cron".into(),
        grace: "10m".into(),
        madeira: "/usr/local/bin/madeira".into(),
        sidecar: "/var/lib/madeira/spool/sidecar.sock".into(),
        timezone: "UTC".into(),
    }
}

const USER_CRONTAB: &str = r#"# m h  dom mon dow   command
SHELL=/bin/bash
PATH=/usr/local/bin:/usr/bin:/bin
MAILTO=ops@example.com
CRON_TZ=Asia/Shanghai
DB_PASSWORD=hunter2-very-secret

# nightly
30 2 * * * cd /opt/billing && ./settle.sh --date "$(date +\%F)" >> /var/log/settle.log 2>&1
*/15 9-18 * * 1-5 /opt/bin/sync-stock.py
@daily /usr/bin/find /tmp -mtime +7 -delete
@reboot /opt/bin/warmup.sh
0 8 * * * /usr/bin/mail -s "report" boss@example.com%Hello,%the report is attached.%
#0 3 * * * /opt/bin/old-job.sh
0 3 * * 9 /opt/bin/bad-weekday.sh
0 3 * *
"#;

#[test]
fn a_realistic_user_crontab_is_translated_with_nothing_dropped() {
    let mut import = Import::new(options());
    import.add_file(Path::new("/var/spool/cron/crontabs/billing"), USER_CRONTAB, false);
    let names: Vec<&str> = import.flows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["settle", "sync-stock", "find-tmp", "warmup", "mail-report"]);
    for (name, yaml) in &import.flows {
        let flow = madeira_core::spec::parse_flow(name, yaml).expect("generated flows validate");
        assert!(flow.observe);
    }
    assert!(import.flows[0].1.contains("timezone: Asia/Shanghai"), "{}", import.flows[0].1);
    assert!(import.flows[0].1.contains("grace: 10m"));
    assert!(!import.flows[3].1.contains("cron:"), "@reboot has no schedule");

    let jobs = import.jobs_yaml();
    let config = madeira_sidecar::SidecarConfig::parse("jobs.yaml", &jobs).expect("jobs parse");
    let specs = config.jobs("jobs.yaml").expect("jobs validate");
    let settle = &config.jobs["settle"];
    assert_eq!(settle.command[0], "/bin/bash");
    assert_eq!(settle.command[1], "-c");
    assert_eq!(
        settle.command[2],
        r#"cd /opt/billing && ./settle.sh --date "$(date +%F)" >> /var/log/settle.log 2>&1"#
    );
    assert_eq!(settle.env["PATH"], "/usr/local/bin:/usr/bin:/bin");
    assert_eq!(settle.user.as_deref(), Some("billing"), "the crontab's owner");
    assert!(settle.clear_env);
    assert_eq!(config.jobs["mail-report"].stdin.as_deref(), Some("Hello,\nthe report is attached.\n"));
    assert_eq!(specs.len(), 5);

    let text = import.text();
    assert!(!text.contains("hunter2"), "secrets are not echoed");
    assert!(text.contains("DB_PASSWORD=<redacted>"));
    assert!(import.crontabs[0].with_secrets.contains("DB_PASSWORD=hunter2-very-secret"));
    let crontab = &import.crontabs[0].redacted;
    assert!(crontab.contains(
        r#"30 2 * * * /usr/local/bin/madeira exec --job settle -- /bin/bash -c 'cd /opt/billing && ./settle.sh --date "$(date +\%F)" >> /var/log/settle.log 2>&1'"#
    ), "{crontab}");
    assert!(crontab.contains(r#"exec --job mail-report -- /bin/bash -c '/usr/bin/mail -s "report" boss@example.com'%Hello,%the report is attached.%"#), "{crontab}");
    assert!(
        crontab.contains("# 0 3 * * * /usr/local/bin/madeira exec --job old-job"),
        "disabled job stays disabled"
    );
    assert!(crontab.contains("MADEIRA_SIDECAR=/var/lib/madeira/spool/sidecar.sock"));

    let report: Vec<String> = import.notes.iter().map(ToString::to_string).collect();
    let has = |needle: &str| report.iter().any(|n| n.contains(needle));
    assert!(has("billing:15: error: not translated"), "{report:#?}");
    assert!(has("billing:16: error: not translated"), "{report:#?}");
    assert!(has("billing:14: info: commented-out job"), "{report:#?}");
    assert!(has("billing:6: warning: DB_PASSWORD looks like a secret"), "{report:#?}");
    assert!(has("billing:4: info: MAILTO"), "{report:#?}");
    assert_eq!(import.untranslated(), 2);
    let every_line_kept =
        USER_CRONTAB.lines().filter(|l| l.starts_with("0 3 * *")).all(|l| crontab.contains(l));
    assert!(every_line_kept, "untranslated lines are kept as written");
}

#[test]
fn system_crontabs_carry_the_user_column() {
    let mut import = Import::new(options());
    let text = "SHELL=/bin/sh\n17 * * * * root cd / && run-parts --report /etc/cron.hourly\n25 6 * * * www-data /usr/bin/php /var/www/cron.php\n*/5 * * * * nobody\n";
    import.add_file(Path::new("/etc/cron.d/web"), text, true);
    assert_eq!(import.flows.len(), 2);
    let config = madeira_sidecar::SidecarConfig::parse("j", &import.jobs_yaml()).expect("jobs parse");
    assert_eq!(config.jobs["run-parts-cron-hourly"].user.as_deref(), Some("root"));
    assert_eq!(config.jobs["cron"].user.as_deref(), Some("www-data"));
    let crontab = &import.crontabs[0].redacted;
    assert!(crontab.contains("25 6 * * * www-data /usr/local/bin/madeira exec --job cron --"), "{crontab}");
    assert_eq!(import.untranslated(), 1, "{:?}", import.notes);
}

#[test]
fn names_and_secrets() {
    assert_eq!(derive_name("cd /opt/x && ./run-it.sh --now"), "run-it");
    assert_eq!(derive_name("nice -n 10 /usr/bin/backup_db.py"), "backup-db");
    assert_eq!(derive_name("FOO=1 /opt/0go"), "job-0go");
    assert_eq!(derive_name("/usr/bin/python3 -u /opt/jobs/report.py >> /var/log/r 2>&1"), "report");
    assert_eq!(derive_name("echo hi >> /tmp/x"), "echo-hi");
    assert_eq!(derive_name("run-parts /etc/cron.daily"), "run-parts-cron-daily");
    assert_eq!(derive_name("/usr/sbin/logrotate /etc/logrotate.conf"), "logrotate-conf");
    assert_eq!(derive_name("/opt/bin/sync"), "sync");
    assert!(is_secret("API_TOKEN", "x"));
    assert!(is_secret("DATABASE_URL", "postgres://u:pw@db/x"));
    assert!(!is_secret("PATH", "/usr/bin"));
}

#[test]
fn a_notice_repeated_over_lines_is_printed_once() {
    let mut import = Import::new(options());
    import.add_file(
        Path::new("/tmp/tab"),
        "1 * * * * /opt/a.sh\n2 * * * * /opt/b.sh\n3 * * * * /opt/c.sh\n",
        false,
    );
    let printed = super::grouped(&import.notes);
    let no_user: Vec<&String> = printed.iter().filter(|n| n.contains("no user known")).collect();
    assert_eq!(no_user.len(), 1, "{printed:#?}");
    assert!(
        no_user[0].starts_with("/tmp/tab:1: info:") && no_user[0].ends_with("(also lines 2, 3)"),
        "{printed:#?}"
    );
}
