//! `DELETE /api/v1/flows/{name}` in-process: the role matrix (admin only), 409
//! naming the active runs, history readable afterwards (also by the team's scoped
//! token, never by another team's), purge, and promote/demote answers.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use madeira_server::{AuthConfig, Role, TokenEntry};
use serde_json::{Value, json};

async fn send(
    router: &axum::Router,
    token: &str,
    method: &str,
    uri: &str,
    body: &str,
) -> (StatusCode, Value) {
    support::send_as(router, Some(token), method, uri, body).await
}

fn token(name: &str, role: Role, team: Option<&str>) -> TokenEntry {
    TokenEntry {
        name: name.into(),
        role,
        token: format!("{name}-token-0123456789"),
        scope: team.map(|t| BTreeMap::from([("team".to_string(), t.to_string())])),
    }
}

const ADMIN: &str = "root-token-0123456789";
const FIN: &str = "fin-token-0123456789";
const OPS: &str = "ops-token-0123456789";

async fn wait_status(router: &axum::Router, run: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, shown) = send(router, ADMIN, "GET", &format!("/api/v1/runs/{run}"), "").await;
        if shown["status"] == want {
            return;
        }
        assert!(Instant::now() < deadline, "run {run} never {want}: {shown}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn delete_needs_admin_refuses_active_runs_and_keeps_history_per_team() {
    let auth = AuthConfig {
        tokens: Some(vec![
            token("root", Role::Admin, None),
            token("fin", Role::Operator, Some("finance")),
            token("ops", Role::Operator, Some("ops")),
        ]),
    };
    let flows = [
        ("a.yaml", "flow: ledger\nlabels: {team: finance}\nnodes:\n  a: {run: {builtin: sleep, for: 60s}}\n"),
        ("b.yaml", "flow: done\nlabels: {team: finance}\nnodes:\n  a: {run: {builtin: noop}}\n"),
    ];
    let app = support::app_with_auth(&flows, auth).await;
    let r = &app.router;
    let (status, run) = send(r, FIN, "POST", "/api/v1/flows/ledger/runs", "{}").await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let run = run["run_id"].as_str().expect("run id").to_string();
    wait_status(r, &run, "RUNNING").await;

    let (status, body) = send(r, FIN, "DELETE", "/api/v1/flows/ledger", "").await;
    assert_eq!((status, &body["error"]["code"]), (StatusCode::FORBIDDEN, &json!("forbidden")), "{body}");
    let (status, body) = send(r, ADMIN, "DELETE", "/api/v1/flows/ledger", "").await;
    assert_eq!((status, &body["error"]["code"]), (StatusCode::CONFLICT, &json!("flow_active")), "{body}");
    assert_eq!(body["error"]["details"]["runs"], json!([run]));
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains(&run), "{body}");
    let (status, body) = send(r, ADMIN, "DELETE", "/api/v1/flows/ledger?cancle=true", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (status, body) =
        send(r, ADMIN, "DELETE", "/api/v1/flows/ledger?cancel=true&reason=retired", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["cancelled"], &body["runs"], &body["deleted"]),
        (&json!([run]), &json!(1), &json!(true))
    );
    let (_, listed) = send(r, ADMIN, "GET", "/api/v1/flows", "").await;
    let names: Vec<&str> =
        listed["flows"].as_array().expect("flows").iter().filter_map(|f| f["flow"].as_str()).collect();
    assert_eq!(names, ["done"]);
    // The team still reads its deleted flow's run; another team does not learn it exists.
    let (status, shown) = send(r, FIN, "GET", &format!("/api/v1/runs/{run}"), "").await;
    assert_eq!((status, &shown["status"]), (StatusCode::OK, &json!("CANCELLED")), "{shown}");
    let (_, fin_runs) = send(r, FIN, "GET", "/api/v1/runs?flow=ledger", "").await;
    assert_eq!(fin_runs["runs"].as_array().map(Vec::len), Some(1), "{fin_runs}");
    assert_eq!(send(r, OPS, "GET", &format!("/api/v1/runs/{run}"), "").await.0, StatusCode::NOT_FOUND);
    let (_, audit) = send(r, ADMIN, "GET", "/api/v1/audit?limit=10", "").await;
    let entry =
        audit["entries"].as_array().expect("entries").iter().find(|e| e["action"] == "delete_flow").cloned();
    let entry = entry.expect("delete audited");
    assert_eq!(
        (&entry["actor"], &entry["reason"], &entry["details"]["cancelled"]),
        (&json!("root"), &json!("retired"), &json!([run]))
    );

    let (_, done) = send(r, ADMIN, "POST", "/api/v1/flows/done/runs", "{}").await;
    let done = done["run_id"].as_str().expect("run id").to_string();
    wait_status(r, &done, "SUCCESS").await;
    let (status, body) = send(r, ADMIN, "DELETE", "/api/v1/flows/done?purge=true", "").await;
    assert_eq!((status, &body["purged"]), (StatusCode::OK, &json!(true)), "{body}");
    assert_eq!(send(r, ADMIN, "GET", &format!("/api/v1/runs/{done}"), "").await.0, StatusCode::NOT_FOUND);
    assert_eq!(send(r, ADMIN, "DELETE", "/api/v1/flows/done", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn promote_and_demote_answer_with_the_new_version_and_refuse_a_schedule_mismatch() {
    let observed = "flow: nightly\nobserve: true\ntriggers:\n  - cron: \"0 2 * * *\"\n    grace: 10m\nnodes:\n  nightly:\n    run: {sidecar: {group: cron, job: nightly}}\n";
    let app = support::app(&[("n.yaml", observed)]).await;
    let r = &app.router;
    let (status, body) =
        send(r, "", "POST", "/api/v1/flows/nightly/promote", r#"{"cron": "0 3 * * *"}"#).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (StatusCode::CONFLICT, &json!("schedule_mismatch")),
        "{body}"
    );
    let (status, body) =
        send(r, "", "POST", "/api/v1/flows/nightly/promote", r#"{"cron": "0 2 * * *"}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["version"], &body["observe"], &body["changed"]),
        (&json!(2), &json!(false), &json!(true))
    );
    assert_eq!(body["jobs"], json!([{"group": "cron", "job": "nightly"}]));
    assert!(
        body["warnings"][0].as_str().unwrap_or_default().contains("no live sidecar of group `cron`"),
        "{body}"
    );
    let (_, again) = send(r, "", "POST", "/api/v1/flows/nightly/promote", "").await;
    assert_eq!((&again["version"], &again["changed"]), (&json!(2), &json!(false)));
    let (status, body) = send(r, "", "POST", "/api/v1/flows/nightly/demote", r#"{"reason": "back"}"#).await;
    assert_eq!(
        (status, &body["version"], &body["observe"]),
        (StatusCode::OK, &json!(3), &json!(true)),
        "{body}"
    );
    let (_, v3) = send(r, "", "GET", "/api/v1/flows/nightly/versions/3", "").await;
    assert_eq!(v3["source"], observed, "demote gives the imported source back");
}
