//! Two `madeira serve` replicas on one PostgreSQL database consume one RabbitMQ
//! queue as competing consumers: 1,000 messages with 100 duplicate keys make
//! exactly 900 runs between them, and nothing is left unacked.

use std::path::Path;
use std::time::Duration;

use madeira_store::testing::PgTestDb;

use crate::brokers::{amqp_url, bodies, count, flow_yaml, fresh, message_runs, outcomes};
use crate::messages::{channel, publish, ready};
use crate::support::{Dev, sigterm_and_wait, wait_until};

const ADMIN: &str = "messages-replica-admin-token-0123";

pub(crate) fn config(dir: &Path, store: &str) -> std::path::PathBuf {
    let path = dir.join("madeira.yaml");
    let text = format!(
        "http: 127.0.0.1:0\nstore: {store}\nlease: 2s\nsources:\n  - {{name: bus, type: rabbitmq, url_env: MADEIRA_T_BUS_URL}}\nauth:\n  tokens:\n    - {{name: ci, role: admin, token_env: MADEIRA_T_ADMIN}}\n"
    );
    std::fs::write(&path, text).expect("write config");
    path
}

pub(crate) fn replica(config: &Path, id: &str, url: &str) -> Dev {
    let env = [("MADEIRA_REPLICA_ID", id), ("MADEIRA_T_ADMIN", ADMIN), ("MADEIRA_T_BUS_URL", url)];
    Dev::serve(config, &env, Some(ADMIN))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_postgres_consuming_one_queue_make_one_run_per_key() {
    let Some(url) = amqp_url() else { return };
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &db.url);
    let mut r1 = replica(&config, "r1", &url);
    let mut r2 = replica(&config, "r2", &url);
    let (flow, queue) = (fresh("rmq-replicas"), fresh("madeira.test.q"));
    r1.put_flow(&flow_yaml(&flow, &format!("queue: {queue}"), "", "")).await;
    // Both replicas consume before anything is published (each re-reads flows every second).
    for r in [&r1, &r2] {
        wait_until(Duration::from_secs(30), "a replica to start consuming", async || {
            !outcomes(r, &flow).await.is_null()
        })
        .await;
    }
    let (_conn, ch) = channel(&url).await;
    publish(&ch, &queue, &bodies(900, 100)).await;
    let (o1, o2) = wait_until(Duration::from_secs(180), "1000 messages consumed", async || {
        let (o1, o2) = (outcomes(&r1, &flow).await, outcomes(&r2, &flow).await);
        let seen = ["run", "duplicate"].iter().map(|k| count(&o1, k) + count(&o2, k)).sum::<u64>();
        if seen >= 1000 { Ok((o1, o2)) } else { Err(format!("{seen}: r1 {o1} r2 {o2}")) }
    })
    .await;
    assert_eq!(count(&o1, "run") + count(&o2, "run"), 900, "r1 {o1} r2 {o2}");
    assert!(count(&o1, "run") > 0 && count(&o2, "run") > 0, "both replicas competed: r1 {o1} r2 {o2}");
    assert_eq!(message_runs(&r1, &flow).await, 900, "one run per key in the shared store");
    sigterm_and_wait(&mut r1.child, 30).await;
    sigterm_and_wait(&mut r2.child, 30).await;
    assert_eq!(ready(&ch, &queue).await, 0, "nothing left unacked");
}
