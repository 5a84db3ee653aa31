//! `{prefix}/api/registry`, `/api/registryRemove` and `/api/callback`: what an
//! executor calls. Each request carries its app's token in `XXL-JOB-ACCESS-TOKEN`;
//! a missing or wrong one (or a registration for another app than the token's) is
//! answered 401 with `{code: 500, msg}` and counted. A callback for an attempt
//! already decided, or unknown, is acknowledged and ignored (logged, counted), so
//! executors do not retry it forever.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::protocol::{HandleCallbackParam, RegistryParam, ReturnT, TOKEN_HEADER};
use crate::{Xxl, lock};

pub(crate) fn router(xxl: Xxl) -> Router {
    let p = xxl.prefix().to_string();
    Router::new()
        .route(&format!("{p}/api/registry"), post(registry))
        .route(&format!("{p}/api/registryRemove"), post(registry_remove))
        .route(&format!("{p}/api/callback"), post(callback))
        .with_state(xxl)
}

fn answer(status: StatusCode, body: ReturnT<()>) -> Response {
    (status, axum::Json(body)).into_response()
}

/// A refused request: its status and `msg`.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        answer(self.0, ReturnT::fail(self.1))
    }
}

/// The caller's app, or the refusal to send.
fn authenticate(xxl: &Xxl, headers: &HeaderMap, path: &str) -> Result<String, Refusal> {
    let given = headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok());
    match xxl.app_of_token(given) {
        Some(app) => Ok(app),
        None => {
            let reason = if given.is_none() { "missing_token" } else { "wrong_token" };
            xxl.inner.metrics.refused(reason);
            warn!(path, reason, "XXL-JOB admin request refused: access token missing or wrong");
            Err(Refusal(
                StatusCode::UNAUTHORIZED,
                format!(
                    "The access token is wrong or missing: set xxl.job.accessToken to the token of this app \
                     (server config xxl_job.apps) — {TOKEN_HEADER}"
                ),
            ))
        }
    }
}

fn parse<T: DeserializeOwned>(xxl: &Xxl, body: &[u8], what: &str) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|e| {
        xxl.inner.metrics.refused("bad_body");
        Refusal(StatusCode::BAD_REQUEST, format!("{what}: not XXL-JOB's JSON: {e}"))
    })
}

/// Checks a registration against the token's app.
fn registration(xxl: &Xxl, headers: &HeaderMap, body: &[u8], path: &str) -> Result<RegistryParam, Refusal> {
    let app = authenticate(xxl, headers, path)?;
    let p: RegistryParam = parse(xxl, body, "registry")?;
    if !p.registry_group.eq_ignore_ascii_case("EXECUTOR") {
        xxl.inner.metrics.refused("not_executor");
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            format!("registryGroup `{}`: only EXECUTOR registers here", p.registry_group),
        ));
    }
    if p.registry_key != app {
        xxl.inner.metrics.refused("app_mismatch");
        warn!(token_app = %app, registry_key = %p.registry_key, "XXL-JOB registration for another app than the token's refused");
        return Err(Refusal(
            StatusCode::UNAUTHORIZED,
            format!("this token belongs to app `{app}`, not `{}`", p.registry_key),
        ));
    }
    if !(p.registry_value.starts_with("http://") || p.registry_value.starts_with("https://")) {
        xxl.inner.metrics.refused("bad_address");
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            format!("registryValue `{}` is not an http(s) address", p.registry_value),
        ));
    }
    Ok(p)
}

/// The store did not take a registration or callback: the executor is told to
/// try again (xxl-job-core retries a callback from its file spool; a registration
/// is renewed at the next heartbeat).
fn unavailable(what: &str, e: &madeira_store::StoreError) -> Response {
    warn!(error = %e, what, "XXL-JOB request not kept: the store refused it");
    answer(
        StatusCode::SERVICE_UNAVAILABLE,
        ReturnT::fail(format!("{what} not kept, try again: store unavailable")),
    )
}

