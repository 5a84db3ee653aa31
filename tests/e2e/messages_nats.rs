//! Message triggers on NATS JetStream (SPEC §6.1): 1,000 messages with 100
//! duplicate keys on a fresh stream make exactly 900 runs; afterwards the durable
//! consumer has nothing pending and nothing unacknowledged; a poison message is
//! published to `<stream>.dead` with its reason and terminated while the rest flows;
//! our own `nats-server -js` (free port, own store) restarted mid-stream: the
//! consumer says `down`, then resumes by itself.

use std::time::Instant;

use async_nats::jetstream;

use crate::brokers::{
    bodies, count, dev_with_source, flow_yaml, fresh, message_runs, nats_url, wait_outcomes,
};
use crate::support::{sigterm_and_wait, wait_blocking, wait_until};

/// A fresh stream `name` capturing `name.>` (its dead letters, `name.dead`, too).
pub async fn stream(url: &str, name: &str) -> jetstream::Context {
    let client = async_nats::connect(url).await.expect("connect to NATS");
    let js = jetstream::new(client);
    let config = jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![format!("{name}.>")],
        ..Default::default()
    };
    js.create_stream(config).await.expect("create stream");
    js
}

pub async fn publish(js: &jetstream::Context, subject: &str, bodies: &[(String, Vec<u8>)]) {
    let mut acks = Vec::new();
    for (_, body) in bodies {
        acks.push(js.publish(subject.to_string(), body.clone().into()).await.expect("publish"));
    }
    for ack in acks {
        ack.await.expect("stored");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jetstream_1000_messages_with_100_duplicates_make_900_runs_all_acked() {
    let Some(url) = nats_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = dev_with_source(dir.path(), "nats", &url);
    let (flow, name) = (fresh("nats-900"), fresh("MADEIRA_T").replace('-', "_"));
    let js = stream(&url, &name).await;
    let what = format!("stream: {name}, consumer: madeira, subject: {name}.pay");
    dev.put_flow(&flow_yaml(&flow, &what, "", "")).await;
    let started = Instant::now();
    publish(&js, &format!("{name}.pay"), &bodies(900, 100)).await;
    let o = wait_outcomes(&dev, &flow, 120, |o| count(o, "run") + count(o, "duplicate") >= 1000).await;
    let took = started.elapsed();
    assert_eq!((count(&o, "run"), count(&o, "duplicate")), (900, 100), "{o}");
    assert_eq!(message_runs(&dev, &flow).await, 900);
    sigterm_and_wait(&mut dev.child, 30).await;
    let s = js.get_stream(&name).await.expect("stream");
    let mut consumer: jetstream::consumer::PullConsumer =
        s.get_consumer("madeira").await.expect("durable consumer");
    let info = consumer.info().await.expect("consumer info");
    assert_eq!((info.num_pending, info.num_ack_pending), (0, 0), "everything delivered and acked");
    js.delete_stream(&name).await.expect("delete stream");
    eprintln!("nats jetstream: 1000 messages -> 900 runs in {took:?} (debug build)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jetstream_poison_goes_to_the_dead_letter_subject_with_its_reason() {
    let Some(url) = nats_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dev_with_source(dir.path(), "nats", &url);
    let (flow, name) = (fresh("nats-poison"), fresh("MADEIRA_T").replace('-', "_"));
    let js = stream(&url, &name).await;
    dev.put_flow(&flow_yaml(
        &flow,
        &format!("stream: {name}, consumer: madeira, subject: {name}.pay"),
        "",
        "",
    ))
    .await;
    let mut all = bodies(10, 0);
    all.insert(3, ("bad".into(), b"{ not json".to_vec()));
    publish(&js, &format!("{name}.pay"), &all).await;
    let o = wait_outcomes(&dev, &flow, 60, |o| count(o, "run") == 10 && count(o, "dead_letter") == 1).await;
    assert_eq!(count(&o, "refused"), 0, "{o}");
    let s = js.get_stream(&name).await.expect("stream");
    let dead = s.get_last_raw_message_by_subject(&format!("{name}.dead")).await.expect("a dead letter");
    let reason = dead.headers.get("Madeira-Reason").map(|v| v.as_str().to_string()).unwrap_or_default();
    assert!(reason.contains("not JSON"), "{reason}");
    assert_eq!(&dead.payload[..], b"{ not json");
    let mut consumer: jetstream::consumer::PullConsumer = s.get_consumer("madeira").await.expect("consumer");
    let info = consumer.info().await.expect("info");
    assert_eq!(info.num_ack_pending, 0, "the poison message was terminated, not left for redelivery");
    js.delete_stream(&name).await.expect("delete stream");
}

/// Our own `nats-server -js` on `port` with its store in `dir` (never the machine's).
struct OwnNats(std::process::Child);

impl OwnNats {
    fn start(port: u16, dir: &std::path::Path) -> Option<OwnNats> {
        let child = std::process::Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "CI=true and nats-server cannot start: {e}"
                );
                eprintln!("skipping: cannot start nats-server ({e})");
                return None;
            }
        };
        let what = format!("nats-server to listen on {port}");
        wait_blocking(std::time::Duration::from_secs(10), &what, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        Some(OwnNats(child))
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_jetstream_broker_restarted_mid_stream_resumes_by_itself() {
    let port = crate::forwarding::free_port();
    let store = tempfile::tempdir().expect("tempdir");
    let Some(broker) = OwnNats::start(port, store.path()) else { return };
    let url = format!("nats://127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dev_with_source(dir.path(), "nats", &url);
    let (flow, name) = (fresh("nats-restart"), "RESTART".to_string());
    let js = stream(&url, &name).await;
    dev.put_flow(&flow_yaml(
        &flow,
        &format!("stream: {name}, consumer: madeira, subject: {name}.pay"),
        "",
        "",
    ))
    .await;
    publish(&js, &format!("{name}.pay"), &bodies(100, 0)).await;
    wait_outcomes(&dev, &flow, 60, |o| count(o, "run") == 100).await;
    drop(broker);
    wait_until(std::time::Duration::from_secs(60), "the consumer to notice the outage", async || {
        let (_, body) = dev.get("/sources").await;
        if body["sources"][0]["consumers"][0]["state"] == "down" { Ok(()) } else { Err(body.to_string()) }
    })
    .await;
    let _broker = OwnNats::start(port, store.path()).expect("restart nats-server");
    let client = async_nats::connect(url.as_str()).await.expect("reconnect");
    let js = jetstream::new(client);
    let later: Vec<(String, Vec<u8>)> = (0..50)
        .map(|i| (format!("late{i}"), serde_json::json!({"id": format!("late{i}")}).to_string().into_bytes()))
        .collect();
    publish(&js, &format!("{name}.pay"), &later).await;
    wait_outcomes(&dev, &flow, 120, |o| count(o, "run") == 150).await;
    assert_eq!(message_runs(&dev, &flow).await, 150);
}
