//! Property test: arbitrary JSON bodies and path segments sent to the API handlers
//! (in process, on a real SQLite store) get a clean answer — a 2xx, or an error
//! with the contract shape and a 4xx status — never a panic or a 500.

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use proptest::prelude::*;
use serde_json::Value;
use support::app;
use tower::ServiceExt;

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        prop_oneof![Just("params"), Just("reason"), Just("type"), Just("id"), Just("version")]
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("params".to_string()),
                    Just("reason".to_string()),
                    Just("type".to_string()),
                    Just("id".to_string()),
                    Just("payload".to_string()),
                    Just("downstream".to_string()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const FUZZ_FLOW: &str = "flow: fuzz\ntriggers:\n  - event: e\nnodes:\n  a: {run: {builtin: noop}}\n";

async fn send(router: &axum::Router, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
    (status, bytes.to_vec())
}

fn check(status: StatusCode, body: &[u8], what: &str) -> Result<(), TestCaseError> {
    prop_assert!(status.as_u16() < 500, "{what}: {status} {}", String::from_utf8_lossy(body));
    if !status.is_success() {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
        prop_assert!(v["error"]["code"].is_string() && v["error"]["message"].is_string(), "{what}: {v}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn arbitrary_json_gets_a_clean_answer(body in arb_json(), raw in prop::collection::vec(any::<u8>(), 0..64), segment in "[a-zA-Z0-9_.~-]{1,12}") {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let app = app(&[("fuzz.yaml", FUZZ_FLOW)]).await;
            let json = serde_json::to_vec(&body).expect("json");
            let targets = [
                ("POST", "/api/v1/flows/fuzz/runs".to_string()),
                ("POST", "/api/v1/events".to_string()),
                ("POST", format!("/api/v1/flows/{segment}/runs")),
                ("POST", format!("/api/v1/runs/{segment}/cancel")),
                ("POST", format!("/api/v1/runs/{segment}/nodes/a/rerun")),
                ("POST", format!("/api/v1/flows/fuzz/{segment}")),
                ("PUT", format!("/api/v1/flows/{segment}")),
                ("POST", "/api/v1/flows/fuzz/promote".to_string()),
                ("POST", "/api/v1/flows/fuzz/demote".to_string()),
                ("DELETE", format!("/api/v1/flows/{segment}?cancel=true")),
            ];
            for (method, uri) in &targets {
                for payload in [json.clone(), raw.clone()] {
                    let (status, bytes) = send(&app.router, method, uri, payload).await;
                    check(status, &bytes, &format!("{method} {uri}"))?;
                }
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}
