//! Sidecars across `madeira serve` replicas on one PostgreSQL database: a run held
//! by one replica reaches a sidecar connected to another, and every replica's fleet
//! view shows what the others have.

use std::time::Duration;

use madeira_store::testing::PgTestDb;
use serde_json::json;

use crate::cluster::ADMIN;
use crate::forwarding::{Redis, free_port};
use crate::support::{Dev, wait_until};

const BILLING: &str = "cluster-billing-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_reach_a_sidecar_connected_to_another_replica() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let port = free_port();
    let Some(redis) = Redis::start(port) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = format!("redis: redis://127.0.0.1:{port}\ngrpc: 127.0.0.1:0\n");
    let path = dir.path().join("madeira.yaml");
    std::fs::write(
        &path,
        format!(
            "http: 127.0.0.1:0\nstore: {}\nlease: 3s\n{extra}auth:\n  tokens:\n    \
             - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n  sidecar_tokens:\n    \
             - {{group: billing, token_env: MADEIRA_T_BILLING}}\n",
            db.url
        ),
    )
    .expect("write config");
    let env = [("MADEIRA_T_ADMIN", ADMIN), ("MADEIRA_T_BILLING", BILLING)];
    let serve = |id: &'static str| {
        let mut env = env.to_vec();
        env.push(("MADEIRA_REPLICA_ID", id));
        Dev::serve_with(&path, &env, true, crate::support::client(Some(ADMIN)))
    };
    let (r1, r2) = (serve("r1"), serve("r2"));

    // One sidecar, connected to r2 only; each attempt appends its key to a file.
    let ledger = dir.path().join("ledger.txt");
    let sidecar_config = dir.path().join("sidecar.yaml");
    std::fs::write(
        &sidecar_config,
        format!(
            "name: s1\ngroup: billing\ncontrol_plane: http://{}\ntoken_env: MADEIRA_T_BILLING\nspool_dir: {}\n\
             jobs:\n  stamp:\n    command: [\"/bin/sh\", \"-c\", \"echo $MADEIRA_IDEMPOTENCY_KEY >> {}\"]\n",
            r2.grpc,
            dir.path().join("spool").display(),
            ledger.display()
        ),
    )
    .expect("write sidecar config");
    let _sidecar =
        crate::sidecar::SidecarProc::spawn_with_env(sidecar_config, &[("MADEIRA_T_BILLING", BILLING)]);

    // r1 has no sidecar of its own, but its fleet view shows r2's.
    wait_until(Duration::from_secs(20), "r2's sidecar in r1's view", async || {
        let (code, view) = r1.get("/sidecars").await;
        assert_eq!(code, 200, "{view}");
        let here = view["sidecars"].as_array().map_or(0, Vec::len);
        assert_eq!((view["replica"].as_str(), here), (Some("r1"), 0), "{view}");
        let seen_at = view["replicas"][0]["seen_at"].clone();
        let want = json!([{"replica": "r2", "group": "billing", "jobs": ["stamp"], "seen_at": seen_at}]);
        if view["replicas"] == want { Ok(()) } else { Err(view.to_string()) }
    })
    .await;

    r1.put_flow(
        "flow: stamped\nnodes:\n  prepare: {run: {builtin: noop}}\n  \
         stamp: {needs: [prepare], run: {sidecar: {group: billing, job: stamp}}}\n",
    )
    .await;
    let mut runs = Vec::new();
    for _ in 0..6 {
        runs.push(r1.trigger("stamped", json!({})).await);
    }
    for id in &runs {
        let run = r1.wait_run(id, 60, |r| r["status"] == "SUCCESS" || r["status"] == "FAILED").await;
        assert_eq!(run["status"], "SUCCESS", "{run}");
    }
    let lines = std::fs::read_to_string(&ledger).expect("ledger");
    let mut keys: Vec<&str> = lines.lines().collect();
    assert_eq!(keys.len(), 6, "each run's sidecar node ran once: {lines}");
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 6, "no attempt ran twice: {lines}");
    drop((r1, r2, redis));
    drop(db);
}
