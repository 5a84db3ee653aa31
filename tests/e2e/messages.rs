//! Message triggers on the machine's RabbitMQ (SPEC §6.1), through the real
//! binary: 1,000 messages with 100 duplicate keys make exactly 900 runs and leave
//! nothing unacked; `kill -9` mid-stream loses nothing and doubles nothing; poison
//! goes to `<queue>.dead` with its reason while the rest flows; a `queue_full`
//! refusal is redelivered and runs once the queue drains; a paused flow leaves its
//! messages in the queue until `resume` (or acks them as `filtered` under
//! `on_paused: drop`).

use std::time::Duration;

use futures::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::brokers::{
    amqp_url, bodies, count, dev_with_source, flow_yaml, fresh, message_runs, wait_outcomes,
};
use crate::support::{sigterm_and_wait, wait_until};

pub async fn channel(url: &str) -> (Connection, Channel) {
    let conn = Connection::connect(url, ConnectionProperties::default()).await.expect("connect to RabbitMQ");
    let channel = conn.create_channel().await.expect("channel");
    channel.confirm_select(ConfirmSelectOptions::default()).await.expect("confirms");
    (conn, channel)
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions { durable: true, ..Default::default() }
}

/// Declares `queue` and publishes every body (confirmed), `message_id` = its index.
pub async fn publish(channel: &Channel, queue: &str, bodies: &[(String, Vec<u8>)]) {
    channel.queue_declare(queue.into(), durable(), FieldTable::default()).await.expect("declare");
    let mut confirms = Vec::new();
    for (i, (_, body)) in bodies.iter().enumerate() {
        let props = BasicProperties::default().with_message_id(format!("m{i}").into()).with_delivery_mode(2);
        let confirm = channel
            .basic_publish("".into(), queue.into(), BasicPublishOptions::default(), body, props)
            .await
            .expect("publish");
        confirms.push(confirm);
    }
    for c in confirms {
        c.await.expect("confirmed");
    }
}

