//! XXL-JOB executors behind several `madeira serve` replicas (issue 38): a real
//! pyxxl executor knows one replica's address only (XXL-JOB's executors register
//! with the first admin that answers, and call back the same way), yet a run
//! created on the other replica triggers it and ends by its callback, through
//! the registrations and callbacks kept in the shared PostgreSQL store. Wrong
//! tokens are limited per client address like API tokens.

use serde_json::{Value, json};

use crate::support::{Dev, wait_until};
use crate::xxl::{APP, Executor, TOKEN, TOKEN_VAR, python, wait_registered, wire};

fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn metrics(dev: &Dev) -> String {
    dev.http.get(format!("{}/metrics", dev.base)).send().await.expect("metrics").text().await.expect("text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_of_one_replica_runs_another_replicas_node_and_its_callback_crosses_over() {
    let Some(py) = python() else { return };
    let xxl = format!("xxl_job:\n  apps:\n    - {{app: {APP}, token_env: {TOKEN_VAR}}}\n");
    let Some(pg) = crate::support::pg_replicas(&xxl, &[(TOKEN_VAR, TOKEN)]).await else { return };
    let (r1, r2) = (&pg.r1, &pg.r2);
    let ex = Executor::start(&py, r1, pg.dir.path(), "ex1", TOKEN);
    wait_registered(r1, &[&ex.address]).await;
    // r2 never heard from the executor: it learns of it from the store.
    wait_registered(r2, &[&ex.address]).await;

    r2.put_flow(
        "flow: xxl-across\nnodes:\n  settle:\n    timeout: 60s\n    \
         run: {xxl: {app: order-service, handler: hello, params: \"day=${params.day} biz=${biz_date}\"}}\n",
    )
    .await;
    let run = r2.trigger("xxl-across", json!({"day": "2026-12-06"})).await;
    let done = r2.finished(&run).await;
    assert_eq!(done["status"], "SUCCESS", "{done}");
    let outputs = &done["nodes"]["settle"]["outputs"];
    assert_eq!(outputs["handle_msg"], "hello done on ex1", "{outputs}");
    assert_eq!(done["nodes"]["settle"]["attempts"].as_u64(), Some(1), "{done}");
    let log_id = outputs["log_id"].clone();
    let triggers = wire(pg.dir.path(), "/run");
    assert_eq!(triggers.len(), 1, "triggered once: {triggers:?}");
    assert_eq!(triggers[0]["request"]["logId"], log_id);
    let biz = done["biz_date"].as_str().expect("the run's business date");
    assert_eq!(triggers[0]["request"]["executorParams"], format!("day=2026-12-06 biz={biz}"));
    let callbacks: Vec<Value> =
        wire(pg.dir.path(), "callback").into_iter().filter(|c| c["response"]["code"] == 200).collect();
    assert!(!callbacks.is_empty(), "the executor called back (to r1, the only admin it knows)");
    // r1 kept the callback for r2; r2 read it from the store.
    let kept = metric(&metrics(r1).await, "madeira_xxl_callbacks_total", &["result=\"kept\""]);
    assert!(kept >= 1.0, "r1 kept the callback it had no attempt for: {kept}");
    let accepted = metric(&metrics(r2).await, "madeira_xxl_callbacks_total", &["result=\"accepted\""]);
    assert!(accepted >= 1.0, "r2 took it from the store: {accepted}");

    // Wrong tokens cost the client address tries, as API tokens do: then 429.
    let body =
        json!({"registryGroup": "EXECUTOR", "registryKey": APP, "registryValue": "http://127.0.0.1:1/"});
    let raw = reqwest::Client::new();
    let mut statuses = Vec::new();
    for i in 0..12 {
        let resp = raw
            .post(format!("{}/xxl-job-admin/api/registry", r1.base))
            .header("XXL-JOB-ACCESS-TOKEN", format!("guess-{i:02}-0123456789abcdef"))
            .json(&body)
            .send()
            .await
            .expect("registry");
        statuses.push(resp.status().as_u16());
    }
    assert!(statuses[..10].iter().all(|s| *s == 401), "{statuses:?}");
    assert_eq!(statuses[10..], [429, 429], "the address is out of tries: {statuses:?}");
    // The executor (same address) stays registered: its heartbeats within the 90 s are
    // refused only while the address has no try left (one comes back every 6 s).
    wait_until(std::time::Duration::from_secs(5), "executor still live", async || {
        let (_, body) = r2.get("/sidecars").await;
        body["xxl"]
            .as_array()
            .is_some_and(|l| l.iter().any(|x| x["name"] == ex.address.as_str() && x["live"] == true))
    })
    .await;
}
