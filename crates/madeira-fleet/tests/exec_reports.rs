//! The control plane enforces a sidecar's `observe:` list and flow cap itself: a
//! client speaking the link protocol for group `ga` (hello: `observe: [cron-*]`,
//! `observe_max_flows: 50`; the control plane's cap is 3) sends 300 exec reports
//! to flows off its list, 300 to `cron-N` flows claiming `host: spoofed`, and one
//! to an observe flow that exists (taken, not counted). Only 3 flows are created,
//! every other report is acknowledged as refused with its reason and counted, and
//! the runs name the reporting sidecar as their host.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use madeira_fleet::{FleetOptions, GroupToken};
use madeira_proto::v1::link_client::LinkClient;
use madeira_proto::v1::{ExecReport, Hello, Ready};
use madeira_proto::{ControlMsg, SidecarMessage, SidecarMsg};
use madeira_store::sqlite::SqliteStore;
use madeira_store::{FlowReader, RunQuery, RunReader};
use tokio::sync::mpsc;

use common::{Plane, plane};

const TOKEN_A: &str = "group-a-token-0123456789";

fn report(id: usize, flow: &str) -> SidecarMessage {
    let exec = ExecReport {
        report_id: format!("r{id}"),
        exec_id: format!("e{id}"),
        job: flow.into(),
        flow: flow.into(),
        finished: false,
        started_at_ms: madeira_engine::now_ms(),
        host: "spoofed".into(),
        ..Default::default()
    };
    SidecarMessage { msg: Some(SidecarMsg::Exec(exec)) }
}

#[tokio::test]
async fn exec_reports_create_at_most_the_caps_worth_of_flows_and_only_listed_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"));
    let tokens = vec![GroupToken { group: "ga".into(), token: TOKEN_A.into() }];
    let options = FleetOptions {
        tokens: Some(tokens),
        observe_max_flows: 3,
        ..FleetOptions::with_lost_after(Duration::from_secs(5))
    };
    let Plane { handle, endpoint, cancel, registry, .. } = plane(store.clone(), options).await;
    // An observe flow that exists (of another group: observe flows are never dispatched).
    let theirs =
        "flow: cron-gb\nobserve: true\nnodes:\n  cron_gb: {run: {sidecar: {group: gb, job: cron-gb}}}\n";
    handle.apply_flow("cron-gb.yaml", theirs).await.expect("apply");

    let mut client = LinkClient::connect(endpoint).await.expect("connect");
    let (out, rx) = mpsc::channel(1024);
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    request.metadata_mut().insert("authorization", format!("Bearer {TOKEN_A}").parse().expect("header"));
    let hello = Hello {
        name: "a-01".into(),
        group: "ga".into(),
        version: "test".into(),
        instance: "spammer".into(),
        observe: vec!["cron-*".into()],
        observe_max_flows: 50,
        ..Default::default()
    };
    out.send(SidecarMessage { msg: Some(SidecarMsg::Hello(hello)) }).await.expect("hello");
    let mut inbound = client.attach(request).await.expect("attach").into_inner();
    out.send(SidecarMessage { msg: Some(SidecarMsg::Ready(Ready {})) }).await.expect("ready");

    let mut sent = 0;
    out.send(report(sent, "cron-gb")).await.expect("send");
    sent += 1;
    for n in 0..300 {
        out.send(report(sent, &format!("spam-{n}"))).await.expect("send");
        sent += 1;
    }
    for n in 0..300 {
        out.send(report(sent, &format!("cron-{n}"))).await.expect("send");
        sent += 1;
    }
    let mut answers: HashMap<String, String> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while answers.len() < sent {
        let m = tokio::time::timeout_at(deadline, inbound.message())
            .await
            .unwrap_or_else(|_| panic!("{} of {sent} reports answered in 60 s", answers.len()))
            .expect("stream")
            .expect("open");
        if let Some(ControlMsg::Ack(ack)) = m.msg {
            answers.insert(ack.report_id, ack.refused);
        }
    }
    assert_eq!(answers["r0"], "", "a report to an existing listed observe flow is taken");
    assert!(answers["r1"].contains("`spam-0` is not in the `observe:` list"), "{}", answers["r1"]);
    let taken: Vec<usize> = (301..sent).filter(|i| answers[&format!("r{i}")].is_empty()).collect();
    assert_eq!(taken, [301, 302, 303], "the control plane's cap of 3 holds, not the hello's 50");
    assert!(answers["r304"].contains("observe_max_flows"), "{}", answers["r304"]);

    let flows: Vec<String> = store.list_flows().await.expect("flows").into_iter().map(|f| f.name).collect();
    assert_eq!(flows.len(), 4, "cron-gb and three of ga's: {flows:?}");
    for n in 0..3 {
        let flow = format!("cron-{n}");
        let runs = store
            .list_runs(&RunQuery { flow: Some(flow.clone()), limit: 10, ..Default::default() })
            .await
            .expect("runs");
        assert_eq!(runs.len(), 1, "{flow}");
        assert_eq!(runs[0].params["host"], "a-01", "the reporting sidecar is the host, not the claimed one");
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    for (reason, n) in [("not_listed", 300), ("cap", 297)] {
        let line = format!("madeira_exec_reports_refused_total{{group=\"ga\",reason=\"{reason}\"}} {n}");
        assert!(text.contains(&line), "{line} in:\n{text}");
    }
    cancel.cancel();
}
