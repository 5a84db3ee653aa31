//! Test support: local HTTP receivers on 127.0.0.1:0 that record every request and
//! answer like a robot (or are down, or say slow down, or verify signatures); runs
//! driven through the real planner; the alert component on a real SQLite store with
//! a manual clock; waiting on conditions with deadlines.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::IntoResponse;
use base64::Engine;
use hmac::{KeyInit, Mac};
use madeira_alert::{AlertHandle, AlertMetrics, AlertsConfig, ManualClock, Settings};
use madeira_core::{Action, Command, FlowDef, PlanCtx, RunSnapshot};
use madeira_store::sqlite::SqliteStore;
use madeira_store::{AlertQuery, AlertStore};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How a receiver answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// `{"errcode":0,"errmsg":"ok"}` (also fine for webhooks and Alertmanager).
    Ok,
    /// HTTP 503.
    Down,
    /// `{"errcode":45009}` — WeCom's "slow down".
    SlowDown,
    /// DingTalk: checks `timestamp` and `sign` in the query against the secret.
    VerifyDingtalk(String),
    /// Feishu: checks `timestamp` and `sign` in the body against the secret.
    VerifyFeishu(String),
}

#[derive(Debug, Clone)]
pub struct Hit {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    pub raw: Vec<u8>,
    /// The signature check passed (verifying modes only).
    pub verified: bool,
}

#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    pub hits: Arc<Mutex<Vec<Hit>>>,
    pub mode: Arc<Mutex<Mode>>,
    /// Every request, answered with success or not.
    pub requests: Arc<std::sync::atomic::AtomicUsize>,
}

impl Receiver {
    pub async fn start(mode: Mode) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let receiver = Receiver {
            addr,
            hits: Arc::default(),
            mode: Arc::new(Mutex::new(mode)),
            requests: Arc::default(),
        };
        let app = Router::new().fallback(record).with_state(receiver.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        receiver
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().expect("mode") = mode;
    }

    /// Requests answered with success so far.
    pub fn delivered(&self) -> Vec<Hit> {
        self.hits.lock().expect("hits").clone()
    }

    pub fn count(&self) -> usize {
        self.hits.lock().expect("hits").len()
    }

    pub fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn record(State(r): State<Receiver>, uri: Uri, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    let mode = r.mode.lock().expect("mode").clone();
    r.requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let path = uri.path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let ok = (axum::http::StatusCode::OK, axum::Json(json!({"errcode": 0, "errmsg": "ok", "code": 0})));
    let verified = match &mode {
        Mode::Down => return (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!("down"))),
        Mode::SlowDown => {
            return (
                axum::http::StatusCode::OK,
                axum::Json(json!({"errcode": 45009, "errmsg": "api freq out of limit"})),
            );
        }
        Mode::Ok => true,
        Mode::VerifyDingtalk(secret) => verify_dingtalk(&uri, secret),
        Mode::VerifyFeishu(secret) => verify_feishu(&json, secret),
    };
    if !verified {
        let refused =
            json!({"errcode": 310000, "errmsg": "sign not match", "code": 19021, "msg": "sign match fail"});
        return (axum::http::StatusCode::OK, axum::Json(refused));
    }
    r.hits.lock().expect("hits").push(Hit { path, headers, body: json, raw: body.to_vec(), verified });
    ok
}

