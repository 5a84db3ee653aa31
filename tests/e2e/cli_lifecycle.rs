//! Flow lifecycle from the CLI and the API (issue 19 item 10): `apply -f DIR`
//! validates every file before applying any; runs filter by creation time
//! (`since`/`until`, an id range over UUIDv7 run ids).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Dev, hold_for, wait_until};

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test]
async fn apply_a_directory_is_all_or_nothing_and_names_file_and_line() {
    let (dir, dev) = Dev::start();
    let flows = dir.path().join("flows");
    std::fs::create_dir_all(&flows).expect("mkdir");
    std::fs::write(flows.join("a.yaml"), "flow: dir-a\nnodes:\n  x: {run: {builtin: noop}}\n").expect("a");
    std::fs::write(flows.join("b.yml"), "flow: dir-b\nnodes:\n  x: {run: {builtin: noop}}\n").expect("b");
    std::fs::write(flows.join("README.txt"), "not a flow").expect("readme");
    std::fs::write(
        flows.join("c.yaml"),
        "flow: dir-c\nnodes:\n  x: {run: {builtin: noop}}\n  y: {needs: [nope], run: {builtin: noop}}\n",
    )
    .expect("c");
    let out = dev.cli(&["apply", "-f", flows.to_str().expect("path")]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("nothing applied"), "{said}");
    assert!(said.contains(&format!("{}:4: node y:", flows.join("c.yaml").display())), "{said}");
    let (_, listed) = dev.get("/flows").await;
    assert_eq!(listed["flows"], json!([]), "a valid file was applied despite an invalid one: {listed}");

    std::fs::remove_file(flows.join("c.yaml")).expect("rm");
    let out = dev.cli(&["apply", "-f", flows.to_str().expect("path"), "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let applied: Value = serde_json::from_slice(&out.stdout).expect("json");
    let names: Vec<&str> =
        applied["applied"].as_array().expect("applied").iter().filter_map(|r| r["flow"].as_str()).collect();
    assert_eq!(names, ["dir-a", "dir-b"]);

    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let out = dev.cli(&["apply", "-f", empty.to_str().expect("path")]);
    assert!(!out.status.success() && text(&out).contains("no *.yaml or *.yml flow files"), "{}", text(&out));
}

/// The creation millisecond a UUIDv7 run id carries.
fn id_ms(id: &str) -> i64 {
    let hex: String = id.chars().filter(|c| *c != '-').take(12).collect();
    i64::from_str_radix(&hex, 16).expect("v7 id")
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[tokio::test]
async fn runs_filter_by_since_and_until_in_api_and_cli() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: timed\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let early = dev.trigger("timed", json!({})).await;
    let cut = id_ms(&early) + 1;
    wait_until(Duration::from_secs(5), "the clock to move past the cut", async || {
        chrono::Utc::now().timestamp_millis() > cut + 1
    })
    .await;
    let late = dev.trigger("timed", json!({})).await;
    assert!(id_ms(&late) >= cut);
    let ids = |v: &Value| -> Vec<String> {
        v["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .filter_map(|r| r["run_id"].as_str().map(str::to_string))
            .collect()
    };
    let cut = rfc3339(cut).replace('+', "%2B");
    let (_, all) = dev.get("/runs?flow=timed").await;
    assert_eq!(ids(&all), [late.clone(), early.clone()]);
    let (_, since) = dev.get(&format!("/runs?flow=timed&since={cut}")).await;
    assert_eq!(ids(&since), std::slice::from_ref(&late));
    let (_, until) = dev.get(&format!("/runs?flow=timed&until={cut}")).await;
    assert_eq!(ids(&until), std::slice::from_ref(&early));
    let (_, page) = dev.get(&format!("/runs?flow=timed&since={}&limit=1", rfc3339(id_ms(&early)))).await;
    assert_eq!((ids(&page), page["next"].as_str()), (vec![late.clone()], Some(late.as_str())));
    let (status, bad) = dev.get("/runs?since=yesterday").await;
    assert_eq!(status, 400);
    assert!(
        bad["error"]["message"].as_str().unwrap_or_default().starts_with("since `yesterday`: give RFC 3339"),
        "{bad}"
    );
    let (status, _) = dev.get(&format!("/runs?since={cut}&until={cut}")).await;
    assert_eq!(status, 400, "an empty range is refused");

    let out =
        dev.cli(&["runs", "--flow", "timed", "--since", &rfc3339(id_ms(&early) + 1), "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(ids(&listed), [late]);
    let out = dev.cli(&["runs", "--flow", "timed", "--until", &rfc3339(id_ms(&early) + 1)]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains(&early) && printed.lines().count() == 2, "{printed}");
}

async fn delete(dev: &Dev, path: &str) -> (u16, Value) {
    let resp = dev.http.delete(dev.url(path)).send().await.expect("delete");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn audit_actions(audit: &Value) -> Vec<(String, String)> {
    audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (e["action"].as_str().unwrap_or("").to_string(), e["actor"].as_str().unwrap_or("").to_string())
        })
        .collect()
}

#[tokio::test]
async fn flows_delete_refuses_active_runs_unless_cancel_and_keeps_history() {
    let (_dir, dev) = Dev::start();
    dev.put_flow(
        "flow: slow\nconcurrency: {max_active_runs: 1}\nnodes:\n  a: {run: {builtin: sleep, for: 60s}}\n",
    )
    .await;
    let run = dev.trigger("slow", json!({})).await;
    dev.wait_run(&run, 10, |r| r["status"] == "RUNNING").await;
    let queued = dev.trigger("slow", json!({})).await;
    dev.wait_run(&queued, 10, |r| r["status"] == "QUEUED").await;

    let out = dev.cli(&["flows", "delete", "slow"]);
    assert!(!out.status.success(), "deleted with a run active: {}", text(&out));
    assert!(text(&out).contains("409") && text(&out).contains(&run), "{}", text(&out));
    let (status, refused) = delete(&dev, "/flows/slow").await;
    assert_eq!((status, &refused["error"]["code"]), (409, &json!("flow_active")), "{refused}");
    assert_eq!(refused["error"]["details"]["runs"], json!([run, queued]));

    let out = dev.cli(&["flows", "delete", "slow", "--cancel", "--reason", "retired", "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let deleted: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (&deleted["cancelled"], &deleted["runs"], &deleted["purged"]),
        (&json!([run, queued]), &json!(2), &json!(false))
    );
    let (_, listed) = dev.get("/flows").await;
    assert_eq!(listed["flows"], json!([]), "a deleted flow is listed: {listed}");
    assert_eq!(dev.get("/flows/slow").await.0, 404);
    let (status, kept) = dev.get(&format!("/runs/{run}")).await;
    assert_eq!((status, &kept["status"]), (200, &json!("CANCELLED")), "history is kept: {kept}");
    assert_eq!(dev.get(&format!("/runs/{queued}")).await.1["status"], "CANCELLED", "the queued run too");
    let (_, audit) = dev.get("/audit?limit=20").await;
    let actions = audit_actions(&audit);
    assert!(actions.contains(&("delete_flow".into(), "local".into())), "{actions:?}");
    assert!(
        actions.contains(&("cancel".into(), "local".into())),
        "cancelled through the cancel action: {actions:?}"
    );

    // The name can be applied again: the next version, the old runs still there.
    let applied = dev.put_flow("flow: slow\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    assert_eq!(applied["version"], 2, "{applied}");
    let (_, runs) = dev.get("/runs?flow=slow").await;
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(2), "the old runs are still listed: {runs}");
    assert_eq!(delete(&dev, "/flows/nope").await.0, 404);
}

#[tokio::test]
async fn flows_delete_purge_removes_runs_and_a_deleted_cron_flow_stops_firing() {
    let (_dir, dev) = Dev::start();
    dev.put_flow("flow: quick\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    let run = dev.trigger("quick", json!({})).await;
    dev.finished(&run).await;
    let out = dev.cli(&["flows", "delete", "quick", "--purge"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("flow quick deleted; 1 run(s) and its versions purged"), "{}", text(&out));
    assert_eq!(dev.get(&format!("/runs/{run}")).await.0, 404, "a purged run is still readable");
    assert_eq!(dev.get("/flows/quick/versions").await.0, 404);
    let (_, audit) = dev.get("/audit?limit=20").await;
    assert!(audit_actions(&audit).contains(&("delete_flow".into(), "local".into())), "the audit trail stays");

    dev.put_flow(
        "flow: ticking\ntriggers:\n  - cron: \"* * * * * *\"\nnodes:\n  a: {run: {builtin: noop}}\n",
    )
    .await;
    wait_until(Duration::from_secs(15), "the cron flow to fire", async || {
        dev.get("/runs?flow=ticking").await.1["runs"].as_array().is_some_and(|r| !r.is_empty())
    })
    .await;
    let out = dev.cli(&["flows", "delete", "ticking", "--cancel"]);
    assert!(out.status.success(), "{}", text(&out));
    let count =
        || async { dev.get("/runs?flow=ticking&limit=1000").await.1["runs"].as_array().map_or(0, Vec::len) };
    let settled = count().await;
    hold_for(Duration::from_millis(2500), "a deleted cron flow not firing", async || {
        count().await == settled
    })
    .await;
}
