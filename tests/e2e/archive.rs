//! The run archive on the real binary (`archive_after: 0s`): a finished run (a
//! node that succeeded on its retry with outputs, a failed node, a skipped one)
//! reads the same through the API (detail with nodes, attempts and outputs;
//! transitions; logs), the console's run page and `madeira show` once the
//! archiver folded it (read in the store file, waited for with a deadline); a
//! rerun of its failed node after the fold completes, its history whole.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Dev, wait_until};

const FLOW: &str = "flow: arch\nnodes:\n  pull_x:\n    retry: {attempts: 2, backoff: 10ms}\n    run: {builtin: fail, times: 1, message: not yet}\n  \
     shape: {needs: [pull_x], run: {builtin: noop, outputs: {rows: 3, file: out.csv}}}\n  \
     verify: {needs: [shape], run: {builtin: fail, times: 1, message: 'payments 1204 != ledger 1203'}}\n  \
     export: {needs: [verify], run: {builtin: noop}}\n";

/// What a reader sees of the run: API detail, transitions, each node's logs,
/// the console page (its relative times left out) and the CLI's `runs show`.
async fn views(dev: &Dev, run: &str) -> (Value, Value, Vec<Value>, String, String) {
    let (status, detail) = dev.get(&format!("/runs/{run}")).await;
    assert_eq!(status, 200, "{detail}");
    let (status, transitions) = dev.get(&format!("/runs/{run}/transitions")).await;
    assert_eq!(status, 200, "{transitions}");
    let mut logs = Vec::new();
    for node in ["pull_x", "shape", "verify", "export"] {
        let (status, log) = dev.get(&format!("/runs/{run}/nodes/{node}/logs")).await;
        assert_eq!(status, 200, "{log}");
        logs.push(log);
    }
    let page = dev.http.get(format!("{}/runs/{run}", dev.base)).send().await.expect("console page");
    assert!(page.status().is_success(), "{}", page.status());
    let page = without_times(&page.text().await.expect("page"));
    let show = dev.cli(&["show", run]);
    assert!(show.status.success(), "{}", String::from_utf8_lossy(&show.stderr));
    (detail, transitions, logs, page, String::from_utf8_lossy(&show.stdout).into_owned())
}

/// `html` with the text of its `<time>` elements and its `data-now` (the render
/// time) left out: what depends on when it was rendered.
fn without_times(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    if let Some(start) = rest.find("data-now=\"")
        && let Some(len) = rest[start + 10..].find('"')
    {
        out.push_str(&rest[..start]);
        rest = &rest[start + 10 + len + 1..];
    }
    while let Some(start) = rest.find("<time") {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("</time>") else { break };
        rest = &rest[start + end + "</time>".len()..];
    }
    out.push_str(rest);
    out
}

/// Whether the store has folded `run` (read in the store file, read-only).
async fn folded(db: &std::path::Path, run: &str) -> bool {
    use sqlx::ConnectOptions as _;
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(db).read_only(true);
    let Ok(mut conn) = options.connect().await else { return false };
    let row: Option<(bool,)> = sqlx::query_as("SELECT folded FROM runs WHERE id = ?")
        .bind(run)
        .fetch_optional(&mut conn)
        .await
        .ok()
        .flatten();
    row.is_some_and(|(f,)| f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folded_run_reads_the_same_and_its_rerun_completes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("madeira.yaml");
    std::fs::write(&config, "archive_after: 0s\nlease: 1s\n").expect("write config");
    let data = dir.path().join("data");
    let dev = Dev::start_with(&data, &["--config", &config.to_string_lossy()]);
    dev.put_flow(FLOW).await;
    let run = dev.trigger("arch", json!({})).await;
    let done = dev.finished(&run).await;
    assert_eq!(done["status"], "FAILED", "{done}");
    let before = views(&dev, &run).await;
    assert!(before.0.to_string().contains("out.csv"), "outputs shown: {}", before.0);
    let db = data.join("madeira.db");
    wait_until(Duration::from_secs(60), "the archiver to fold the run", async || {
        if folded(&db, &run).await { Ok(()) } else { Err("not folded yet".to_string()) }
    })
    .await;
    let after = views(&dev, &run).await;
    assert_eq!(after.0, before.0, "run detail");
    assert_eq!(after.1, before.1, "transitions");
    assert_eq!(after.2, before.2, "logs");
    assert_eq!(after.3, before.3, "console run page");
    assert_eq!(after.4, before.4, "madeira show");

    let (status, body) =
        dev.post(&format!("/runs/{run}/nodes/verify/rerun"), json!({"reason": "ledger reloaded"}), &[]).await;
    assert!(status < 300, "rerun after the fold: {status} {body}");
    let rerun = dev.wait_run(&run, 30, |r| r["status"] == "SUCCESS").await;
    let (_, transitions) = dev.get(&format!("/runs/{run}/transitions")).await;
    let old = before.1["transitions"].as_array().or(before.1.as_array()).expect("transitions list").clone();
    let new =
        transitions["transitions"].as_array().or(transitions.as_array()).expect("transitions list").clone();
    assert!(new.len() > old.len(), "{transitions}");
    assert_eq!(new[..old.len()], old[..], "the history before the rerun is whole");
    assert!(rerun.to_string().contains("out.csv"), "outputs kept: {rerun}");
}