async fn registry(State(xxl): State<Xxl>, headers: HeaderMap, body: Bytes) -> Response {
    let p = match registration(&xxl, &headers, &body, "registry") {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let now = madeira_engine::now_ms();
    let dead_after = xxl.inner.options.dead_after;
    let address = crate::registry::normalize(&p.registry_value);
    let dead_ms = i64::try_from(dead_after.as_millis()).unwrap_or(i64::MAX);
    if let Err(e) = xxl.inner.store.xxl_register(&p.registry_key, &address, now, dead_ms).await {
        return unavailable("registration", &e);
    }
    let first = lock(&xxl.inner.registry).register(&p.registry_key, &address, now, dead_after);
    if first {
        info!(app = %p.registry_key, address = %p.registry_value, "XXL-JOB executor registered");
        xxl.executors_changed();
    }
    answer(StatusCode::OK, ReturnT::ok())
}

async fn registry_remove(State(xxl): State<Xxl>, headers: HeaderMap, body: Bytes) -> Response {
    let p = match registration(&xxl, &headers, &body, "registryRemove") {
        Ok(p) => p,
        Err(refused) => return refused.into_response(),
    };
    let address = crate::registry::normalize(&p.registry_value);
    if let Err(e) = xxl.inner.store.xxl_unregister(&p.registry_key, &address).await {
        return unavailable("registryRemove", &e);
    }
    if lock(&xxl.inner.registry).remove(&p.registry_key, &address) {
        info!(app = %p.registry_key, address = %p.registry_value, "XXL-JOB executor removed itself");
    }
    answer(StatusCode::OK, ReturnT::ok())
}

/// Each callback is kept in the store before it is answered, then handed to its
/// attempt when it runs here; one that runs on another replica (or ran here
/// before a restart) reads it from the store.
async fn callback(State(xxl): State<Xxl>, headers: HeaderMap, body: Bytes) -> Response {
    let app = match authenticate(&xxl, &headers, "callback") {
        Ok(app) => app,
        Err(refused) => return refused.into_response(),
    };
    let list: Vec<HandleCallbackParam> = match parse(&xxl, &body, "callback") {
        Ok(list) => list,
        Err(refused) => return refused.into_response(),
    };
    for cb in list {
        let row = madeira_store::XxlCallbackRow {
            log_id: cb.log_id,
            app: app.clone(),
            code: i64::from(cb.code()),
            msg: cb.message().map(str::to_string),
            at_ms: madeira_engine::now_ms(),
        };
        match xxl.inner.store.xxl_put_callback(&row).await {
            Ok(true) => xxl.deliver(&app, cb),
            Ok(false) => {
                xxl.inner.metrics.callback(&app, "repeated");
                info!(
                    log_id = cb.log_id,
                    app,
                    code = cb.code(),
                    "XXL-JOB callback repeated: acknowledged and ignored"
                );
            }
            Err(e) => return unavailable("callback", &e),
        }
    }
    answer(StatusCode::OK, ReturnT::ok())
}

impl Xxl {
    /// Hands a kept callback to the attempt waiting for it here, or records why not.
    pub(crate) fn deliver(&self, app: &str, cb: HandleCallbackParam) {
        let log_id = cb.log_id;
        let mut pending = lock(&self.inner.pending);
        match pending.get(&log_id) {
            Some(p) if p.app != app => {
                drop(pending);
                self.inner.metrics.callback(app, "wrong_app");
                warn!(log_id, token_app = %app, "XXL-JOB callback for another app's attempt ignored");
            }
            Some(_) => {
                let Some(p) = pending.remove(&log_id) else { return };
                drop(pending);
                self.remember_decided(log_id);
                self.inner.metrics.callback(app, "accepted");
                info!(log_id, run_id = %p.run_id, node = %p.node, attempt = p.attempt, code = cb.code(), "XXL-JOB callback");
                let _ = p.tx.send(cb);
            }
            None => {
                drop(pending);
                let result = if self.was_decided(log_id) { "late" } else { "kept" };
                self.inner.metrics.callback(app, result);
                info!(
                    log_id,
                    app,
                    result,
                    code = cb.code(),
                    "XXL-JOB callback kept: no attempt here waits for it (decided, or running on another replica)"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use crate::{AppToken, Xxl, XxlOptions, lock};

    const TOKEN: &str = "order-service-token-1";

    async fn xxl() -> (Xxl, tempfile::TempDir) {
        let apps = vec![
            AppToken { app: "order-service".into(), token: TOKEN.into() },
            AppToken { app: "other".into(), token: "other-service-token-2".into() },
        ];
        crate::testing::xxl(XxlOptions::new(None, apps)).await
    }

    async fn post(xxl: &Xxl, path: &str, token: Option<&str>, body: &str) -> (u16, serde_json::Value) {
        let mut req =
            Request::post(format!("/xxl-job-admin/api/{path}")).header("content-type", "application/json");
        if let Some(t) = token {
            req = req.header("XXL-JOB-ACCESS-TOKEN", t);
        }
        let resp = xxl.router().oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    const REG: &str = r#"{"registryGroup":"EXECUTOR","registryKey":"order-service","registryValue":"http://127.0.0.1:9999/"}"#;

    #[tokio::test]
    async fn registrations_need_their_apps_token() {
        let (x, _dir) = xxl().await;
        let (status, body) = post(&x, "registry", None, REG).await;
        assert_eq!((status, body["code"].as_i64()), (401, Some(500)));
        let (status, _) = post(&x, "registry", Some("order-service-token-X"), REG).await;
        assert_eq!(status, 401);
        let (status, body) = post(&x, "registry", Some("other-service-token-2"), REG).await;
        assert_eq!(status, 401, "another app's token registers nothing: {body}");
        assert!(x.live("order-service").is_empty());
        let refused: u64 = ["missing_token", "wrong_token", "app_mismatch"]
            .iter()
            .map(|r| {
                x.inner
                    .metrics
                    .refused
                    .get_or_create(&crate::metrics::RefusedLabels { reason: r.to_string() })
                    .get()
            })
            .sum();
        assert_eq!(refused, 3);
        let (status, body) = post(&x, "registry", Some(TOKEN), REG).await;
        assert_eq!((status, body["code"].as_i64()), (200, Some(200)));
        assert_eq!(x.live("order-service"), vec!["http://127.0.0.1:9999"]);
        let (status, _) = post(&x, "registryRemove", Some(TOKEN), REG).await;
        assert_eq!(status, 200);
        assert!(x.live("order-service").is_empty());
        let (status, _) = post(&x, "registry", Some(TOKEN), "{not json").await;
        assert_eq!(status, 400);
    }

    #[tokio::test]
    async fn callbacks_reach_their_attempt_once() {
        let (x, _dir) = xxl().await;
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let pending = crate::executor::Pending {
            app: "order-service".into(),
            run_id: "r".into(),
            node: "n".into(),
            attempt: 1,
            tx,
        };
        lock(&x.inner.pending).insert(77, pending);
        let cb = r#"[{"logId":77,"logDateTim":1,"executeResult":{"code":200,"msg":"ok"}}]"#;
        let (status, _) = post(&x, "callback", Some("other-service-token-2"), cb).await;
        assert_eq!(status, 200, "acknowledged");
        assert!(rx.try_recv().is_err(), "another app's callback decides nothing");
        let (status, _) = post(&x, "callback", Some(TOKEN), cb).await;
        assert_eq!(status, 200);
        assert_eq!(rx.try_recv().unwrap().code(), 200);
        let (status, body) = post(&x, "callback", Some(TOKEN), cb).await;
        assert_eq!((status, body["code"].as_i64()), (200, Some(200)), "a repeated callback is acknowledged");
        let repeated =
            crate::metrics::CallbackLabels { app: "order-service".into(), result: "repeated".into() };
        assert_eq!(x.inner.metrics.callbacks.get_or_create(&repeated).get(), 1);
        let kept = x.inner.store.xxl_callbacks(&[77]).await.unwrap();
        let apps: Vec<(&str, i64)> = kept.iter().map(|k| (k.app.as_str(), k.code)).collect();
        assert_eq!(
            apps,
            [("order-service", 200), ("other", 200)],
            "each app's first, kept before the answer"
        );
        let (status, _) =
            post(&x, "callback", Some(TOKEN), r#"[{"logId":78,"handleCode":500,"handleMsg":"x"}]"#).await;
        assert_eq!(status, 200, "no attempt here: kept for the replica that runs it");
        assert_eq!(x.inner.store.xxl_callbacks(&[78]).await.unwrap()[0].code, 500);
    }

    #[tokio::test]
    async fn registrations_are_kept_in_the_store_for_every_replica() {
        let (x, _dir) = xxl().await;
        let (status, _) = post(&x, "registry", Some(TOKEN), REG).await;
        assert_eq!(status, 200);
        let rows = x.inner.store.xxl_executors(0).await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].app.as_str(), rows[0].address.as_str()),
            ("order-service", "http://127.0.0.1:9999")
        );
        // Another replica's registration reaches this one's copy through the store.
        x.inner
            .store
            .xxl_register("order-service", "http://10.0.0.2:9999", madeira_engine::now_ms(), 90_000)
            .await
            .unwrap();
        lock(&x.inner.registry).remove("order-service", "http://127.0.0.1:9999");
        let cancel = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(x.clone().keep_registry(cancel.clone()));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while x.live("order-service").len() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "store rows not read: {:?}",
                x.live("order-service")
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(x.live("order-service"), ["http://10.0.0.2:9999", "http://127.0.0.1:9999"]);
        let (status, _) = post(&x, "registryRemove", Some(TOKEN), REG).await;
        assert_eq!(status, 200);
        assert_eq!(x.inner.store.xxl_executors(0).await.unwrap().len(), 1, "removed from the store too");
        cancel.cancel();
        task.await.unwrap();
    }
}
