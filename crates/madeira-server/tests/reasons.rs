//! Every operator action (confirm, reject, rerun, mark-success, skip, cancel)
//! needs a non-blank `reason`: without one the API answers 400 naming the field,
//! and nothing is done or audited.

mod support;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::json;
use support::{app, send};

const FLOW: &str = "flow: gated\nnodes:\n  gate:\n    manual: {prompt: ok?}\n";

#[tokio::test]
async fn actions_without_a_reason_answer_400_naming_the_field_and_do_nothing() {
    let app = app(&[("gated.yaml", FLOW)]).await;
    let (status, run) = send(&app.router, "POST", "/api/v1/flows/gated/runs", "{}").await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let id = run["run_id"].as_str().expect("run id").to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, run) = send(&app.router, "GET", &format!("/api/v1/runs/{id}"), "").await;
        if run["nodes"]["gate"]["status"] == "MANUAL_CONFIRM" {
            break;
        }
        assert!(Instant::now() < deadline, "gate never waited: {run}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let actions = ["confirm", "reject", "rerun", "mark-success", "skip"]
        .map(|a| format!("/api/v1/runs/{id}/nodes/gate/{a}"))
        .into_iter()
        .chain([format!("/api/v1/runs/{id}/cancel")]);
    for uri in actions {
        for (body, what) in [
            ("", "missing"),
            ("{}", "missing"),
            (r#"{"downstream": true}"#, "missing"),
            (r#"{"reason": null}"#, "missing"),
            (r#"{"reason": ""}"#, "blank"),
            (r#"{"reason": "  \t\n "}"#, "blank"),
        ] {
            let (status, answer) = send(&app.router, "POST", &uri, body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{uri} {body}: {answer}");
            assert_eq!(answer["error"]["code"], "bad_request", "{answer}");
            assert_eq!(answer["error"]["details"]["field"], "reason", "{answer}");
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(message.starts_with(&format!("`reason` is {what}: ")), "{uri} {body}: {message}");
        }
    }
    let (_, audit) = send(&app.router, "GET", "/api/v1/audit", "").await;
    assert_eq!(audit["entries"], json!([]), "a refused action is not audited: {audit}");
    let (_, run) = send(&app.router, "GET", &format!("/api/v1/runs/{id}"), "").await;
    assert_eq!(run["nodes"]["gate"]["status"], "MANUAL_CONFIRM", "{run}");

    let uri = format!("/api/v1/runs/{id}/nodes/gate/confirm");
    let (status, answer) = send(&app.router, "POST", &uri, r#"{"reason": "  numbers ok "}"#).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (_, audit) = send(&app.router, "GET", "/api/v1/audit", "").await;
    assert_eq!(audit["entries"][0]["reason"], "numbers ok", "kept trimmed: {audit}");
}
