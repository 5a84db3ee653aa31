//! Shared helpers of the message-trigger tests: the brokers' URLs (from
//! `MADEIRA_TEST_AMQP_URL`, `MADEIRA_TEST_NATS_URL`, `MADEIRA_TEST_REDIS_URL`; a
//! missing broker skips a test locally and fails it under `CI=true`), a fresh
//! name per test, a `madeira dev` whose config names one source, publishing, and
//! counting runs and outcomes.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::{Dev, wait_until};

/// `var`'s URL, or `default`; `None` (skip) when nothing listens there, except
/// under `CI=true` where a missing broker fails the test.
pub fn broker_url(var: &str, default: &str) -> Option<String> {
    let url = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let host_port = url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .rsplit('@')
        .next()
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("");
    let up = std::net::TcpStream::connect_timeout(
        &host_port.parse().unwrap_or_else(|_| ([127, 0, 0, 1], 1).into()),
        Duration::from_secs(2),
    )
    .is_ok();
    if up {
        return Some(url);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{var}: no broker at {url} (CI=true: failing, not skipping)"
    );
    eprintln!("skipping: no broker at {url} ({var})");
    None
}

pub fn amqp_url() -> Option<String> {
    broker_url("MADEIRA_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
}

pub fn nats_url() -> Option<String> {
    broker_url("MADEIRA_TEST_NATS_URL", "nats://127.0.0.1:4222")
}

pub fn redis_url() -> Option<String> {
    broker_url("MADEIRA_TEST_REDIS_URL", "redis://127.0.0.1:6379")
}

/// A name no other test run uses: `prefix-<pid>-<nanos>`.
pub fn fresh(prefix: &str) -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{prefix}-{}-{}", std::process::id(), nanos % 1_000_000_000_000)
}

/// Writes a config naming one source `bus` of `kind` whose URL is in `MADEIRA_T_BUS_URL`.
pub fn source_config(dir: &Path, kind: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join("madeira.yaml");
    let text = format!("sources:\n  - {{name: bus, type: {kind}, url_env: MADEIRA_T_BUS_URL}}\n{extra}");
    std::fs::write(&path, text).expect("write config");
    path
}

/// `madeira dev` on `dir` with one source `bus` of `kind` at `url`.
pub fn dev_with_source(dir: &Path, kind: &str, url: &str) -> Dev {
    let config = source_config(dir, kind, "");
    let config = config.to_str().expect("utf-8 path").to_string();
    Dev::start_with_all(dir, &["--config", &config], &[("MADEIRA_T_BUS_URL", url)])
}

/// A one-node flow `name` consuming `what` (e.g. `queue: q`) from `bus`, keyed by `payload.id`.
pub fn flow_yaml(name: &str, what: &str, extra_trigger: &str, extra_flow: &str) -> String {
    format!(
        "flow: {name}\nrate_limit: 100000/s\n{extra_flow}triggers:\n  - message: {{source: bus, {what}, key: payload.id{extra_trigger}}}\nnodes:\n  a: {{run: {{builtin: noop}}}}\n"
    )
}

/// The message bodies: `unique` distinct ids, then `dups` repeating the first ones.
pub fn bodies(unique: usize, dups: usize) -> Vec<(String, Vec<u8>)> {
    (0..unique + dups)
        .map(|i| {
            let id = format!("k{}", i % unique);
            let body = serde_json::json!({"id": id, "n": i}).to_string().into_bytes();
            (id, body)
        })
        .collect()
}

/// Counts of consumed messages by outcome for `flow`'s consumer of `bus`.
pub async fn outcomes(dev: &Dev, flow: &str) -> Value {
    let (status, body) = dev.get("/sources").await;
    assert_eq!(status, 200, "{body}");
    let consumers = body["sources"][0]["consumers"].as_array().cloned().unwrap_or_default();
    consumers.into_iter().find(|c| c["flow"] == flow).map(|c| c["messages"].clone()).unwrap_or(Value::Null)
}

pub fn count(outcomes: &Value, outcome: &str) -> u64 {
    outcomes[outcome].as_u64().unwrap_or(0)
}

/// Waits until `cond` holds for `flow`'s outcome counts, or panics after `secs`.
pub async fn wait_outcomes(dev: &Dev, flow: &str, secs: u64, cond: impl Fn(&Value) -> bool) -> Value {
    let what = format!("the outcomes of flow {flow} to reach the condition");
    wait_until(Duration::from_secs(secs), &what, async || {
        let o = outcomes(dev, flow).await;
        if cond(&o) { Ok(o) } else { Err(o.to_string()) }
    })
    .await
}

/// Runs of `flow` (every state), through the paginated list.
pub async fn runs_of(dev: &Dev, flow: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut query = format!("/runs?flow={flow}&limit=1000");
    loop {
        let (status, body) = dev.get(&query).await;
        assert_eq!(status, 200, "{body}");
        out.extend(body["runs"].as_array().cloned().unwrap_or_default());
        match body["next"].as_str() {
            Some(next) if !next.is_empty() => query = format!("/runs?flow={flow}&limit=1000&cursor={next}"),
            _ => return out,
        }
    }
}

/// How many runs `flow` has, each checked to come from a message trigger.
pub async fn message_runs(dev: &Dev, flow: &str) -> usize {
    let runs = runs_of(dev, flow).await;
    for r in &runs {
        assert_eq!(r["trigger"], "message", "{r}");
    }
    runs.len()
}
