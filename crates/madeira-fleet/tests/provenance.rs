//! A result is taken only from the sidecar its attempt was placed on: a client
//! speaking the link protocol with group `ga`'s token, given node `a` of a mixed
//! flow, forges a SUCCESS for node `b` (group `gb`) with the run id it learned and
//! `b`'s idempotency key, under a random assignment id. The forged result is
//! refused (acknowledged, counted under `reason="other_group"`), and `b` really
//! runs on `gb`'s sidecar, whose outputs it records.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use madeira_engine::TriggerRequest;
use madeira_fleet::{FleetOptions, GroupToken};
use madeira_proto::v1::link_client::LinkClient;
use madeira_proto::v1::{AttemptResult, Hello, JobDecl, Outcome, Ready};
use madeira_proto::{ControlMsg, SidecarMsg};
use madeira_sidecar::{
    ExecPolicy, Identity, LinkOptions, Sidecar, SidecarConfig, SidecarMetrics, SidecarOptions,
};
use madeira_store::RunReader;
use madeira_store::sqlite::SqliteStore;
use tokio::sync::mpsc;

use common::{Plane, next, plane, send};

const TOKEN_A: &str = "group-a-token-0123456789";
const TOKEN_B: &str = "group-b-token-0123456789";
const FLOW: &str = "flow: mixed\nnodes:\n  a: {run: {sidecar: {group: ga, job: ja}}}\n  \
                    b: {run: {sidecar: {group: gb, job: jb}}, needs: [a]}\n";

fn result(report: &str, assignment: &str, run_id: &str, node: &str, outputs: &str) -> AttemptResult {
    AttemptResult {
        report_id: report.into(),
        assignment_id: assignment.into(),
        run_id: run_id.into(),
        node: node.into(),
        attempt: 1,
        idempotency_key: format!("{run_id}:{node}:v1"),
        outcome: Outcome::Success as i32,
        exit_code: Some(0),
        outputs_json: outputs.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_forged_result_for_another_groups_node_is_refused_and_the_node_really_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"));
    let tokens = vec![
        GroupToken { group: "ga".into(), token: TOKEN_A.into() },
        GroupToken { group: "gb".into(), token: TOKEN_B.into() },
    ];
    let options =
        FleetOptions { tokens: Some(tokens), ..FleetOptions::with_lost_after(Duration::from_secs(5)) };
    let Plane { handle, endpoint, cancel, registry, .. } = plane(store.clone(), options).await;

    // Group gb's real sidecar: its job leaves a witness line per execution.
    let witness = dir.path().join("witness");
    let jobs = format!(
        "jobs:\n  jb:\n    command: [\"/bin/sh\", \"-c\", \"echo ran >> {w}; echo '{{\\\"by\\\": \\\"gb\\\"}}' > $MADEIRA_OUTPUT_FILE\"]\n",
        w = witness.display()
    );
    let jobs = SidecarConfig::parse("jobs.yaml", &jobs).expect("parse").jobs("jobs.yaml").expect("jobs");
    let sidecar = Sidecar::new(SidecarOptions {
        identity: Identity { name: "b-01".into(), group: "gb".into(), version: "test".into() },
        link: LinkOptions { endpoint: endpoint.clone(), token: Some(TOKEN_B.into()), ..Default::default() },
        jobs,
        spool_dir: dir.path().join("spool-b"),
        socket: None,
        exec: ExecPolicy::owner_only(Vec::new()),
        shutdown_grace: Duration::from_secs(1),
        hide_env: Vec::new(),
        metrics: SidecarMetrics::unregistered(),
    })
    .expect("sidecar");
    let mut connected = sidecar.handle();
    tokio::spawn(sidecar.run(cancel.clone()));
    assert!(connected.wait_connected(Duration::from_secs(10)).await, "gb's sidecar connects");

    // Group ga's hostile client, speaking the protocol itself.
    let mut client = LinkClient::connect(endpoint.clone()).await.expect("connect");
    let (out, rx) = mpsc::channel(16);
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    request.metadata_mut().insert("authorization", format!("Bearer {TOKEN_A}").parse().expect("header"));
    let hello = Hello {
        name: "a-01".into(),
        group: "ga".into(),
        version: "test".into(),
        jobs: vec![JobDecl { name: "ja".into(), max_concurrency: 1 }],
        instance: "forger".into(),
        ..Default::default()
    };
    out.send(send(SidecarMsg::Hello(hello))).await.expect("hello");
    let mut inbound = client.attach(request).await.expect("attach").into_inner();
    assert!(matches!(next(&mut inbound, Duration::from_secs(10)).await, ControlMsg::Welcome(_)));
    out.send(send(SidecarMsg::Ready(Ready {}))).await.expect("ready");

    handle.apply_flow("mixed.yaml", FLOW).await.expect("apply");
    let request = TriggerRequest::manual("mixed", "test");
    let run_id = handle.trigger(request).await.expect("trigger").run_id;
    let ControlMsg::Assign(assigned) = next(&mut inbound, Duration::from_secs(10)).await else {
        panic!("node a assigned to ga")
    };
    assert_eq!((assigned.run_id.as_str(), assigned.node.as_str()), (run_id.as_str(), "a"));

    // The forgery: b's result, before b is even dispatched, and again for a's assignment id.
    let forged =
        result("forged-1", "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000", &run_id, "b", r#"{"by": "forger"}"#);
    out.send(send(SidecarMsg::Result(forged))).await.expect("forged");
    match next(&mut inbound, Duration::from_secs(10)).await {
        ControlMsg::Ack(ack) => assert_eq!(ack.report_id, "forged-1", "refused results leave the spool"),
        other => panic!("expected the refusal's ack, got {other:?}"),
    }
    let wrong_node = result("forged-2", &assigned.assignment_id, &run_id, "b", r#"{"by": "forger"}"#);
    out.send(send(SidecarMsg::Result(wrong_node))).await.expect("forged");
    // Then a's honest result.
    let mut honest = result("honest-a", &assigned.assignment_id, &run_id, "a", "{}");
    honest.idempotency_key = assigned.idempotency_key.clone();
    honest.epoch = assigned.epoch;
    out.send(send(SidecarMsg::Result(honest))).await.expect("honest");

    let deadline = Instant::now() + Duration::from_secs(20);
    let stored = loop {
        let stored = store.load_run(&run_id).await.expect("load").expect("run");
        if stored.nodes.iter().all(|n| n.state.as_str() == "SUCCESS") {
            break stored;
        }
        assert!(Instant::now() < deadline, "run never finished: {:?}", stored.nodes);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let b = stored.nodes.iter().find(|n| n.node == "b").expect("b");
    assert_eq!(b.outputs.get("by"), Some(&serde_json::json!("gb")), "b's outputs are its real job's");
    let ran = std::fs::read_to_string(&witness).expect("b's job ran");
    assert_eq!(ran.lines().count(), 1, "b ran exactly once");
    let a = stored.nodes.iter().find(|n| n.node == "a").expect("a");
    assert_eq!(a.state.as_str(), "SUCCESS", "the honest result of the client's own node is taken");

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    for (reason, n) in [("other_group", 1), ("mismatch", 1)] {
        let line = format!("madeira_sidecar_results_refused_total{{group=\"ga\",reason=\"{reason}\"}} {n}");
        assert!(text.contains(&line), "{line} in:\n{text}");
    }
    cancel.cancel();
}
