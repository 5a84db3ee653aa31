//! Business dates end to end on the real binary (issue #35): a run's `biz_date`
//! reaches a sidecar job (env `MADEIRA_BIZ_DATE` and the `{{ biz_date }}` argv
//! template), a PostgreSQL bind (`:biz_date`), an HTTP job's body and a `when`
//! condition; it is listed and filtered by the API and the CLI, and defaults
//! to the day before in the flow's timezone.

use std::sync::{Arc, Mutex};

use chrono::Utc;
use madeira_sql::Kind;
use madeira_sql::testing::TestDb;
use serde_json::{Value, json};

use crate::fleet_shutdown::free_grpc;
use crate::sidecar::{SidecarProc, wait_sidecars};
use crate::sql::{URL_ENV, write_config};
use crate::support::{Dev, status_of, wait_until};

/// A sidecar job printing what it was given as its outputs.
const ECHO_JOB: &str = "jobs:\n  echo-date:\n    command: [\"/bin/sh\", \"-c\", \
    \"printf '{\\\"env\\\": \\\"%s\\\", \\\"arg\\\": \\\"%s\\\"}' \\\"$MADEIRA_BIZ_DATE\\\" \\\"$1\\\" > \\\"$MADEIRA_OUTPUT_FILE\\\"\", \
    \"job\", \"{{ biz_date }}\"]\n";

