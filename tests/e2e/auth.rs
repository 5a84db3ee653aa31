//! Authentication and roles on the real `madeira serve` (SPEC §10): refusal to
//! start without tokens, 401 without or with a wrong token, 403 for a role too
//! weak, and the audit log naming the token that acted.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{BIN, Dev, audit_entries, client};

const VIEWER: &str = "viewer-token-0123456789abcdef";
const OPERATOR: &str = "operator-token-0123456789abcdef";
const ADMIN: &str = "admin-token-0123456789abcdef";

fn write_config(dir: &Path, auth: &str) -> std::path::PathBuf {
    let db = dir.join("madeira.db");
    let config = dir.join("madeira.yaml");
    let text = format!("http: 127.0.0.1:0\nstore: sqlite://{}\n{auth}", db.display());
    std::fs::write(&config, text).expect("write config");
    config
}

#[test]
fn serve_without_tokens_exits_64_naming_the_setting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), "");
    let out = Command::new(BIN).arg("serve").arg("--config").arg(&config).output().expect("run serve");
    assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("auth.tokens"), "{stderr}");

    let config = write_config(
        dir.path(),
        "auth:\n  tokens:\n    - {name: sre, role: operator, token_env: MADEIRA_T_UNSET_TOKEN}\n",
    );
    let out = Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env_remove("MADEIRA_T_UNSET_TOKEN")
        .output()
        .expect("run serve");
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("MADEIRA_T_UNSET_TOKEN") && stderr.contains("sre"), "{stderr}");
}

fn start(dir: &Path) -> Dev {
    let admin_file = dir.join("admin.token");
    std::fs::write(&admin_file, format!("{ADMIN}\n")).expect("write token file");
    let config = write_config(
        dir,
        &format!(
            "auth:\n  tokens:\n    - {{name: grafana, role: viewer, token_env: MADEIRA_T_VIEW}}\n    \
             - {{name: sre, role: operator, token_env: MADEIRA_T_OPS}}\n    \
             - {{name: ci, role: admin, token_file: {}}}\n",
            admin_file.display()
        ),
    );
    Dev::serve(&config, &[("MADEIRA_T_VIEW", VIEWER), ("MADEIRA_T_OPS", OPERATOR)], Some(ADMIN))
}

async fn status(req: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = req.send().await.expect("request");
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn tokens_roles_and_audit_by_token_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path());
    let (none, wrong, viewer, operator) = (
        client(None),
        client(Some("not-a-token-at-all-xxxxxx")),
        client(Some(VIEWER)),
        client(Some(OPERATOR)),
    );
    let health = none.get(format!("{}/healthz", server.base)).send().await.expect("healthz");
    assert_eq!(health.status().as_u16(), 200, "/healthz needs no token");

    let (code, body) = status(none.get(server.url("/flows"))).await;
    assert_eq!(code, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    assert_eq!(status(wrong.get(server.url("/flows"))).await.0, 401);
    assert_eq!(status(viewer.get(server.url("/flows"))).await.0, 200);

    let flow = "flow: guarded\nnodes:\n  gate: {manual: {prompt: go?}}\n";
    let put = |c: &reqwest::Client| c.put(server.url("/flows/guarded")).body(flow);
    let (code, body) = status(put(&viewer)).await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    assert_eq!(status(put(&operator)).await.0, 403, "applying flows needs admin");
    assert_eq!(status(put(&none)).await.0, 401);
    server.put_flow(flow).await;

    let trigger = |c: &reqwest::Client| c.post(server.url("/flows/guarded/runs")).json(&json!({}));
    assert_eq!(status(trigger(&none)).await.0, 401);
    assert_eq!(status(trigger(&viewer)).await.0, 403);
    let (code, created) = status(trigger(&operator)).await;
    assert_eq!(code, 201, "{created}");
    let run_id = created["run_id"].as_str().expect("run_id").to_string();
    server.wait_run(&run_id, 20, |r| r["nodes"]["gate"]["status"] == "MANUAL_CONFIRM").await;

    let confirm = |c: &reqwest::Client| {
        c.post(server.url(&format!("/runs/{run_id}/nodes/gate/confirm"))).json(&json!({"reason": "checked"}))
    };
    assert_eq!(status(confirm(&viewer)).await.0, 403);
    assert_eq!(status(confirm(&wrong)).await.0, 401);
    assert_eq!(status(confirm(&operator)).await.0, 200);
    let run = server.finished(&run_id).await;
    assert_eq!(run["status"], "SUCCESS");

    let (code, audit) = status(viewer.get(server.url(&format!("/audit?run_id={run_id}")))).await;
    assert_eq!(code, 200);
    let entries = audit_entries(&audit);
    assert_eq!(entries, [("confirm", "sre", "checked")], "the audit log names the token, never its secret");
    let (_, transitions) = status(viewer.get(server.url(&format!("/runs/{run_id}/transitions")))).await;
    let text = transitions.to_string();
    assert!(!text.contains(OPERATOR) && !audit.to_string().contains(OPERATOR), "no secret is echoed");
}
