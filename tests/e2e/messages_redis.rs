//! Message triggers on Redis Streams (SPEC §6.1): 1,000 entries with 100
//! duplicate keys make exactly 900 runs and leave nothing pending in the group;
//! the broker (our own `redis-server` on a free port, never the machine's)
//! stopped and started again mid-stream: the consumer says `down`, then resumes
//! by itself; `kill -9` mid-stream: the restarted consumer (same `replica_id`)
//! takes back the entries its predecessor had in hand, one run per key.

use std::time::{Duration, Instant};

use redis::AsyncCommands;

use crate::brokers::{
    bodies, count, dev_with_source, flow_yaml, fresh, message_runs, redis_url, wait_outcomes,
};
use crate::forwarding::{Redis, free_port};
use crate::support::{Dev, sigterm_and_wait, wait_until};

pub async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("redis url");
    client.get_multiplexed_async_connection().await.expect("connect to Redis")
}

/// XADDs every body as the entry's `payload` field.
pub async fn publish(
    conn: &mut redis::aio::MultiplexedConnection,
    stream: &str,
    bodies: &[(String, Vec<u8>)],
) {
    let mut pipe = redis::pipe();
    for (_, body) in bodies {
        pipe.cmd("XADD").arg(stream).arg("*").arg("payload").arg(body.as_slice()).ignore();
    }
    pipe.query_async::<()>(conn).await.expect("XADD");
}

/// Entries delivered to the group and not acknowledged.
pub async fn pending(conn: &mut redis::aio::MultiplexedConnection, stream: &str, group: &str) -> u64 {
    let reply: redis::Value =
        redis::cmd("XPENDING").arg(stream).arg(group).query_async(conn).await.expect("XPENDING");
    match reply {
        redis::Value::Array(items) => redis::from_redis_value_ref::<u64>(&items[0]).unwrap_or(u64::MAX),
        other => panic!("XPENDING answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_1000_entries_with_100_duplicates_make_900_runs_nothing_pending() {
    let Some(url) = redis_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = dev_with_source(dir.path(), "redis_streams", &url);
    let (flow, stream) = (fresh("rs-900"), fresh("madeira:test:s"));
    dev.put_flow(&flow_yaml(&flow, &format!("stream: {stream}, group: g"), "", "")).await;
    let mut conn = connection(&url).await;
    let started = Instant::now();
    publish(&mut conn, &stream, &bodies(900, 100)).await;
    let o = wait_outcomes(&dev, &flow, 120, |o| count(o, "run") + count(o, "duplicate") >= 1000).await;
    let took = started.elapsed();
    assert_eq!((count(&o, "run"), count(&o, "duplicate")), (900, 100), "{o}");
    assert_eq!(message_runs(&dev, &flow).await, 900);
    sigterm_and_wait(&mut dev.child, 30).await;
    assert_eq!(pending(&mut conn, &stream, "g").await, 0, "every entry acknowledged");
    let dead: u64 = conn.xlen(format!("{stream}.dead")).await.expect("XLEN");
    assert_eq!(dead, 0);
    let _: () = conn.del(&[stream.as_str()]).await.expect("DEL");
    eprintln!("redis streams: 1000 entries -> 900 runs in {took:?} (debug build)");
}

async fn consumer_state(dev: &Dev) -> (String, String) {
    let (_, body) = dev.get("/sources").await;
    let c = &body["sources"][0]["consumers"][0];
    (c["state"].as_str().unwrap_or("").to_string(), c["last_error"].as_str().unwrap_or("").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_broker_restarted_mid_stream_resumes_by_itself() {
    let port = free_port();
    let Some(broker) = Redis::start(port) else { return };
    let url = format!("redis://127.0.0.1:{port}");
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dev_with_source(dir.path(), "redis_streams", &url);
    let (flow, stream) = (fresh("rs-restart"), fresh("madeira:test:s"));
    dev.put_flow(&flow_yaml(&flow, &format!("stream: {stream}, group: g"), "", "")).await;
    let mut conn = connection(&url).await;
    publish(&mut conn, &stream, &bodies(100, 0)).await;
    wait_outcomes(&dev, &flow, 60, |o| count(o, "run") == 100).await;
    drop(broker);
    let error = wait_until(Duration::from_secs(30), "the consumer to notice the outage", async || {
        let (state, error) = consumer_state(&dev).await;
        if state == "down" { Ok(error) } else { Err(state) }
    })
    .await;
    assert!(!error.is_empty(), "a down consumer names its last error");
    let (status, _) = dev.get("/flows").await;
    assert_eq!(status, 200, "the API keeps answering during the outage");
    let ready = dev.http.get(format!("{}/readyz", dev.base)).send().await.expect("readyz").status();
    assert_eq!(ready.as_u16(), 200, "/readyz stays ready while a broker is down");
    // The restarted broker has no data (no persistence): new entries must flow again.
    let _broker = Redis::start(port).expect("restart redis-server");
    let mut conn = connection(&url).await;
    let later: Vec<(String, Vec<u8>)> = (0..50)
        .map(|i| (format!("late{i}"), serde_json::json!({"id": format!("late{i}")}).to_string().into_bytes()))
        .collect();
    // The consumer re-creates its group when it reconnects; entries published before that are read from 0.
    publish(&mut conn, &stream, &later).await;
    wait_outcomes(&dev, &flow, 90, |o| count(o, "run") == 150).await;
    assert_eq!(consumer_state(&dev).await.0, "up");
    assert_eq!(message_runs(&dev, &flow).await, 150);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_streams_kill_9_mid_stream_takes_back_pending_entries_one_run_per_key() {
    let Some(url) = redis_url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = dev_with_source(dir.path(), "redis_streams", &url);
    let (flow, stream) = (fresh("rs-kill"), fresh("madeira:test:s"));
    dev.put_flow(&flow_yaml(&flow, &format!("stream: {stream}, group: g"), "", "")).await;
    let mut conn = connection(&url).await;
    publish(&mut conn, &stream, &bodies(900, 100)).await;
    let before = wait_outcomes(&dev, &flow, 60, |o| count(o, "run") >= 150).await;
    dev.kill9();
    assert!(count(&before, "run") < 900, "killed mid-stream: {before}");
    let mut dev = dev_with_source(dir.path(), "redis_streams", &url);
    wait_until(Duration::from_secs(120), "900 runs and nothing pending after the restart", async || {
        let runs = message_runs(&dev, &flow).await;
        let left = pending(&mut conn, &stream, "g").await;
        if runs >= 900 && left == 0 { Ok(()) } else { Err(format!("{runs} runs, {left} pending")) }
    })
    .await;
    sigterm_and_wait(&mut dev.child, 30).await;
    let dev = dev_with_source(dir.path(), "redis_streams", &url);
    assert_eq!(message_runs(&dev, &flow).await, 900, "exactly one run per key");
    assert_eq!(pending(&mut conn, &stream, "g").await, 0, "nothing left unacknowledged");
    let _: () = conn.del(&[stream.as_str()]).await.expect("DEL");
}