/// Messages ready in `queue` (unacked ones come back to ready when their consumer is gone).
pub async fn ready(channel: &Channel, queue: &str) -> u32 {
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .expect("queue exists")
        .message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_1000_messages_with_100_duplicates_make_900_runs_all_acked() {
    let Some(url) = amqp_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = dev_with_source(dir.path(), "rabbitmq", &url);
    let (flow, queue) = (fresh("rmq-900"), fresh("madeira.test.q"));
    dev.put_flow(&flow_yaml(&flow, &format!("queue: {queue}"), "", "")).await;
    let (_conn, ch) = channel(&url).await;
    let started = std::time::Instant::now();
    publish(&ch, &queue, &bodies(900, 100)).await;
    let o = wait_outcomes(&dev, &flow, 120, |o| count(o, "run") + count(o, "duplicate") >= 1000).await;
    let took = started.elapsed();
    assert_eq!((count(&o, "run"), count(&o, "duplicate")), (900, 100), "{o}");
    assert_eq!(message_runs(&dev, &flow).await, 900);
    sigterm_and_wait(&mut dev.child, 30).await;
    assert_eq!(ready(&ch, &queue).await, 0, "every message acked");
    assert_eq!(ready(&ch, &format!("{queue}.dead")).await, 0, "nothing dead-lettered");
    eprintln!("rabbitmq: 1000 messages -> 900 runs in {took:?} (debug build)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_kill_9_mid_stream_still_makes_one_run_per_key() {
    let Some(url) = amqp_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = dev_with_source(dir.path(), "rabbitmq", &url);
    let (flow, queue) = (fresh("rmq-kill"), fresh("madeira.test.q"));
    dev.put_flow(&flow_yaml(&flow, &format!("queue: {queue}"), "", "")).await;
    let (_conn, ch) = channel(&url).await;
    publish(&ch, &queue, &bodies(900, 100)).await;
    let before = wait_outcomes(&dev, &flow, 60, |o| count(o, "run") >= 150).await;
    dev.kill9();
    assert!(count(&before, "run") < 900, "killed mid-stream: {before}");
    let mut dev = dev_with_source(dir.path(), "rabbitmq", &url);
    wait_until(Duration::from_secs(120), "900 runs and an empty queue after the restart", async || {
        let runs = message_runs(&dev, &flow).await;
        let waiting = ready(&ch, &queue).await;
        if runs >= 900 && waiting == 0 { Ok(()) } else { Err(format!("{runs} runs, {waiting} ready")) }
    })
    .await;
    // Whatever the killed consumer had in hand came back: the keys turned it into duplicates.
    wait_outcomes(&dev, &flow, 30, |o| {
        count(o, "run") + count(o, "duplicate") + count(&before, "run") >= 900
    })
    .await;
    sigterm_and_wait(&mut dev.child, 30).await;
    assert_eq!(message_runs_after(&dir, &url, &flow).await, 900, "exactly one run per key");
    assert_eq!(ready(&ch, &queue).await, 0, "nothing left unacked");
}

/// Counts `flow`'s runs on a fresh start of the same data directory.
async fn message_runs_after(dir: &tempfile::TempDir, url: &str, flow: &str) -> usize {
    let dev = dev_with_source(dir.path(), "rabbitmq", url);
    message_runs(&dev, flow).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_poison_is_dead_lettered_with_its_reason_while_the_rest_flows() {
    let Some(url) = amqp_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dev_with_source(dir.path(), "rabbitmq", &url);
    let (flow, queue) = (fresh("rmq-poison"), fresh("madeira.test.q"));
    dev.put_flow(&flow_yaml(&flow, &format!("queue: {queue}"), "", "")).await;
    let (_conn, ch) = channel(&url).await;
    let mut all = bodies(20, 0);
    all.insert(5, ("bad".into(), b"not json {".to_vec()));
    all.insert(10, ("noid".into(), br#"{"no_id": true}"#.to_vec()));
    publish(&ch, &queue, &all).await;
    let o = wait_outcomes(&dev, &flow, 60, |o| count(o, "run") == 20 && count(o, "dead_letter") == 2).await;
    assert_eq!(count(&o, "refused"), 0, "{o}");
    let dead = format!("{queue}.dead");
    let mut consumer = ch
        .basic_consume(
            dead.as_str().into(),
            "t".into(),
            BasicConsumeOptions { no_ack: true, ..Default::default() },
            FieldTable::default(),
        )
        .await
        .expect("consume dead letters");
    let mut reasons = Vec::new();
    for _ in 0..2 {
        let d = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .expect("dead letter")
            .expect("some")
            .expect("ok");
        let headers = d.properties.headers().clone().unwrap_or_default();
        let reason = headers.inner().iter().find(|(k, _)| k.as_str() == "x-madeira-reason").and_then(
            |(_, v)| match v {
                AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
                _ => None,
            },
        );
        reasons.push(reason.expect("x-madeira-reason header"));
    }
    assert!(reasons.iter().any(|r| r.contains("not JSON")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("key:")), "{reasons:?}");
    let (status, alerts) = dev.get("/alerts").await;
    assert_eq!(status, 200, "{alerts}");
    assert!(
        alerts.to_string().contains("MadeiraTriggerMessagePoison"),
        "one warning for the source: {alerts}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_queue_full_is_redelivered_and_runs_once_the_queue_drains() {
    let Some(url) = amqp_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dev_with_source(dir.path(), "rabbitmq", &url);
    let (flow, queue) = (fresh("rmq-full"), fresh("madeira.test.q"));
    let yaml = format!(
        "flow: {flow}\nrate_limit: 100000/s\ntriggers:\n  - message: {{source: bus, queue: {queue}, key: payload.id, max_deliveries: 20}}\nnodes:\n  a: {{throttle: {{max_permits: 1, queue_size: 1}}, run: {{builtin: sleep, for: 300ms}}}}\n"
    );
    dev.put_flow(&yaml).await;
    let (_conn, ch) = channel(&url).await;
    publish(&ch, &queue, &bodies(6, 0)).await;
    let o = wait_outcomes(&dev, &flow, 90, |o| count(o, "run") == 6).await;
    assert!(count(&o, "refused") >= 1, "some were refused with queue_full and redelivered: {o}");
    assert_eq!(count(&o, "dead_letter"), 0, "{o}");
    assert_eq!(message_runs(&dev, &flow).await, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_paused_flow_leaves_messages_in_the_queue_until_resume_or_drops_them() {
    let Some(url) = amqp_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dev_with_source(dir.path(), "rabbitmq", &url);
    let (_conn, ch) = channel(&url).await;
    let (kept, kept_q) = (fresh("rmq-paused"), fresh("madeira.test.q"));
    let (dropped, dropped_q) = (fresh("rmq-drop"), fresh("madeira.test.q"));
    dev.put_flow(&flow_yaml(&kept, &format!("queue: {kept_q}"), "", "")).await;
    dev.put_flow(&flow_yaml(&dropped, &format!("queue: {dropped_q}"), ", on_paused: drop", "")).await;
    for flow in [&kept, &dropped] {
        let (status, body) = dev.post(&format!("/flows/{flow}/pause"), serde_json::json!({}), &[]).await;
        assert_eq!(status, 200, "{body}");
    }
    // The queue-policy consumer shows `paused` (stopped); publishing now leaves the messages ready.
    wait_until(Duration::from_secs(30), "the consumer paused", async || {
        let (_, body) = dev.get("/sources").await;
        let consumers = body["sources"][0]["consumers"].as_array().cloned().unwrap_or_default();
        let paused = consumers.iter().any(|c| c["flow"] == kept.as_str() && c["state"] == "paused");
        if paused { Ok(()) } else { Err(body.to_string()) }
    })
    .await;
    publish(&ch, &kept_q, &bodies(10, 0)).await;
    publish(&ch, &dropped_q, &bodies(5, 0)).await;
    let o = wait_outcomes(&dev, &dropped, 30, |o| count(o, "filtered") == 5).await;
    assert_eq!(count(&o, "run"), 0, "{o}");
    assert_eq!(ready(&ch, &kept_q).await, 10, "messages of a paused flow stay in the broker");
    assert_eq!(message_runs(&dev, &kept).await, 0);
    let (status, body) = dev.post(&format!("/flows/{kept}/resume"), serde_json::json!({}), &[]).await;
    assert_eq!(status, 200, "{body}");
    wait_outcomes(&dev, &kept, 30, |o| count(o, "run") == 10).await;
    assert_eq!(message_runs(&dev, &kept).await, 10);
    assert_eq!(message_runs(&dev, &dropped).await, 0, "on_paused: drop made no run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_show_state_and_counts_without_secrets_and_unknown_sources_are_refused() {
    let Some(url) = amqp_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dev_with_source(dir.path(), "rabbitmq", &url);
    let (flow, queue) = (fresh("rmq-view"), fresh("madeira.test.q"));
    dev.put_flow(&flow_yaml(&flow, &format!("queue: {queue}"), "", "")).await;
    let (_conn, ch) = channel(&url).await;
    publish(&ch, &queue, &bodies(3, 1)).await;
    wait_outcomes(&dev, &flow, 30, |o| count(o, "run") == 3 && count(o, "duplicate") == 1).await;
    let (_, body) = dev.get("/sources").await;
    let text = body.to_string();
    assert_eq!(body["sources"][0]["name"], "bus");
    assert_eq!(body["sources"][0]["type"], "rabbitmq");
    assert_eq!(body["sources"][0]["state"], "up", "{body}");
    let password = url.split("://").nth(1).and_then(|r| r.split('@').next()).unwrap_or("");
    assert!(!password.is_empty() && !text.contains(password), "the URL's credentials never show: {text}");
    let out = std::process::Command::new(crate::support::BIN)
        .args(["sources"])
        .env("MADEIRA_SERVER", &dev.base)
        .output()
        .expect("run madeira sources");
    let cli = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && cli.contains("bus") && cli.contains(&flow) && cli.contains("up"),
        "{cli}"
    );
    let metrics = dev
        .http
        .get(format!("{}/metrics", dev.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("madeira_trigger_source_up{source=\"bus\"} 1"), "{metrics}");
    assert!(
        metrics.contains("madeira_trigger_messages_total{source=\"bus\",outcome=\"duplicate\"} 1"),
        "{metrics}"
    );
    let bad = "flow: bad-source\ntriggers:\n  - message: {source: buss, queue: q}\nnodes:\n  a: {run: {builtin: noop}}\n";
    let resp = dev.http.put(dev.url("/flows/bad-source")).body(bad).send().await.expect("put");
    let status = resp.status().as_u16();
    let answer = resp.text().await.expect("body");
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains(":3: unknown message source `buss`") && answer.contains("did you mean `bus`"),
        "{answer}"
    );
}
