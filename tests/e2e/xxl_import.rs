//! `madeira import xxl-job` against XXL-JOB tables in MariaDB (issue 38), both
//! schema generations, created by the test with XXL-JOB's column names: 2.3+
//! (`schedule_type`/`schedule_conf`/`misfire_strategy`) and the older `job_cron`.
//! A `child_jobid` chain becomes one flow with strong edges, a FIX_RATE job a
//! cron, a GLUE job and an unknown route are refused and listed, another app's
//! jobs are left out with `--app`, and what is written validates.

use std::path::Path;

use madeira_store::testing::MySqlTestDb;
use sqlx::{Connection, MySqlConnection};

const GROUP: &str = "CREATE TABLE xxl_job_group (id int(11) NOT NULL AUTO_INCREMENT, app_name varchar(64) NOT NULL, \
     title varchar(12) NOT NULL, address_type tinyint(4) NOT NULL DEFAULT '0', address_list text, \
     update_time datetime DEFAULT NULL, PRIMARY KEY (id))";

const INFO_NEW: &str = "CREATE TABLE xxl_job_info (id int(11) NOT NULL AUTO_INCREMENT, job_group int(11) NOT NULL, \
     job_desc varchar(255) NOT NULL, add_time datetime DEFAULT NULL, update_time datetime DEFAULT NULL, \
     author varchar(64) DEFAULT NULL, alarm_email varchar(255) DEFAULT NULL, \
     schedule_type varchar(50) NOT NULL DEFAULT 'NONE', schedule_conf varchar(128) DEFAULT NULL, \
     misfire_strategy varchar(50) NOT NULL DEFAULT 'DO_NOTHING', executor_route_strategy varchar(50) DEFAULT NULL, \
     executor_handler varchar(255) DEFAULT NULL, executor_param varchar(512) DEFAULT NULL, \
     executor_block_strategy varchar(50) DEFAULT NULL, executor_timeout int(11) NOT NULL DEFAULT '0', \
     executor_fail_retry_count int(11) NOT NULL DEFAULT '0', glue_type varchar(50) NOT NULL, glue_source mediumtext, \
     glue_remark varchar(128) DEFAULT NULL, glue_updatetime datetime DEFAULT NULL, child_jobid varchar(255) DEFAULT NULL, \
     trigger_status tinyint(4) NOT NULL DEFAULT '0', trigger_last_time bigint(13) NOT NULL DEFAULT '0', \
     trigger_next_time bigint(13) NOT NULL DEFAULT '0', PRIMARY KEY (id))";

const INFO_OLD: &str = "CREATE TABLE xxl_job_info (id int(11) NOT NULL AUTO_INCREMENT, job_group int(11) NOT NULL, \
     job_cron varchar(128) NOT NULL, job_desc varchar(255) NOT NULL, add_time datetime DEFAULT NULL, \
     update_time datetime DEFAULT NULL, author varchar(64) DEFAULT NULL, alarm_email varchar(255) DEFAULT NULL, \
     executor_route_strategy varchar(50) DEFAULT NULL, executor_handler varchar(255) DEFAULT NULL, \
     executor_param varchar(512) DEFAULT NULL, executor_block_strategy varchar(50) DEFAULT NULL, \
     executor_timeout int(11) NOT NULL DEFAULT '0', executor_fail_retry_count int(11) NOT NULL DEFAULT '0', \
     glue_type varchar(50) NOT NULL, glue_source mediumtext, glue_remark varchar(128) DEFAULT NULL, \
     glue_updatetime datetime DEFAULT NULL, child_jobid varchar(255) DEFAULT NULL, \
     trigger_status tinyint(4) NOT NULL DEFAULT '0', trigger_last_time bigint(13) NOT NULL DEFAULT '0', \
     trigger_next_time bigint(13) NOT NULL DEFAULT '0', PRIMARY KEY (id))";

async fn exec_all(url: &str, statements: &[&str]) {
    let mut conn = MySqlConnection::connect(url).await.expect("connect to the test database");
    for s in statements {
        sqlx::query(s).execute(&mut conn).await.unwrap_or_else(|e| panic!("{s}: {e}"));
    }
}

