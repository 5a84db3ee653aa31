//! The hub numbers events monotonically, a stream resumes after `Last-Event-ID`
//! with exactly what it missed, filters by run, and resets when the gap is gone.

use std::time::Duration;

use futures::StreamExt;

use super::*;

fn event(run: &str, node: &str, to: &str) -> Arc<RunEvent> {
    Arc::new(RunEvent {
        run_id: run.into(),
        flow: "f".into(),
        node: Some(node.into()),
        from: "INIT".into(),
        to: to.into(),
        cause: "dispatch".into(),
        attempt: 1,
        reason: None,
        at_ms: 1,
    })
}

/// Waits until the hub has numbered `n` events.
async fn numbered(hub: &Hub, n: usize) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while hub.inner.ring.lock().expect("ring").len() < n {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the hub numbers the engine's events");
}

fn ids(hub: &Hub) -> Vec<u64> {
    hub.inner.ring.lock().expect("ring").iter().map(|e| e.id).collect()
}

/// Renders the next `n` SSE events of `stream` as text.
async fn take<S: Stream<Item = Result<Event, Infallible>> + Unpin>(stream: &mut S, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let next =
            tokio::time::timeout(Duration::from_secs(5), stream.next()).await.expect("an event in time");
        let Some(Ok(e)) = next else { panic!("stream ended") };
        out.push(format!("{e:?}"));
    }
    out
}

#[tokio::test]
async fn ids_increase_and_a_stream_resumes_after_last_event_id() {
    let (tx, rx) = broadcast::channel(64);
    let hub = Hub::start(rx, CancellationToken::new());
    for (i, to) in ["RUNNING", "SUCCESS", "RUNNING", "FAILED"].iter().enumerate() {
        tx.send(event("r1", &format!("n{i}"), to)).expect("send");
    }
    numbered(&hub, 4).await;
    let all = ids(&hub);
    assert!(all.windows(2).all(|w| w[1] == w[0] + 1), "consecutive ids: {all:?}");
    // A page that saw the second event gets the third and fourth, then live ones.
    let mut stream = Box::pin(hub.stream(Filter::default(), Some(all[1]), None));
    let replayed = take(&mut stream, 2).await;
    assert!(replayed[0].contains(&all[2].to_string()) && replayed[0].contains("n2"), "{replayed:?}");
    assert!(replayed[1].contains("n3") && replayed[1].contains("FAILED"), "{replayed:?}");
    tx.send(event("r1", "n4", "SUCCESS")).expect("send");
    let live = take(&mut stream, 1).await;
    assert!(live[0].contains("n4") && live[0].contains(&(all[3] + 1).to_string()), "{live:?}");
}

#[tokio::test]
async fn a_run_filter_keeps_other_runs_out() {
    let (tx, rx) = broadcast::channel(64);
    let hub = Hub::start(rx, CancellationToken::new());
    let mut stream =
        Box::pin(hub.stream(Filter { run: Some("mine".into()), ..Default::default() }, None, None));
    tx.send(event("other", "a", "RUNNING")).expect("send");
    tx.send(event("mine", "b", "RUNNING")).expect("send");
    let got = take(&mut stream, 1).await;
    assert!(got[0].contains("\\\"b\\\"") || got[0].contains("\"b\""), "{got:?}");
    assert!(!got[0].contains("other"), "{got:?}");
}

#[tokio::test]
async fn an_id_from_before_the_ring_or_another_process_resets() {
    let (tx, rx) = broadcast::channel(64);
    let hub = Hub::start(rx, CancellationToken::new());
    tx.send(event("r", "a", "RUNNING")).expect("send");
    numbered(&hub, 1).await;
    let mut stream = Box::pin(hub.stream(Filter::default(), Some(5), None));
    let got = take(&mut stream, 1).await;
    assert!(got[0].contains("reset"), "an old id cannot be resumed: {got:?}");
    // The newest id itself resumes with nothing to replay.
    let newest = ids(&hub)[0];
    assert!(hub.replay(Some(newest)).is_empty());
}

#[tokio::test]
async fn streams_end_at_shutdown() {
    let (_tx, rx) = broadcast::channel::<Arc<RunEvent>>(4);
    let shutdown = CancellationToken::new();
    let hub = Hub::start(rx, shutdown.clone());
    let mut stream = Box::pin(hub.stream(Filter::default(), None, None));
    assert_eq!(hub.subscribers(), 1);
    shutdown.cancel();
    let end = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.expect("ends in time");
    assert!(end.is_none());
}
