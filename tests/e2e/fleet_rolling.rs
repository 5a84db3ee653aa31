//! A rolling restart costs nothing (issue 14, "Rolling restarts of two replicas
//! under load fail no attempt"): two `madeira serve` replicas on one PostgreSQL
//! database, each with a real `madeira sidecar` connected to it, are restarted
//! one after the other (SIGTERM, wait for the exit, start again) while 200 runs
//! of two sidecar nodes are triggered; every run ends SUCCESS, no attempt fails,
//! and no alert is raised.

use std::path::{Path, PathBuf};
use std::time::Duration;

use madeira_store::testing::PgTestDb;
use serde_json::json;

use crate::fleet_shutdown::free_grpc;
use crate::forwarding::{Redis, free_port};
use crate::sidecar::{SidecarProc, wait_sidecars};
use crate::support::{Dev, client, sigterm_and_wait, wait_until};

const ADMIN: &str = "rolling-admin-token-0123456789";
const BILLING: &str = "rolling-billing-token-0123456789";
const RUNS: usize = 200;

struct Replica {
    id: &'static str,
    config: PathBuf,
}

impl Replica {
    fn new(dir: &Path, id: &'static str, store: &str, redis_port: u16) -> Replica {
        let config = dir.join(format!("{id}.yaml"));
        std::fs::write(
            &config,
            format!(
                "http: 127.0.0.1:0\ngrpc: {}\nstore: {store}\nredis: redis://127.0.0.1:{redis_port}\nlease: 3s\n\
                 sidecar_lost_after: 10s\nauth:\n  tokens:\n    - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n  \
                 sidecar_tokens:\n    - {{group: billing, token_env: MADEIRA_T_BILLING}}\n",
                free_grpc()
            ),
        )
        .expect("write config");
        Replica { id, config }
    }

    fn start(&self) -> Dev {
        let env =
            [("MADEIRA_T_ADMIN", ADMIN), ("MADEIRA_T_BILLING", BILLING), ("MADEIRA_REPLICA_ID", self.id)];
        Dev::serve_with(&self.config, &env, true, client(Some(ADMIN)))
    }
}

fn sidecar(dir: &Path, name: &str, grpc: &str) -> SidecarProc {
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &config,
        format!(
            "name: {name}\ngroup: billing\ncontrol_plane: http://{grpc}\ntoken_env: MADEIRA_T_BILLING\nspool_dir: {}\n\
             jobs:\n  work:\n    command: [\"/bin/sh\", \"-c\", \"sleep 0.3; printf '{{\\\"ok\\\": true}}' > $MADEIRA_OUTPUT_FILE\"]\n",
            dir.join(format!("{name}-spool")).display()
        ),
    )
    .expect("write sidecar config");
    SidecarProc::spawn_with_env(config, &[("MADEIRA_T_BILLING", BILLING)])
}

/// Stops `dev` with SIGTERM (it must exit 0) and starts its replica again.
async fn restart(dev: &mut Dev, replica: &Replica) {
    let status = sigterm_and_wait(&mut dev.child, 40).await;
    assert!(status.success(), "replica {} stops cleanly on SIGTERM: {status:?}", replica.id);
    *dev = replica.start();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarting_two_replicas_one_after_the_other_fails_no_attempt_and_raises_no_alert() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let port = free_port();
    let Some(_redis) = Redis::start(port) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let (one, two) =
        (Replica::new(dir.path(), "r1", &db.url, port), Replica::new(dir.path(), "r2", &db.url, port));
    let (mut r1, mut r2) = (one.start(), two.start());
    let (_s1, _s2) = (sidecar(dir.path(), "s1", &r1.grpc), sidecar(dir.path(), "s2", &r2.grpc));
    wait_sidecars(&r1, "billing", 1).await;
    wait_sidecars(&r2, "billing", 1).await;
    r1.put_flow(
        "flow: roll\nnodes:\n  a: {run: {sidecar: {group: billing, job: work}}}\n  \
         b: {needs: [a], run: {sidecar: {group: billing, job: work}}}\n",
    )
    .await;

    let mut run_ids = Vec::new();
    let mut pace = tokio::time::interval(Duration::from_millis(40));
    for i in 0..RUNS {
        pace.tick().await;
        match i {
            60 => restart(&mut r1, &one).await,
            130 => restart(&mut r2, &two).await,
            _ => {}
        }
        let target = if i % 2 == 0 { &r1 } else { &r2 };
        run_ids.push(target.trigger("roll", json!({"i": i})).await);
    }

    let what = format!("{RUNS} runs to succeed");
    wait_until(Duration::from_secs(120), &what, async || {
        let (code, body) = r2.get("/runs?flow=roll&limit=1000").await;
        assert_eq!(code, 200, "{body}");
        let runs = body["runs"].as_array().cloned().unwrap_or_default();
        let failed: Vec<_> = runs.iter().filter(|r| r["status"] == "FAILED").collect();
        assert!(failed.is_empty(), "no run fails: {failed:?}");
        let done = runs.iter().filter(|r| r["status"] == "SUCCESS").count();
        if done == RUNS { Ok(()) } else { Err(format!("{done} succeeded")) }
    })
    .await;
    for run_id in &run_ids {
        let (_, run) = r1.get(&format!("/runs/{run_id}")).await;
        for node in ["a", "b"] {
            let history = run["nodes"][node]["attempt_history"].as_array().cloned().unwrap_or_default();
            let failed: Vec<_> =
                history.iter().filter(|a| a["outcome"].is_string() && a["outcome"] != "SUCCESS").collect();
            assert!(failed.is_empty(), "run {run_id} node {node}: no attempt failed: {history:?}");
        }
    }
    for dev in [&r1, &r2] {
        let (_, alerts) = dev.get("/alerts").await;
        assert_eq!(
            alerts["alerts"].as_array().map(Vec::len),
            Some(0),
            "no alert for a rolling restart: {alerts}"
        );
    }
}