fn import(url: &str, out: &Path, app: &str) -> (i32, String) {
    let output = std::process::Command::new(crate::support::BIN)
        .args(["import", "xxl-job", "--from", url, "--app", app, "--out"])
        .arg(out)
        .output()
        .expect("run madeira import");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

fn read(dir: &Path, flow: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{flow}.yaml"))).unwrap_or_else(|e| panic!("{flow}.yaml: {e}"))
}

fn validates(dir: &Path) {
    let files = std::fs::read_dir(dir).expect("out dir").map(|e| e.expect("entry").path());
    let out = std::process::Command::new(crate::support::BIN)
        .arg("validate")
        .args(files)
        .output()
        .expect("validate");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn xxl_job_2_4_tables_import_chains_fix_rate_and_list_refusals() {
    let Some(db) = MySqlTestDb::create().await.expect("test database") else { return };
    exec_all(
        &db.url,
        &[
            GROUP,
            INFO_NEW,
            "INSERT INTO xxl_job_group (id, app_name, title) VALUES (1, 'order-service', 'orders'), (2, 'other-app', 'other')",
            "INSERT INTO xxl_job_info (id, job_group, job_desc, alarm_email, schedule_type, schedule_conf, misfire_strategy, \
             executor_route_strategy, executor_handler, executor_param, executor_block_strategy, executor_timeout, \
             executor_fail_retry_count, glue_type, child_jobid, trigger_status) VALUES \
             (1, 1, 'settle', 'ops@example.com', 'CRON', '0 0 2 ? * 2-6', 'FIRE_ONCE_NOW', 'FIRST', 'settleHandler', 'x=1', 'SERIAL_EXECUTION', 60, 2, 'BEAN', '2', 1), \
             (2, 1, 'report', '', 'NONE', NULL, 'DO_NOTHING', 'ROUND', 'reportHandler', '', 'DISCARD_LATER', 0, 0, 'BEAN', '3', 0), \
             (3, 1, 'archive', '', 'NONE', NULL, 'DO_NOTHING', 'FAILOVER', 'archiveHandler', '', 'COVER_EARLY', 0, 0, 'BEAN', '', 0), \
             (4, 1, 'poll', '', 'FIX_RATE', '30', 'DO_NOTHING', 'RANDOM', 'pollHandler', '', 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 1), \
             (5, 1, 'script', '', 'CRON', '0 0 3 * * ?', 'DO_NOTHING', 'FIRST', '', '', 'SERIAL_EXECUTION', 0, 0, 'GLUE_SHELL', '', 1), \
             (6, 1, 'weird', '', 'CRON', '0 0 4 * * ?', 'DO_NOTHING', 'MAGIC', 'weirdHandler', '', 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 1), \
             (7, 2, 'elsewhere', '', 'CRON', '0 0 5 * * ?', 'DO_NOTHING', 'FIRST', 'otherHandler', '', 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', 1)",
        ],
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, stderr) = import(&db.url, dir.path(), "order-service");
    assert_eq!(code, 1, "refused jobs make the exit code 1: {stderr}");
    let chain = read(dir.path(), "xxl-order-service-1");
    assert!(chain.contains("observe: true"), "{chain}");
    assert!(chain.contains("cron: \"0 0 2 ? * 1-5\"") && chain.contains("misfire: run_once"), "{chain}");
    assert!(chain.contains("  j2:\n    needs: [j1]") && chain.contains("  j3:\n    needs: [j2]"), "{chain}");
    assert!(chain.contains("retry: {attempts: 3}") && chain.contains("timeout: 60s"), "{chain}");
    assert!(
        chain.contains("route: round, block: discard_later")
            && chain.contains("route: failover, block: cover_early")
    );
    assert!(chain.contains("ops@example.com"), "alarm e-mails kept as a note: {chain}");
    let poll = read(dir.path(), "xxl-order-service-4");
    assert!(poll.contains("cron: \"*/30 * * * * *\"") && poll.contains("route: random"), "{poll}");
    assert!(stderr.contains("refused: job 5 (script): glue_type GLUE_SHELL"), "{stderr}");
    assert!(stderr.contains("refused: job 6 (weird): unknown executor_route_strategy `MAGIC`"), "{stderr}");
    let written: Vec<_> = std::fs::read_dir(dir.path()).expect("out dir").collect();
    assert_eq!(written.len(), 2, "one flow per chain and one for the FIX_RATE job only: {written:?}");
    validates(dir.path());
}

#[tokio::test]
async fn xxl_job_older_job_cron_tables_import() {
    let Some(db) = MySqlTestDb::create().await.expect("test database") else { return };
    exec_all(
        &db.url,
        &[
            GROUP,
            INFO_OLD,
            "INSERT INTO xxl_job_group (id, app_name, title) VALUES (1, 'legacy', 'legacy')",
            "INSERT INTO xxl_job_info (id, job_group, job_cron, job_desc, executor_route_strategy, executor_handler, \
             executor_block_strategy, glue_type, child_jobid, trigger_status) VALUES \
             (1, 1, '0 0/10 * * * ?', 'extract', 'LEAST_RECENTLY_USED', 'extractHandler', 'SERIAL_EXECUTION', 'BEAN', '2', 1), \
             (2, 1, '0 0 0 1 1 ? *', 'load', 'SHARDING_BROADCAST', 'loadHandler', 'SERIAL_EXECUTION', 'BEAN', '', 0)",
        ],
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, stderr) = import(&db.url, dir.path(), "legacy");
    assert_eq!(code, 0, "{stderr}");
    let flow = read(dir.path(), "xxl-legacy-1");
    assert!(flow.contains("cron: \"0 0-59/10 * * * ?\""), "{flow}");
    assert!(
        flow.contains("route: least_recently_used") && flow.contains("route: sharding_broadcast"),
        "{flow}"
    );
    assert!(flow.contains("  j2:\n    needs: [j1]"), "{flow}");
    validates(dir.path());
}

/// Observe first, then promote: `madeira promote FLOW --xxl-db URL` stops the job in
/// XXL-JOB's table and governs the flow; `demote` makes it observe-only and starts
/// the job there again. A flow that was not imported is refused, naming the fix.
#[tokio::test(flavor = "multi_thread")]
async fn promote_and_demote_switch_the_job_in_xxl_job_and_the_flow_in_madeira() {
    let Some(db) = MySqlTestDb::create().await.expect("test database") else { return };
    exec_all(
        &db.url,
        &[
            GROUP,
            INFO_NEW,
            "INSERT INTO xxl_job_group (id, app_name, title) VALUES (1, 'order-service', 'orders')",
            "INSERT INTO xxl_job_info (id, job_group, job_desc, schedule_type, schedule_conf, executor_route_strategy, \
             executor_handler, executor_block_strategy, glue_type, child_jobid, trigger_status, trigger_next_time) VALUES \
             (1, 1, 'settle', 'CRON', '0 0 2 * * ?', 'FIRST', 'settleHandler', 'SERIAL_EXECUTION', 'BEAN', '', 1, 1767225600000)",
        ],
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let flows = dir.path().join("flows");
    let (code, stderr) = import(&db.url, &flows, "order-service");
    assert_eq!(code, 0, "{stderr}");
    let dev = crate::xxl::start_dev(dir.path());
    let applied = dev.cli(&["apply", "-f", flows.to_str().expect("path")]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let switch = async || -> (i64, i64) {
        let mut conn = MySqlConnection::connect(&db.url).await.expect("connect");
        sqlx::query_as("SELECT CAST(trigger_status AS SIGNED), CAST(trigger_next_time AS SIGNED) FROM xxl_job_info WHERE id = 1")
            .fetch_one(&mut conn)
            .await
            .expect("read the switch")
    };
    let flow = "xxl-order-service-1";
    assert_eq!(dev.get(&format!("/flows/{flow}")).await.1["observe"], true);

    let out = dev.cli(&["promote", flow, "--xxl-db", &db.url, "--reason", "moving to Madeira"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("is governed") && said.contains("XXL-JOB job 1 is stopped"), "{said}");
    assert_eq!(switch().await, (0, 0), "XXL-JOB no longer schedules it");
    assert_eq!(dev.get(&format!("/flows/{flow}")).await.1["observe"], false, "Madeira triggers it now");

    let out = dev.cli(&["demote", flow, "--xxl-db", &db.url, "--reason", "back for now"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(switch().await.0, 1, "XXL-JOB schedules it again (it computes the next time itself)");
    assert_eq!(dev.get(&format!("/flows/{flow}")).await.1["observe"], true);

    dev.put_flow("flow: plain\nobserve: true\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let out = dev.cli(&["promote", "plain", "--xxl-db", &db.url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not written by `madeira import xxl-job`"), "{err}");
    assert_eq!(switch().await.0, 1, "nothing switched for a refused flow");
}