/// An HTTP job at the answered URL keeping every JSON body it is sent.
async fn body_receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = bodies.clone();
    let app = axum::Router::new().route(
        "/settle",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let kept = kept.clone();
            async move {
                kept.lock().expect("bodies").push(body);
                axum::Json(json!({"ok": true}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/settle"), bodies)
}

fn flow(receiver: &str) -> String {
    format!(
        r#"flow: settle-dated
timezone: Asia/Shanghai
biz_date: {{offset: -1}}
nodes:
  job:
    run: {{sidecar: {{group: billing, job: echo-date}}}}
  record:
    needs: [job]
    when: 'biz_date != ""'
    run:
      sql:
        datasource: db
        statement: "INSERT INTO seen (d, via) VALUES (:biz_date, :via)"
        params: {{via: "'bind:' + biz_date"}}
  notify:
    needs: [record]
    run: {{http: {{url: "{receiver}", method: POST}}}}
"#
    )
}

#[tokio::test]
async fn biz_date_reaches_a_sidecar_job_a_sql_bind_and_an_http_body() {
    let Some(db) = TestDb::create(Kind::Postgres).await.expect("test database") else { return };
    db.exec("CREATE TABLE seen (d TEXT, via TEXT)").await.expect("table");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        "http_executor: {allow_hosts: ['127.0.0.1']}\n",
        "name: db, max_connections: 2",
    );
    let grpc = free_grpc();
    let config_arg = config.to_str().expect("utf-8 path");
    let dev = Dev::start_with_all(
        &dir.path().join("data"),
        &["--config", config_arg, "--grpc", &grpc],
        &[(URL_ENV, db.url.as_str())],
    );
    let _sidecar = SidecarProc::start(dir.path(), "s-dates", &grpc, ECHO_JOB);
    wait_sidecars(&dev, "billing", 1).await;
    let (receiver, bodies) = body_receiver().await;
    dev.put_flow(&flow(&receiver)).await;

    // Given by the caller.
    let (status, made) =
        dev.post("/flows/settle-dated/runs", json!({"params": {}, "biz_date": "2026-10-07"}), &[]).await;
    assert_eq!(status, 201, "{made}");
    let run_id = made["run_id"].as_str().expect("run_id").to_string();
    let run = dev.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert_eq!(run["biz_date"], "2026-10-07", "{run}");
    assert_eq!(run["nodes"]["job"]["outputs"], json!({"env": "2026-10-07", "arg": "2026-10-07"}), "{run}");
    assert_eq!(status_of(&run, "record"), "SUCCESS", "the condition read biz_date: {run}");
    let rows = db.strings("SELECT d || '|' || via FROM seen").await.expect("rows");
    assert_eq!(rows, ["2026-10-07|bind:2026-10-07"]);
    let sent = bodies.lock().expect("bodies").clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["biz_date"], "2026-10-07", "{sent:?}");

    // Defaulted: the day before, in the flow's timezone.
    let expected = (Utc::now().with_timezone(&chrono_tz::Asia::Shanghai).date_naive() - chrono::Days::new(1))
        .format("%Y-%m-%d")
        .to_string();
    let default_run = dev.trigger("settle-dated", json!({})).await;
    let run = dev.finished(&default_run).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    // A run created across Shanghai midnight may see the next day.
    let got = run["biz_date"].as_str().expect("biz_date").to_string();
    let after = Utc::now().with_timezone(&chrono_tz::Asia::Shanghai).date_naive() - chrono::Days::new(1);
    assert!(got == expected || got == after.format("%Y-%m-%d").to_string(), "{got} vs {expected}");

    // Listed by business date: API and CLI.
    let (status, listed) = dev.get("/runs?biz_date=2026-10-07").await;
    assert_eq!(status, 200, "{listed}");
    let ids: Vec<&str> =
        listed["runs"].as_array().expect("runs").iter().filter_map(|r| r["run_id"].as_str()).collect();
    assert_eq!(ids, [run_id.as_str()], "{listed}");
    assert_eq!(listed["runs"][0]["biz_date"], "2026-10-07");
    let (status, bad) = dev.get("/runs?biz_date=2026-10-32").await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad["error"]["message"].as_str().unwrap_or_default().contains("YYYY-MM-DD"), "{bad}");
    let out = dev.cli(&["runs", "--biz-date", "2026-10-07"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains(&run_id) && text.contains("2026-10-07"), "{text}");
    // A rerun of a date from the CLI.
    // (Without --wait: the HTTP job's receiver runs on this test's runtime.)
    let out = dev.cli(&["run", "settle-dated", "--biz-date", "2026-09-30"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, listed) = dev.get("/runs?biz_date=2026-09-30").await;
    let rerun = listed["runs"][0]["run_id"].as_str().expect("the CLI's run").to_string();
    assert_eq!(dev.finished(&rerun).await["status"], "SUCCESS");
    let rows = db.strings("SELECT d FROM seen ORDER BY d").await.expect("rows");
    assert!(rows.contains(&"2026-09-30".to_string()), "{rows:?}");
}

/// Triggers `flow` for business date `date` with `params`; the run id.
async fn trigger_on(dev: &Dev, flow: &str, date: &str, params: Value) -> String {
    let (status, made) =
        dev.post(&format!("/flows/{flow}/runs"), json!({"params": params, "biz_date": date}), &[]).await;
    assert_eq!(status, 201, "{made}");
    made["run_id"].as_str().expect("run_id").to_string()
}

#[tokio::test]
async fn depends_on_past_holds_a_date_until_the_previous_one_succeeds() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: ledger\nconcurrency: {depends_on_past: true}\nnodes:\n  \
         book: {run: {builtin: fail, message: 'ledger down'}, when: 'params.broken == true'}\n  \
         close: {run: {builtin: noop}}\n",
    )
    .await;
    // The flow's first date has no past: it starts (and fails).
    let first = trigger_on(&dev, "ledger", "2026-10-05", json!({"broken": true})).await;
    let run = dev.finished(&first).await;
    assert_eq!(run["status"], "FAILED", "{run}");
    assert!(run["waiting_reason"].is_null(), "{run}");

    // 10-06 waits on the FAILED 10-05, says so, and it is alerted.
    let held = trigger_on(&dev, "ledger", "2026-10-06", json!({"broken": false})).await;
    let run = dev
        .wait_run(&held, 20, |r| r["waiting_reason"].as_str().is_some_and(|w| w.contains("is FAILED")))
        .await;
    assert_eq!(run["status"], "QUEUED", "{run}");
    assert!(run["waiting_reason"].as_str().unwrap_or_default().contains(&first), "names the run: {run}");
    let alert = wait_until(std::time::Duration::from_secs(30), "a MadeiraPastFailed alert", async || {
        let (_, body) = dev.get("/alerts").await;
        let found = body["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["alertname"] == "MadeiraPastFailed")
            .cloned();
        found.ok_or_else(|| format!("{body}"))
    })
    .await;
    assert_eq!(alert["severity"], "critical", "{alert}");
    assert!(alert["summary"].as_str().unwrap_or_default().contains("2026-10-06"), "{alert}");
    let (_, listed) = dev.get("/runs?biz_date=2026-10-06").await;
    assert_eq!(listed["runs"][0]["waiting_reason"], run["waiting_reason"], "{listed}");
    let shown = dev.cli(&["show", &held]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("business date 2026-10-06") && text.contains("waiting: depends_on_past"), "{text}");

    // The operator reruns 10-05; its success releases 10-06.
    let rerun = trigger_on(&dev, "ledger", "2026-10-05", json!({"broken": false})).await;
    assert_eq!(dev.finished(&rerun).await["status"], "SUCCESS");
    let run = dev.finished(&held).await;
    assert_eq!(run["status"], "SUCCESS", "{run}");
    assert!(run["waiting_reason"].is_null(), "{run}");

    // A date whose previous date has no run at all waits for one.
    let gap = trigger_on(&dev, "ledger", "2026-10-08", json!({})).await;
    let (_, run) = dev.get(&format!("/runs/{gap}")).await;
    assert_eq!(run["status"], "QUEUED", "{run}");
    assert!(run["waiting_reason"].as_str().unwrap_or_default().contains("no run for 2026-10-07"), "{run}");
}