fn hmac_b64(key: &[u8], msg: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("hmac key");
    mac.update(msg);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// `sha256=` + hex HmacSHA256, computed here independently of the crate.
pub fn webhook_signature(secret: &str, ts: i64, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("hmac key");
    mac.update(format!("{ts}.").as_bytes());
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    format!("sha256={}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn now_ms() -> i64 {
    madeira_engine::now_ms()
}

/// DingTalk's check: `sign == base64(HmacSHA256(secret, ts + "\n" + secret))`, ts within an hour.
fn verify_dingtalk(uri: &Uri, secret: &str) -> bool {
    let query: HashMap<String, String> = reqwest::Url::parse(&format!("http://x{uri}"))
        .map(|u| u.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect())
        .unwrap_or_default();
    let (Some(ts), Some(sign)) = (query.get("timestamp"), query.get("sign")) else {
        return false;
    };
    let fresh = ts.parse::<i64>().is_ok_and(|t| (now_ms() - t).abs() < 3_600_000);
    fresh && *sign == hmac_b64(secret.as_bytes(), format!("{ts}\n{secret}").as_bytes())
}

/// Feishu's check: `sign == base64(HmacSHA256(key = ts + "\n" + secret, ""))`.
fn verify_feishu(body: &Value, secret: &str) -> bool {
    let (Some(ts), Some(sign)) = (body["timestamp"].as_str(), body["sign"].as_str()) else {
        return false;
    };
    let fresh = ts.parse::<i64>().is_ok_and(|t| (now_ms() / 1000 - t).abs() < 3_600);
    fresh && sign == hmac_b64(format!("{ts}\n{secret}").as_bytes(), b"")
}

/// Polls `cond` until it holds; panics with `what` after 10 s.
pub async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The alert component on a SQLite store in `dir`, with a manual clock.
pub struct Harness {
    pub clock: ManualClock,
    pub handle: AlertHandle,
    pub store: Arc<SqliteStore>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

pub fn settings(config: Value, env: &[(&str, &str)]) -> Settings {
    let config: AlertsConfig = serde_json::from_value(config).expect("alerts config");
    let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let mut settings = config.resolve(&|k| env.get(k).cloned()).expect("resolve");
    settings.retry.jitter = Duration::ZERO;
    settings
}

impl Harness {
    pub async fn start(dir: &Path, settings: Settings, clock: ManualClock) -> Harness {
        Harness::start_with(dir, settings, clock, None).await
    }

    /// As `start`, checking stall and slow alerts with `probe`.
    pub async fn start_with(
        dir: &Path,
        settings: Settings,
        clock: ManualClock,
        probe: Option<Arc<dyn madeira_alert::NodeProbe>>,
    ) -> Harness {
        let store = Arc::new(SqliteStore::open_path(&dir.join("m.db")).await.expect("store"));
        let (mut task, handle) =
            madeira_alert::build(settings, store.clone(), AlertMetrics::default(), Arc::new(clock.clone()))
                .expect("build");
        if let Some(probe) = probe {
            task = task.with_probe(probe);
        }
        let cancel = CancellationToken::new();
        let task = tokio::spawn(task.run(cancel.clone()));
        Harness { clock, handle, store, cancel, task }
    }

    pub async fn stop(self) {
        self.cancel.cancel();
        self.task.await.expect("alert task");
    }

    /// Advances the manual clock in `step`s over `total`, letting the component act.
    pub async fn advance(&self, total: Duration, step: Duration) {
        let mut done = Duration::ZERO;
        while done < total {
            self.settle().await;
            self.clock.advance(step);
            done += step;
            self.settle().await;
        }
    }

    /// Waits until the component has done everything due now.
    pub async fn settle(&self) {
        tokio::time::timeout(Duration::from_secs(10), self.handle.settled())
            .await
            .expect("settled within 10 s")
            .expect("alert task running");
    }

    /// Every delivery row of every alert, by status.
    pub async fn delivery_states(&self) -> Vec<(String, String, String)> {
        let all = AlertQuery { status: None, flow: None, limit: 1000, before: None };
        let ids: Vec<String> =
            self.store.list_alerts(&all).await.expect("list").into_iter().map(|a| a.id).collect();
        let rows = self.store.deliveries_of(&ids).await.expect("deliveries");
        rows.into_iter().map(|d| (d.channel, d.kind, d.status)).collect()
    }
}

/// A flow: `root` plus a strong chain/fan of `n` downstream nodes.
pub fn flow(name: &str, downstream: usize) -> Arc<FlowDef> {
    let mut yaml = format!(
        "flow: {name}\nlabels: {{team: finance}}\ndefaults:\n  retry: {{attempts: 3, backoff: 1s}}\nnodes:\n  root: {{run: {{builtin: noop}}}}\n"
    );
    for i in 0..downstream {
        let up = if i < 2 { "root".to_string() } else { format!("d{}", i - 2) };
        yaml.push_str(&format!("  d{i}: {{needs: [{up}], run: {{builtin: noop}}}}\n"));
    }
    Arc::new(madeira_core::spec::parse_flow(&format!("{name}.yaml"), &yaml).expect("flow"))
}

/// Drives a run through the real planner: nodes in `failing` fail (retryably,
/// until their retries run out) with the given error; all others succeed.
pub fn drive(snap: &mut RunSnapshot, first: Command, failing: &HashMap<&str, &str>) {
    let ctx = PlanCtx { now_ms: now_ms(), jitter_unit: 0.0 };
    let mut commands = vec![first];
    while let Some(cmd) = commands.pop() {
        let Ok(plan) = madeira_core::plan::apply(snap, &cmd, &ctx) else {
            continue;
        };
        for action in plan.actions {
            match action {
                Action::Ready { node } => commands.push(Command::Dispatch { node }),
                Action::ScheduleRetry { node, .. } => commands.push(Command::RetryDue { node }),
                Action::Execute { node, attempt, .. } => {
                    let name = snap.flow.nodes[node].id.as_str();
                    commands.push(match failing.get(name) {
                        Some(error) => Command::AttemptFailed {
                            node,
                            attempt,
                            error: error.to_string(),
                            retryable: true,
                        },
                        None => Command::AttemptSucceeded { node, attempt, outputs: Default::default() },
                    });
                }
                _ => {}
            }
        }
    }
}

/// A finished run of `flow` whose `root` failed with `error` after its retries.
pub fn failed_run(flow: &Arc<FlowDef>, run_id: &str, error: &str) -> RunSnapshot {
    let mut snap = RunSnapshot::new(run_id.to_string(), flow.clone(), json!({}));
    drive(&mut snap, Command::Start, &HashMap::from([("root", error)]));
    snap
}
