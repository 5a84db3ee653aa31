//! A result is acknowledged to the sidecar only after the engine's commit that
//! records it (SPEC §9 delivery): with PostgreSQL refusing the commit that would
//! end the attempt (a trigger on `transitions`, counting each refusal in a
//! sequence, which survives the rollback), a real `madeira sidecar` keeps the
//! job's result spooled, the engine's retries of the commit use the result it
//! kept instead of running the job again, and once the store takes the commit
//! the node ends with the job's real outcome, the job having run once, and the
//! spool empties.

use std::path::Path;

use madeira_store::testing::PgTestDb;
use serde_json::json;
use sqlx::Connection;

use crate::sidecar::{SidecarProc, wait_for, wait_sidecars};
use crate::support::{Dev, client, status_of, wait_until};

const ADMIN: &str = "acks-admin-token-0123456789";
const BILLING: &str = "acks-billing-token-0123456789";

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map(|s| s.lines().count()).unwrap_or(0)
}

fn spooled(spool: &Path) -> usize {
    madeira_sidecar::spool::pending_on_disk(&spool.join("reports"))
}

async fn refusals(conn: &mut sqlx::PgConnection) -> i64 {
    let (value, called): (i64, bool) =
        sqlx::query_as("SELECT last_value, is_called FROM madeira_test_refusals")
            .fetch_one(conn)
            .await
            .expect("read the refusal count");
    if called { value } else { 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_is_acknowledged_only_after_its_commit_and_the_job_runs_once() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("madeira.yaml");
    std::fs::write(
        &config,
        format!(
            "http: 127.0.0.1:0\ngrpc: 127.0.0.1:0\nstore: {}\nauth:\n  tokens:\n    \
             - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n  sidecar_tokens:\n    \
             - {{group: billing, token_env: MADEIRA_T_BILLING}}\n",
            db.url
        ),
    )
    .expect("write config");
    let env = [("MADEIRA_T_ADMIN", ADMIN), ("MADEIRA_T_BILLING", BILLING)];
    let dev = Dev::serve_with(&config, &env, true, client(Some(ADMIN)));

    let ran = dir.path().join("ran");
    let spool = dir.path().join("spool");
    let sidecar_config = dir.path().join("sidecar.yaml");
    std::fs::write(
        &sidecar_config,
        format!(
            "name: s-ack\ngroup: billing\ncontrol_plane: http://{}\ntoken_env: MADEIRA_T_BILLING\nspool_dir: {}\n\
             jobs:\n  work:\n    command: [\"/bin/sh\", \"-c\", \"echo $MADEIRA_ATTEMPT >> {}; printf '{{\\\"paid\\\": 42}}' > $MADEIRA_OUTPUT_FILE\"]\n",
            dev.grpc,
            spool.display(),
            ran.display()
        ),
    )
    .expect("write sidecar config");
    let _sidecar = SidecarProc::spawn_with_env(sidecar_config, &[("MADEIRA_T_BILLING", BILLING)]);
    wait_sidecars(&dev, "billing", 1).await;
    dev.put_flow("flow: acked\nnodes:\n  w: {run: {sidecar: {group: billing, job: work}}}\n").await;

    let mut conn = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    for statement in [
        "CREATE SEQUENCE madeira_test_refusals",
        "CREATE FUNCTION madeira_test_refuse() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM nextval('madeira_test_refusals'); RAISE EXCEPTION 'commit refused by the test'; END $$",
        // A write whose packed entries (`madeira_store::packed`) move node `w` out of
        // RUNNING (code 1): its end, or a recovery's.
        "CREATE TRIGGER madeira_test_refuse_end BEFORE INSERT ON transitions FOR EACH ROW \
         WHEN (NEW.entries LIKE '%[\"w\",1,%') EXECUTE FUNCTION madeira_test_refuse()",
    ] {
        sqlx::query(statement).execute(&mut conn).await.expect(statement);
    }

    let run_id = dev.trigger("acked", json!({})).await;
    wait_for("the job to run", 20, || lines(&ran) == 1).await;
    // The first commit is refused and the run resumed from the store; each
    // resumption's commit (its recovery leaves RUNNING too) is refused as well.
    wait_until(std::time::Duration::from_secs(30), "the engine to retry the refused commit", async || {
        refusals(&mut conn).await >= 3
    })
    .await;
    assert_eq!(spooled(&spool), 1, "the result stays in the sidecar's spool while its commit is refused");
    assert_eq!(lines(&ran), 1, "the retried commits used the kept result; the job did not run again");
    let (_, run) = dev.get(&format!("/runs/{run_id}")).await;
    assert_eq!(status_of(&run, "w"), "RUNNING", "nothing recorded yet: {run}");

    sqlx::query("DROP TRIGGER madeira_test_refuse_end ON transitions")
        .execute(&mut conn)
        .await
        .expect("drop");
    let run = dev.wait_run(&run_id, 30, |r| r["status"] != "RUNNING").await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["nodes"]["w"]["outputs"]["paid"], 42, "the job's real outcome: {run}");
    let history = run["nodes"]["w"]["attempt_history"].as_array().cloned().unwrap_or_default();
    assert!(
        history.iter().all(|a| a["outcome"].is_null() || a["outcome"] == "SUCCESS"),
        "no attempt failed (a resumed attempt is numbered anew): {history:?}"
    );
    wait_for("the acknowledged result to leave the spool", 10, || spooled(&spool) == 0).await;
    assert_eq!(lines(&ran), 1, "the job ran exactly once");
}
