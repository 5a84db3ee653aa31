//! A local webhook receiver for alert tests: keeps every JSON body posted to it,
//! can answer 503 while "down" (counting what it refused), and writes the
//! `alerts:` config section that points a `webhook` channel at it.

use crate::support::{Dev, wait_until};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use serde_json::{Value, json};

#[derive(Default)]
struct Inner {
    bodies: Mutex<Vec<Value>>,
    down: AtomicBool,
    refused: AtomicUsize,
}

pub struct Webhook {
    pub url: String,
    inner: Arc<Inner>,
}

impl Webhook {
    pub async fn start() -> Webhook {
        let inner = Arc::new(Inner::default());
        let state = inner.clone();
        let app = axum::Router::new().fallback(move |body: Bytes| {
            let state = state.clone();
            async move {
                if state.down.load(Ordering::SeqCst) {
                    state.refused.fetch_add(1, Ordering::SeqCst);
                    return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!("down")));
                }
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                state.bodies.lock().expect("bodies").push(body);
                (StatusCode::OK, axum::Json(json!({"ok": true})))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Webhook { url, inner }
    }

    /// The server config's `alerts:` section: one webhook channel named `hook`.
    pub fn config(&self, group_wait: &str) -> String {
        format!(
            "alerts:\n  group_wait: {group_wait}\n  channels:\n    - {{name: hook, type: webhook, url: '{}'}}\n",
            self.url
        )
    }

    /// `madeira dev` with this receiver as its one alert channel (`config`), its
    /// config file and data directory under `dir`.
    pub fn dev(&self, dir: &Path, group_wait: &str) -> Dev {
        self.dev_with(dir, group_wait, "")
    }

    /// The same with `extra` server config lines before the `alerts:` section.
    pub fn dev_with(&self, dir: &Path, group_wait: &str, extra: &str) -> Dev {
        let config = dir.join("madeira.yaml");
        std::fs::write(&config, format!("{extra}{}", self.config(group_wait))).expect("write config");
        Dev::start_with(&dir.join("data"), &["--config", config.to_str().expect("utf-8 path")])
    }

    /// While down, every post is answered 503 and only counted.
    pub fn set_down(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
    }

    pub fn refused(&self) -> usize {
        self.inner.refused.load(Ordering::SeqCst)
    }

    /// Every body received, in order.
    pub fn bodies(&self) -> Vec<Value> {
        self.inner.bodies.lock().expect("bodies").clone()
    }

    /// Waits up to `secs` for `n` bodies; answers every body received by then.
    pub async fn bodies_within(&self, n: usize, secs: u64) -> Vec<Value> {
        let what = format!("{n} messages");
        wait_until(Duration::from_secs(secs), &what, async || {
            let now = self.bodies();
            if now.len() >= n { Ok(now) } else { Err(format!("{now:?}")) }
        })
        .await
    }

    /// Every alert carried by messages of the `kinds` given (`firing`, `update`,
    /// `resolved`, …; all of them when empty), in order.
    pub fn sent(&self, kinds: &[&str]) -> Vec<Value> {
        self.bodies()
            .iter()
            .filter(|body| kinds.is_empty() || kinds.iter().any(|k| body["kind"] == *k))
            .flat_map(|body| body["alerts"].as_array().cloned().unwrap_or_default())
            .collect()
    }

    /// The alerts carried by messages of `kind` (`firing`, `resolved`) that `pick` keeps.
    pub fn alerts(&self, kind: &str, pick: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.bodies()
            .iter()
            .filter(|body| body["kind"] == kind)
            .flat_map(|body| body["alerts"].as_array().cloned().unwrap_or_default())
            .filter(|alert| pick(alert))
            .collect()
    }

    /// Waits up to 30 s for at least one such alert and returns them all.
    pub async fn wait_alerts(&self, kind: &str, pick: impl Fn(&Value) -> bool) -> Vec<Value> {
        let what = format!("a {kind} alert");
        wait_until(Duration::from_secs(30), &what, async || {
            let found = self.alerts(kind, &pick);
            if found.is_empty() { Err(format!("{:?}", self.bodies())) } else { Ok(found) }
        })
        .await
    }
}

/// Distinct alert ids among `alerts` (a delivery may be sent again; an alert is one).
pub fn distinct(alerts: &[Value]) -> usize {
    alerts.iter().filter_map(|a| a["id"].as_str()).collect::<std::collections::BTreeSet<_>>().len()
}

/// Each body's `kind` (`firing`, `update`, `resolved`, …), in order.
pub fn kinds(bodies: &[Value]) -> Vec<&str> {
    bodies.iter().map(|b| b["kind"].as_str().unwrap_or_default()).collect()
}
