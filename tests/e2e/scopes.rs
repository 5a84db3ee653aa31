//! Team scopes on the real `madeira serve`: a token with `scope: {team: finance}`
//! sees only finance flows in the lists (flows, runs, audit) and through the CLI,
//! and another team's run, flow and actions answer 404, not 403.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{BIN, Dev, client};

const FINANCE: &str = "finance-token-0123456789abcdef";
const ADMIN: &str = "admin-token-0123456789abcdef";

fn start(dir: &Path) -> Dev {
    let config = dir.join("madeira.yaml");
    let text = format!(
        "http: 127.0.0.1:0\nstore: sqlite://{}\nauth:\n  tokens:\n    \
         - {{name: fin-ops, role: operator, token_env: MADEIRA_T_FIN, scope: {{team: finance}}}}\n    \
         - {{name: root, role: admin, token_env: MADEIRA_T_ADMIN, scope: {{team: finance}}}}\n",
        dir.join("madeira.db").display()
    );
    std::fs::write(&config, text).expect("write config");
    Dev::serve(&config, &[("MADEIRA_T_FIN", FINANCE), ("MADEIRA_T_ADMIN", ADMIN)], Some(ADMIN))
}

async fn status(req: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = req.send().await.expect("request");
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

fn names(list: &Value, key: &str, field: &str) -> Vec<String> {
    let mut out: Vec<String> = list[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} in {list}"))
        .iter()
        .filter_map(|e| e[field].as_str().map(String::from))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[tokio::test]
async fn scoped_token_sees_and_acts_only_on_its_team() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path());
    server.put_flow("flow: ledger\nlabels: {team: finance}\nnodes:\n  gate: {manual: {prompt: go?}}\n").await;
    server.put_flow("flow: stock\nlabels: {team: supply}\nnodes:\n  gate: {manual: {prompt: go?}}\n").await;
    let mine = server.trigger("ledger", json!({})).await;
    let theirs = server.trigger("stock", json!({})).await;
    server.wait_run(&theirs, 20, |r| r["nodes"]["gate"]["status"] == "MANUAL_CONFIRM").await;
    server.wait_run(&mine, 20, |r| r["nodes"]["gate"]["status"] == "MANUAL_CONFIRM").await;
    let fin = client(Some(FINANCE));

    let (code, flows) = status(fin.get(server.url("/flows"))).await;
    assert_eq!(code, 200, "{flows}");
    assert_eq!(names(&flows, "flows", "flow"), ["ledger"], "another team's flow is absent");
    let (_, runs) = status(fin.get(server.url("/runs"))).await;
    assert_eq!(names(&runs, "runs", "flow"), ["ledger"], "{runs}");
    let (_, runs) = status(fin.get(server.url("/runs?flow=stock"))).await;
    assert_eq!(runs["runs"], json!([]), "{runs}");

    for (method, path) in [
        ("GET", format!("/runs/{theirs}")),
        ("GET", format!("/runs/{theirs}/transitions")),
        ("GET", format!("/runs/{theirs}/nodes/gate/logs")),
        ("POST", format!("/runs/{theirs}/nodes/gate/confirm")),
        ("POST", format!("/runs/{theirs}/cancel")),
        ("GET", "/flows/stock".to_string()),
        ("GET", "/flows/stock/versions".to_string()),
        ("POST", "/flows/stock/runs".to_string()),
        ("POST", "/flows/stock/pause".to_string()),
    ] {
        let req = if method == "GET" {
            fin.get(server.url(&path))
        } else {
            fin.post(server.url(&path)).json(&json!({}))
        };
        let (code, body) = status(req).await;
        assert_eq!(code, 404, "{method} {path}: {body}");
        assert!(!body.to_string().contains("supply"), "a 404 reveals nothing: {body}");
    }
    let (code, body) = status(
        fin.post(server.url(&format!("/runs/{mine}/nodes/gate/confirm"))).json(&json!({"reason": "ours"})),
    )
    .await;
    assert_eq!(code, 200, "its own team's run: {body}");
    assert_eq!(server.finished(&mine).await["status"], "SUCCESS");
    let (code, run) = status(fin.get(server.url(&format!("/runs/{theirs}")))).await;
    assert_eq!(code, 404, "{run}");
    let (_, still) = server.get(&format!("/runs/{theirs}")).await;
    assert_eq!(still["nodes"]["gate"]["status"], "MANUAL_CONFIRM", "the refused actions did nothing");

    // Admin stays global even with a scope in its entry.
    let (_, all) = server.get("/flows").await;
    assert_eq!(names(&all, "flows", "flow"), ["ledger", "stock"]);
    let (code, _) = server.post(&format!("/runs/{theirs}/cancel"), json!({"reason": "admin"}), &[]).await;
    assert_eq!(code, 200, "the admin cancels another team's run");
    let (_, audit) = status(fin.get(server.url("/audit"))).await;
    let runs_in_audit = names(&audit, "entries", "run_id");
    assert_eq!(runs_in_audit, vec![mine.clone()], "the audit list holds only its team's runs: {audit}");

    // The CLI goes through the API with the same token.
    let out = std::process::Command::new(BIN)
        .args(["runs", "--output", "json"])
        .env("MADEIRA_SERVER", &server.base)
        .env("MADEIRA_TOKEN", FINANCE)
        .output()
        .expect("run madeira runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&mine) && !stdout.contains(&theirs), "{stdout}");
    let out = std::process::Command::new(BIN)
        .args(["show", &theirs])
        .env("MADEIRA_SERVER", &server.base)
        .env("MADEIRA_TOKEN", FINANCE)
        .output()
        .expect("run madeira show");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `GET /estate` with a scoped token: its team's flows and the edges between
/// them only; the other team's failed upstream that holds them is not named.
#[tokio::test]
async fn a_scoped_token_sees_its_part_of_the_estate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path());
    server
        .put_flow(
            "flow: sc-pull\nlabels: {team: supply}\nnodes:\n  fetch: {run: {builtin: fail, message: down}}\n",
        )
        .await;
    server
        .put_flow("flow: sc-clean\nlabels: {team: finance}\nafter:\n  - {flow: sc-pull}\nnodes:\n  n: {run: {builtin: noop}}\n")
        .await;
    server
        .put_flow("flow: sc-settle\nlabels: {team: finance}\nafter:\n  - {flow: sc-clean}\nnodes:\n  n: {run: {builtin: noop}}\n")
        .await;
    let day = "2026-12-04";
    let mut runs = Vec::new();
    for flow in ["sc-pull", "sc-clean", "sc-settle"] {
        let (code, body) = server.post(&format!("/flows/{flow}/runs"), json!({"biz_date": day}), &[]).await;
        assert_eq!(code, 201, "{body}");
        runs.push(body["run_id"].as_str().expect("run_id").to_string());
    }
    server.wait_run(&runs[0], 20, |r| r["status"] == "FAILED").await;
    server.wait_run(&runs[2], 20, |r| r["waiting_reason"].is_string()).await;
    // The admin (global) sees the whole chain and its root.
    let (_, all) = server.get(&format!("/estate?date={day}")).await;
    assert_eq!(names(&all, "flows", "flow"), ["sc-clean", "sc-pull", "sc-settle"], "{all}");
    let fin = client(Some(FINANCE));
    let (code, map) = status(fin.get(server.url(&format!("/estate?date={day}")))).await;
    assert_eq!(code, 200, "{map}");
    assert_eq!(names(&map, "flows", "flow"), ["sc-clean", "sc-settle"], "{map}");
    assert!(
        !map.to_string().contains("sc-pull") && !map.to_string().contains("fetch"),
        "nothing names it: {map}"
    );
    let by = |name: &str| map["flows"].as_array().into_iter().flatten().find(|f| f["flow"] == name).cloned();
    let (clean, settle) = (by("sc-clean").expect("clean"), by("sc-settle").expect("settle"));
    assert_eq!((clean["state"].as_str(), &clean["after"]), (Some("held"), &json!([])), "{clean}");
    assert_eq!(clean["waiting_for"], "waiting for a flow outside your scope", "{clean}");
    assert_eq!((clean.get("root_cause"), &clean["root_hidden"]), (None, &json!(true)), "{clean}");
    assert_eq!(settle["after"], json!(["sc-clean"]), "the edge between its own flows: {settle}");
    assert_eq!(settle["waiting_for"], format!("waiting for sc-clean {day}"), "{settle}");
}
