//! A result delivered again after its commit is acknowledged and never applied a
//! second time: the control plane deduplicates by report id and by attempt. A
//! client speaking the link protocol runs node `a`'s attempt and reports it; once
//! the engine has committed it (the `Ack` comes only then), the client delivers
//! the same report again (a sidecar restarted before the ack reached it), then a
//! second report for the same attempt under a new report id (what a sidecar that
//! lost its unsynced spool slot in a host crash, or reclaimed the job as a
//! leftover, would send: the attempt lost). Both are acknowledged, and the node
//! keeps its one attempt, its outputs and its data version.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use madeira_engine::TriggerRequest;
use madeira_fleet::FleetOptions;
use madeira_proto::v1::link_client::LinkClient;
use madeira_proto::v1::{AttemptResult, Hello, JobDecl, Outcome, Ready};
use madeira_proto::{ControlMessage, ControlMsg, SidecarMsg};
use madeira_store::RunReader;
use madeira_store::sqlite::SqliteStore;
use tokio::sync::mpsc;

use common::{Plane, next, plane, send};

/// Waits for the `Ack` of `report`, within `within`.
async fn acked(inbound: &mut tonic::Streaming<ControlMessage>, report: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match next(inbound, left).await {
            ControlMsg::Ack(ack) if ack.report_id == report => return,
            ControlMsg::Ack(_) => {}
            other => panic!("expected the ack of {report}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_result_delivered_again_after_its_commit_is_acknowledged_and_not_applied_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"));
    let Plane { handle, endpoint, cancel, .. } =
        plane(store.clone(), FleetOptions::with_lost_after(Duration::from_secs(20))).await;

    let mut client = LinkClient::connect(endpoint).await.expect("connect");
    let (out, rx) = mpsc::channel(16);
    let request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let hello = Hello {
        name: "s-01".into(),
        group: "g".into(),
        version: "test".into(),
        jobs: vec![JobDecl { name: "j".into(), max_concurrency: 1 }],
        instance: "client".into(),
        ..Default::default()
    };
    out.send(send(SidecarMsg::Hello(hello))).await.expect("hello");
    let mut inbound = client.attach(request).await.expect("attach").into_inner();
    assert!(matches!(next(&mut inbound, Duration::from_secs(10)).await, ControlMsg::Welcome(_)));
    out.send(send(SidecarMsg::Ready(Ready {}))).await.expect("ready");

    handle
        .apply_flow("once.yaml", "flow: once\nnodes:\n  a: {run: {sidecar: {group: g, job: j}}}\n")
        .await
        .expect("apply");
    let request = TriggerRequest::manual("once", "test");
    let run_id = handle.trigger(request).await.expect("trigger").run_id;
    let ControlMsg::Assign(assigned) = next(&mut inbound, Duration::from_secs(10)).await else {
        panic!("node a assigned")
    };
    let result = AttemptResult {
        report_id: "r-1".into(),
        assignment_id: assigned.assignment_id.clone(),
        run_id: run_id.clone(),
        node: "a".into(),
        attempt: assigned.attempt,
        idempotency_key: assigned.idempotency_key.clone(),
        shard_index: assigned.shard_index,
        outcome: Outcome::Success as i32,
        exit_code: Some(0),
        outputs_json: r#"{"n": 1}"#.into(),
        job: "j".into(),
        epoch: assigned.epoch,
        ..Default::default()
    };
    out.send(send(SidecarMsg::Result(result.clone()))).await.expect("result");
    // Acknowledged only once committed.
    acked(&mut inbound, "r-1", Duration::from_secs(10)).await;
    let committed = store.load_run(&run_id).await.expect("load").expect("run");
    assert_eq!(
        committed.nodes[0].state.as_str(),
        "SUCCESS",
        "the ack followed the commit: {:?}",
        committed.nodes
    );

    // The same report again, then the attempt reported lost under a new report id.
    out.send(send(SidecarMsg::Result(result.clone()))).await.expect("again");
    acked(&mut inbound, "r-1", Duration::from_secs(10)).await;
    let lost = AttemptResult {
        report_id: "r-2".into(),
        outcome: Outcome::Retryable as i32,
        exit_code: None,
        error: "the sidecar restarted while the job ran".into(),
        outputs_json: "{}".into(),
        ..result
    };
    out.send(send(SidecarMsg::Result(lost))).await.expect("lost");
    // Checked against the store by the fleet's sweep (every lost_after / 4, results kept 5 s):
    // the attempt has ended there. The client stays within lost_after of its last message.
    acked(&mut inbound, "r-2", Duration::from_secs(30)).await;

    let stored = store.load_run(&run_id).await.expect("load").expect("run");
    let a = &stored.nodes[0];
    assert_eq!(a.state.as_str(), "SUCCESS", "{a:?}");
    assert_eq!((a.attempt, a.data_version), (1, 1), "applied once: {a:?}");
    assert_eq!(a.outputs.get("n"), Some(&serde_json::json!(1)), "{a:?}");
    let attempts: Vec<_> = stored.attempts.iter().filter(|x| x.node == "a").collect();
    assert_eq!(attempts.len(), 1, "one attempt recorded: {attempts:?}");
    assert_eq!(stored.run.state.as_str(), "SUCCESS");
    cancel.cancel();
}
