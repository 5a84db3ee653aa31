//! The OpenAPI document cannot drift: the (path, method) pairs the router serves
//! equal the document's, every error code the handlers use is in its `ErrorCode`
//! enum, and real answers have the documented properties.

use std::collections::BTreeSet;

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use support::{app, send};
use tower::ServiceExt;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "DELETE", "PATCH"];

fn spec() -> Value {
    serde_json::to_value(madeira_server::openapi()).expect("spec serializes")
}

#[tokio::test]
async fn the_router_serves_exactly_the_documented_paths_and_methods() {
    let app = app(&[]).await;
    let mut served = BTreeSet::new();
    for path in madeira_server::api_paths() {
        let concrete: String = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "x" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        for method in METHODS {
            let (status, body) = send(&app.router, method, &format!("/api/v1{concrete}"), "").await;
            if status != StatusCode::METHOD_NOT_ALLOWED {
                assert_ne!(
                    body["error"]["message"],
                    "no such API route; see SPEC §9 or /api/v1/openapi.json"
                );
                served.insert(format!("{method} /api/v1{path}"));
            }
        }
    }
    let doc = spec();
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if item.get(method.to_lowercase()).is_some() {
                documented.insert(format!("{method} {path}"));
            }
        }
    }
    assert!(served.len() > 15, "probe found too few routes: {served:?}");
    assert_eq!(served, documented, "router (left) and /api/v1/openapi.json (right) differ");
}

#[tokio::test]
async fn the_document_is_served_as_openapi_3_1_with_bearer_auth() {
    let app = app(&[]).await;
    let (status, doc) = send(&app.router, "GET", "/api/v1/openapi.json", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc, spec());
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    let get_run = &doc["paths"]["/api/v1/runs/{id}"]["get"];
    assert_eq!(
        get_run["responses"]["404"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ErrorBody"
    );
    let params: Vec<&str> = doc["paths"]["/api/v1/runs"]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(params.contains(&"cursor") && params.contains(&"status"), "{params:?}");
}

/// Every `ApiError::new(StatusCode::X, "code", ..)` in the crate's source names a
/// code the document's `ErrorCode` lists.
#[test]
fn every_error_code_in_use_is_documented() {
    let doc = spec();
    let listed: BTreeSet<String> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("ErrorCode enum")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let mut used = BTreeSet::from(["bad_request".to_string(), "not_found".to_string()]);
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![src];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read");
            // `ApiError::new(<status>, "<code>"` with the status on the same or the next line.
            let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
            for piece in flat.split("ApiError::new(").skip(1) {
                if let Some(code) = piece.split_once(", \"").and_then(|(_, rest)| rest.split_once('"')) {
                    used.insert(code.0.to_string());
                }
            }
        }
    }
    assert!(used.len() > 15, "scan found too few codes: {used:?}");
    let missing: Vec<_> = used.difference(&listed).collect();
    assert!(missing.is_empty(), "error codes used but not in the OpenAPI ErrorCode enum: {missing:?}");
}

/// The top-level keys of a real answer equal the documented schema's properties.
fn assert_shape(doc: &Value, schema: &str, answer: &Value) {
    let props: BTreeSet<&str> = doc["components"]["schemas"][schema]["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("schema {schema} has no properties"))
        .keys()
        .map(String::as_str)
        .collect();
    let keys: BTreeSet<&str> =
        answer.as_object().expect("object answer").keys().map(String::as_str).collect();
    assert_eq!(keys, props, "{schema}: answer keys (left) vs documented properties (right): {answer}");
}

#[tokio::test]
async fn real_answers_have_the_documented_shapes() {
    let app = app(&[]).await;
    let doc = spec();
    let flow = "flow: shape\nnodes:\n  a: {run: {builtin: noop}}\n";
    let (status, applied) = send(&app.router, "PUT", "/api/v1/flows/shape", flow).await;
    assert_eq!(status, StatusCode::CREATED, "{applied}");
    assert_shape(&doc, "ApplyAnswer", &applied);
    let (_, detail) = send(&app.router, "GET", "/api/v1/flows/shape", "").await;
    assert_shape(&doc, "FlowDetail", &detail);
    let (status, run) = send(&app.router, "POST", "/api/v1/flows/shape/runs", "{}").await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_shape(&doc, "TriggerAnswer", &run);
    let id = run["run_id"].as_str().expect("run id");
    let (_, list) = send(&app.router, "GET", "/api/v1/runs", "").await;
    assert_shape(&doc, "RunList", &list);
    assert_shape(&doc, "RunSummary", &list["runs"][0]);
    let (_, shown) = send(&app.router, "GET", &format!("/api/v1/runs/{id}"), "").await;
    assert_shape(&doc, "RunDetail", &shown);
    let (_, versions) = send(&app.router, "GET", "/api/v1/flows/shape/versions", "").await;
    assert_shape(&doc, "FlowVersions", &versions);
    assert_shape(&doc, "FlowVersion", &versions["versions"][0]);
    let (status, missing) = send(&app.router, "GET", "/api/v1/runs/nope", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_shape(&doc, "ErrorBody", &missing);
    assert_shape(&doc, "ErrorObject", &missing["error"]);
    let (_, paused) = send(&app.router, "POST", "/api/v1/flows/shape/pause", &json!({}).to_string()).await;
    assert_shape(&doc, "PauseAnswer", &paused);
}

/// What `openapi-spec-validator` (run by `.ci/openapi`) refused once: shared
/// operation ids, path actions without an enum, the SSE log stream undocumented.
#[test]
fn operation_ids_are_unique_actions_are_enums_and_follow_is_sse() {
    let doc = spec();
    let mut seen = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path}: no operationId"));
            assert!(seen.insert(id.to_string()), "operationId `{id}` ({method} {path}) is not unique");
        }
    }
    let schemas = &doc["components"]["schemas"];
    let action_enum = |path: &str| -> Vec<String> {
        let params = doc["paths"][path]["post"]["parameters"].as_array().expect("parameters");
        let action = params.iter().find(|p| p["name"] == "action").expect("action parameter");
        let reference = action["schema"]["$ref"].as_str().expect("a $ref to the enum");
        let name = reference.rsplit('/').next().expect("schema name");
        let values = schemas[name]["enum"].as_array().unwrap_or_else(|| panic!("{name} has no enum"));
        values.iter().map(|v| v.as_str().expect("string").to_string()).collect()
    };
    assert_eq!(action_enum("/api/v1/flows/{name}/{action}"), ["pause", "resume"]);
    assert_eq!(action_enum("/api/v1/backfills/{id}/{action}"), ["pause", "resume", "cancel"]);
    assert_eq!(
        action_enum("/api/v1/runs/{id}/nodes/{node}/{action}"),
        ["confirm", "reject", "rerun", "mark-success", "skip"]
    );
    let ok = &doc["paths"]["/api/v1/runs/{id}/nodes/{node}/logs"]["get"]["responses"]["200"]["content"];
    assert!(ok["application/json"].is_object(), "{ok}");
    assert_eq!(ok["text/event-stream"]["schema"]["$ref"], "#/components/schemas/LogStreamEvent", "{ok}");
    let event = &schemas["LogStreamEvent"]["properties"];
    assert!(event["event"].is_object() && event["id"].is_object() && event["data"].is_object(), "{event}");
}

/// A wrong method's 405 names the allowed methods in its body as in its `Allow`
/// header (the body once said `use ` and `"allow": ""`).
#[tokio::test]
async fn a_wrong_method_names_the_allowed_ones() {
    let app = app(&[]).await;
    for (method, uri, allowed) in [
        ("PATCH", "/api/v1/runs", "GET,HEAD"),
        ("DELETE", "/api/v1/flows/x/runs", "POST"),
        ("POST", "/api/v1/flows/x", "GET,HEAD,PUT,DELETE"),
        ("POST", "/healthz", "GET,HEAD"),
        ("DELETE", "/admin/log-level", "GET,HEAD,PUT"),
    ] {
        let request = Request::builder().method(method).uri(uri).body(Body::empty()).expect("request");
        let response = app.router.clone().oneshot(request).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        let header = response.headers()["allow"].to_str().expect("ascii").to_string();
        let mut sorted: Vec<&str> = header.split(',').map(str::trim).collect();
        sorted.sort_unstable();
        let mut want: Vec<&str> = allowed.split(',').collect();
        want.sort_unstable();
        assert_eq!(sorted, want, "{method} {uri}: Allow");
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.expect("body");
        let body: Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(body["error"]["code"], "method_not_allowed");
        assert_eq!(body["error"]["details"]["allow"], header, "{body}");
        let message = body["error"]["message"].as_str().expect("message");
        assert_eq!(message, format!("{method} is not allowed on {uri}; use {header}"));
    }
}
