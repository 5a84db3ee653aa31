//! Test bodies shared by every backend: each takes the store under test.

use madeira_core::{Cause, NodeState, RunCause, RunState};
use serde_json::json;

use crate::*;

pub(crate) fn new_run(id: &str, key: Option<&str>, max: u32, overlap: Overlap) -> NewRun {
    NewRun {
        id: id.into(),
        flow: "f".into(),
        version: 1,
        params: json!({"a": 1}),
        idempotency_key: key.map(str::to_string),
        trigger: "manual".into(),
        node_names: vec!["a".into(), "b".into()],
        max_active_runs: max,
        overlap,
        throttles: Vec::new(),
        actor: "test".into(),
        now_ms: 10,
        trace_context: Some(format!("00-{:0>32}-00f067aa0ba902b7-01", id.len())),
        lease: None,
        biz_date: None,
        one_per_biz_date: false,
        after: Vec::new(),
        wait_reason: None,
    }
}

pub(crate) async fn flow_versions_only_change_with_content(s: &dyn Store) {
    assert_eq!(s.put_flow("f", "x", "h1", 1).await.expect("put"), PutFlow { version: 1, created: true });
    assert_eq!(s.put_flow("f", "x", "h1", 2).await.expect("put"), PutFlow { version: 1, created: false });
    assert_eq!(s.put_flow("f", "y", "h2", 3).await.expect("put"), PutFlow { version: 2, created: true });
    assert_eq!(s.get_flow("f").await.expect("get").map(|f| f.source), Some("y".into()));
    assert_eq!(s.flow_version("f", 1).await.expect("v1").map(|v| v.source), Some("x".into()));
}

pub(crate) async fn idempotency_key_returns_existing_run(s: &dyn Store) {
    let first = s.create_run(&new_run("r1", Some("k"), 0, Overlap::Queue)).await.expect("create");
    assert!(matches!(first, CreateOutcome::Created { start: true, .. }));
    let second = s.create_run(&new_run("r2", Some("k"), 0, Overlap::Queue)).await.expect("create");
    assert_eq!(second, CreateOutcome::Existing { run_id: "r1".into(), version: 1 });
    let stored = s.load_run("r1").await.expect("load").expect("exists");
    assert_eq!(stored.nodes.len(), 2);
    assert_eq!(stored.nodes[1].state, NodeState::Init);
    assert!(s.load_run("r2").await.expect("load").is_none());
}

/// Keys users write freely compare byte for byte on every backend (MySQL keeps
/// them as bytes): case, trailing spaces and length all count.
pub(crate) async fn free_form_keys_compare_byte_for_byte(s: &dyn Store) {
    let long = format!("{}-end", "x".repeat(3000));
    let keys = ["Key-1", "key-1", "key-1 ", "kéy-1", long.as_str()];
    for (i, key) in keys.iter().enumerate() {
        let run = new_run(&format!("r{i}"), Some(key), 0, Overlap::Queue);
        let created = s.create_run(&run).await.expect("create");
        assert!(matches!(created, CreateOutcome::Created { .. }), "{key:?} is a key of its own: {created:?}");
    }
    for (i, key) in keys.iter().enumerate() {
        let again = s.create_run(&new_run("again", Some(key), 0, Overlap::Queue)).await.expect("again");
        assert_eq!(again, CreateOutcome::Existing { run_id: format!("r{i}"), version: 1 }, "{key:?}");
        let stored = s.load_run(&format!("r{i}")).await.expect("load").expect("exists");
        assert_eq!(stored.run.idempotency_key.as_deref(), Some(*key), "read back as written");
    }
    let output = |key: &str, v: i64| OutputWrite {
        run_id: "r0".into(),
        node: "a".into(),
        data_version: 1,
        key: key.into(),
        value: json!(v),
    };
    let batch = Batch { outputs: vec![output("Count", 1), output("count", 2)], ..Batch::default() };
    s.commit(&batch).await.expect("two output keys that differ by case");
}

pub(crate) async fn overlap_policies_are_decided_in_the_store(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 1, Overlap::Skip)).await.expect("r1");
    let skipped = s.create_run(&new_run("r2", None, 1, Overlap::Skip)).await.expect("r2");
    assert_eq!(skipped, CreateOutcome::Skipped { active: vec!["r1".into()] });
    let queued = s.create_run(&new_run("r3", None, 1, Overlap::Queue)).await.expect("r3");
    assert!(matches!(queued, CreateOutcome::Created { start: false, .. }));
    assert_eq!(s.promote_queued("f", 1, 20).await.expect("promote"), None, "r1 still active");
    let mut batch = Batch::default();
    batch.runs.push(RunWrite {
        run_id: "r1".into(),
        state: RunState::Success,
        started_at: None,
        finished_at: Some(30),
    });
    s.commit(&batch).await.expect("commit");
    assert_eq!(s.promote_queued("f", 1, 40).await.expect("promote"), Some("r3".into()));
    let cancel = s.create_run(&new_run("r4", None, 1, Overlap::CancelPrevious)).await.expect("r4");
    assert_eq!(
        cancel,
        CreateOutcome::Created { run_id: "r4".into(), start: false, cancel_previous: vec!["r3".into()] }
    );
}

pub(crate) async fn commit_writes_nodes_and_transitions_together_and_prune_removes_old_runs(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let mut stored = s.load_run("r1").await.expect("load").expect("exists");
    let node = &mut stored.nodes[0];
    node.state = NodeState::Success;
    node.data_version = 1;
    node.outputs.insert("k".into(), json!(5));
    node.reads = vec![(1, 2)];
    let batch = Batch {
        nodes: vec![node.clone()],
        runs: vec![RunWrite {
            run_id: "r1".into(),
            state: RunState::Success,
            started_at: None,
            finished_at: Some(50),
        }],
        transitions: vec![TransitionRecord {
            run_id: "r1".into(),
            node: Some("a".into()),
            edge: Edge::Node { from: NodeState::Running, to: NodeState::Success, cause: Cause::Succeeded },
            actor: "engine".into(),
            attempt: 1,
            reason: None,
            at: 50,
        }],
        ..Batch::default()
    };
    s.commit(&batch).await.expect("commit");
    let again = s.load_run("r1").await.expect("load").expect("exists");
    assert_eq!(again.nodes[0], stored.nodes[0]);
    assert_eq!(again.run.state, RunState::Success);
    let log = s.transitions("r1").await.expect("transitions");
    assert_eq!(log.iter().map(|t| t.edge.cause_name()).collect::<Vec<_>>(), ["admitted", "succeeded"]);
    let command = |created_at| RunCommand {
        id: 0,
        run_id: "r1".into(),
        target: "holder".into(),
        action: "cancel".into(),
        node: None,
        actor: "sre".into(),
        reason: None,
        created_at,
    };
    let old = s.send_command(&command(50)).await.expect("old command");
    let new = s.send_command(&command(70)).await.expect("new command");
    assert_eq!(s.prune(40, 100).await.expect("prune"), 0, "finished after the cutoff");
    assert_eq!(s.prune(60, 100).await.expect("prune"), 1);
    assert!(s.load_run("r1").await.expect("load").is_none());
    assert!(s.transitions("r1").await.expect("transitions").is_empty());
    let left: Vec<i64> = s.take_commands("holder", 80).await.expect("take").iter().map(|c| c.id).collect();
    assert_eq!(left, [new], "command {old} was older than the cutoff");
}

pub(crate) async fn flows_list_and_pause(s: &dyn Store) {
    s.put_flow("b", "src-b", "hb", 1).await.expect("put b");
    s.put_flow("a", "src-a", "ha", 2).await.expect("put a");
    let names: Vec<String> = s.list_flows().await.expect("list").into_iter().map(|f| f.name).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(s.set_paused("a", true, 5).await.expect("pause"));
    assert!(!s.set_paused("nope", true, 5).await.expect("pause missing"));
    let a = s.get_flow("a").await.expect("get").expect("exists");
    assert!(a.paused);
    assert_eq!((a.created_at, a.updated_at, a.latest_version), (2, 5, 1));
    assert!(s.get_flow("nope").await.expect("get").is_none());
    assert!(s.flow_version("a", 2).await.expect("v2").is_none());
}

pub(crate) async fn concurrent_triggers_with_one_key_make_one_run(s: &dyn Store) {
    let runs: Vec<NewRun> =
        (0..8).map(|i| new_run(&format!("r{i}"), Some("same-key"), 0, Overlap::Queue)).collect();
    let outcomes = futures::future::join_all(runs.iter().map(|r| s.create_run(r))).await;
    let created: Vec<&CreateOutcome> = outcomes
        .iter()
        .map(|o| o.as_ref().expect("create"))
        .filter(|o| matches!(o, CreateOutcome::Created { .. }))
        .collect();
    assert_eq!(created.len(), 1, "{outcomes:?}");
    let CreateOutcome::Created { run_id, .. } = created[0] else { unreachable!() };
    for o in &outcomes {
        if let Ok(CreateOutcome::Existing { run_id: existing, .. }) = o {
            assert_eq!(existing, run_id);
        }
    }
    let runs = s.list_runs(&RunQuery { limit: 100, ..RunQuery::default() }).await.expect("list");
    assert_eq!(runs.len(), 1);

    let capped: Vec<NewRun> = (0..6).map(|i| new_run(&format!("c{i}"), None, 2, Overlap::Queue)).collect();
    // The first run above holds one of the two active slots.
    futures::future::join_all(capped.iter().map(|r| s.create_run(r))).await;
    let all = s.list_runs(&RunQuery { limit: 100, ..RunQuery::default() }).await.expect("list");
    let admitted = all.iter().filter(|r| r.admitted_at.is_some()).count();
    assert_eq!(admitted, 2, "max_active_runs holds under concurrent triggers");
}

pub(crate) async fn outputs_attempts_logs_and_audit_round_trip(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let attempt = AttemptRecord {
        run_id: "r1".into(),
        node: "a".into(),
        attempt: 1,
        started_at: i64::MAX - 1,
        finished_at: None,
        outcome: None,
        error: None,
        host: None,
    };
    s.commit(&Batch { attempts: vec![attempt.clone()], ..Batch::default() }).await.expect("start");
    let finished = AttemptRecord {
        finished_at: Some(150),
        outcome: Some("FAILED".into()),
        // Quotes, a backslash, control characters and a character outside the
        // BMP: each backend must give the text back byte for byte.
        error: Some("boom ü \"quoted\" back\\slash\nnew line\ttab \u{1F389} \u{1} ''".into()),
        ..attempt
    };
    let batch = Batch {
        attempts: vec![finished.clone()],
        outputs: vec![OutputWrite {
            run_id: "r1".into(),
            node: "a".into(),
            data_version: 1,
            key: "k".into(),
            value: json!({"x": [1, 2]}),
        }],
        logs: vec![LogRecord { run_id: "r1".into(), node: "a".into(), attempt: 1, content: "line\n".into() }],
        audit: vec![AuditRecord {
            at: 160,
            actor: "sre".into(),
            action: "rerun".into(),
            run_id: Some("r1".into()),
            node: Some("a".into()),
            reason: Some("why not".into()),
            details: Some(json!({"downstream": true})),
        }],
        ..Batch::default()
    };
    s.commit(&batch).await.expect("commit");
    s.commit(&Batch {
        outputs: vec![OutputWrite { value: json!(2), ..batch.outputs[0].clone() }],
        logs: vec![LogRecord { content: "replaced\n".into(), ..batch.logs[0].clone() }],
        ..Batch::default()
    })
    .await
    .expect("output and log replaced");
    let stored = s.load_run("r1").await.expect("load").expect("exists");
    assert_eq!(stored.attempts, vec![finished]);
    let logs = s.logs("r1", "a").await.expect("logs");
    assert_eq!(logs.iter().map(|l| l.content.as_str()).collect::<Vec<_>>(), ["replaced\n"]);
    let audit = s
        .audit(&AuditQuery { actor: Some("sre".into()), limit: 10, ..AuditQuery::default() })
        .await
        .expect("audit");
    assert_eq!(audit, batch.audit);
    let none = s
        .audit(&AuditQuery { since_ms: Some(161), limit: 10, ..AuditQuery::default() })
        .await
        .expect("audit");
    assert!(none.is_empty());
}

pub(crate) async fn run_listing_filters_and_pages_newest_first(s: &dyn Store) {
    for i in 0..5 {
        let mut run = new_run(&format!("r{i}"), None, 0, Overlap::Queue);
        if i % 2 == 1 {
            run.flow = "g".into();
        }
        s.create_run(&run).await.expect("create");
    }
    let ids = |rows: Vec<RunRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
    let page = s.list_runs(&RunQuery { limit: 2, ..RunQuery::default() }).await.expect("page 1");
    assert_eq!(ids(page), ["r4", "r3"]);
    let next = s
        .list_runs(&RunQuery { before: Some("r3".into()), limit: 2, ..RunQuery::default() })
        .await
        .expect("page 2");
    assert_eq!(ids(next), ["r2", "r1"]);
    let g = s.list_runs(&RunQuery { flow: Some("g".into()), limit: 10, ..RunQuery::default() }).await;
    assert_eq!(ids(g.expect("flow g")), ["r3", "r1"]);
    let row = s.load_run("r0").await.expect("load").expect("exists").run;
    let admitted = (row.params, row.state, row.admitted_at, row.started_at);
    assert_eq!(admitted, (json!({"a": 1}), RunState::Admitted, Some(10), None), "admitted, not started");
    assert_eq!(s.unfinished_runs().await.expect("unfinished"), ["r0", "r1", "r2", "r3", "r4"]);
}

pub(crate) async fn repeated_rows_in_one_batch_keep_the_last(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let started = AttemptRecord {
        run_id: "r1".into(),
        node: "a".into(),
        attempt: 1,
        started_at: 1,
        finished_at: None,
        outcome: None,
        error: None,
        host: None,
    };
    let ended = AttemptRecord { finished_at: Some(2), outcome: Some("SUCCESS".into()), ..started.clone() };
    let output = |v: i64| OutputWrite {
        run_id: "r1".into(),
        node: "a".into(),
        data_version: 1,
        key: "k".into(),
        value: json!(v),
    };
    let log = |c: &str| LogRecord { run_id: "r1".into(), node: "a".into(), attempt: 1, content: c.into() };
    let run = |state: RunState, finished_at: Option<i64>| RunWrite {
        run_id: "r1".into(),
        state,
        started_at: None,
        finished_at,
    };
    let batch = Batch {
        attempts: vec![started, ended.clone()],
        outputs: vec![output(1), output(2)],
        logs: vec![log("first"), log("second")],
        runs: vec![run(RunState::Running, None), run(RunState::Success, Some(3))],
        ..Batch::default()
    };
    s.commit(&batch).await.expect("commit");
    let stored = s.load_run("r1").await.expect("load").expect("exists");
    assert_eq!(stored.attempts, vec![ended]);
    assert_eq!((stored.run.state, stored.run.finished_at), (RunState::Success, Some(3)));
    assert_eq!(s.logs("r1", "a").await.expect("logs")[0].content, "second");
}

pub(crate) async fn trace_context_is_kept_with_the_run(s: &dyn Store) {
    let CreateOutcome::Created { run_id, .. } =
        s.create_run(&new_run("r-trace", None, 0, Overlap::Queue)).await.expect("create")
    else {
        panic!("not created");
    };
    let stored = s.load_run(&run_id).await.expect("load").expect("run");
    assert_eq!(
        stored.run.trace_context.as_deref(),
        Some("00-00000000000000000000000000000007-00f067aa0ba902b7-01")
    );
    let listed = s.list_runs(&RunQuery { limit: 10, ..RunQuery::default() }).await.expect("list");
    assert_eq!(listed[0].trace_context, stored.run.trace_context);
}

pub(crate) async fn batched_creation_refuses_full_throttle_queues(s: &dyn Store) {
    let claim = ThrottleClaim { node: "a".into(), max_permits: 1, queue_size: 1 };
    let runs: Vec<NewRun> = ["t1", "t2", "t3"]
        .iter()
        .map(|id| NewRun { throttles: vec![claim.clone()], ..new_run(id, None, 0, Overlap::Queue) })
        .collect();
    let out = s.create_runs(&runs).await.expect("create batch");
    assert!(matches!(out[0], CreateOutcome::Created { .. }), "{out:?}");
    assert!(matches!(out[1], CreateOutcome::Created { .. }), "{out:?}");
    assert_eq!(
        out[2],
        CreateOutcome::Throttled { node: "a".into(), claims: 2, max_permits: 1, queue_size: 1 }
    );
    assert!(s.load_run("t3").await.expect("load").is_none(), "a refused run leaves nothing");
    // Counted again by a later transaction.
    let again = NewRun { throttles: vec![claim], ..new_run("t4", None, 0, Overlap::Queue) };
    assert!(matches!(s.create_run(&again).await.expect("create"), CreateOutcome::Throttled { .. }));
}

pub(crate) async fn last_cron_key_and_version_history(s: &dyn Store) {
    assert_eq!(s.last_cron_key("f").await.expect("none"), None);
    for (id, key) in [
        ("c1", "cron:f:2026-01-01T00:01:00.000Z"),
        ("c2", "cron:f:2026-01-01T00:03:00.000Z"),
        ("c3", "cron:f:2026-01-01T00:02:00.000Z"),
        ("e1", "event:zzz"),
    ] {
        s.create_run(&new_run(id, Some(key), 0, Overlap::Queue)).await.expect("create");
    }
    assert_eq!(s.last_cron_key("f").await.expect("key").as_deref(), Some("cron:f:2026-01-01T00:03:00.000Z"));
    assert_eq!(s.last_cron_key("other").await.expect("none"), None);

    s.put_flow("v", "one", "h1", 1).await.expect("v1");
    s.put_flow("v", "two", "h2", 2).await.expect("v2");
    let versions = s.flow_versions("v").await.expect("versions");
    assert_eq!(
        versions.iter().map(|v| (v.version, v.source.as_str())).collect::<Vec<_>>(),
        [(1, "one"), (2, "two")]
    );
    assert!(s.flow_versions("missing").await.expect("none").is_empty());
}

/// Creation is a run-table edge, written as a transition record: NONE -> ADMITTED
/// with room, NONE -> QUEUED without. Promotion is the QUEUED -> ADMITTED edge,
/// recorded in the same transaction; an ADMITTED run counts as active. The
/// ADMITTED -> RUNNING edge is the engine's `Command::Start`, never the store's.
pub(crate) async fn creation_is_a_recorded_edge_and_a_start_is_decided(s: &dyn Store) {
    let r1 = s.create_run(&new_run("r1", None, 1, Overlap::Queue)).await.expect("r1");
    let r2 = s.create_run(&new_run("r2", None, 1, Overlap::Queue)).await.expect("r2");
    assert!(matches!(
        (&r1, &r2),
        (CreateOutcome::Created { start: true, .. }, CreateOutcome::Created { start: false, .. })
    ));
    let edges =
        |log: Vec<TransitionRecord>| log.into_iter().map(|t| (t.node, t.edge, t.actor)).collect::<Vec<_>>();
    let entered = vec![(None, Edge::run(None, RunCause::Admitted, RunState::Admitted), "test".to_string())];
    let queued = vec![(None, Edge::run(None, RunCause::Created, RunState::Queued), "test".to_string())];
    assert_eq!(edges(s.transitions("r1").await.expect("r1")), entered);
    assert_eq!(edges(s.transitions("r2").await.expect("r2")), queued);
    let admitted = |run: StoredRun| (run.run.state, run.run.admitted_at);
    assert_eq!(admitted(s.load_run("r1").await.expect("load").expect("r1")), (RunState::Admitted, Some(10)));
    assert_eq!(admitted(s.load_run("r2").await.expect("load").expect("r2")), (RunState::Queued, None));
    assert_eq!(s.promote_queued("f", 1, 20).await.expect("promote"), None, "r1, admitted, is active");
    finish(s, "r1", 30).await;
    assert_eq!(s.promote_queued("f", 1, 40).await.expect("promote"), Some("r2".into()));
    let mut promoted = queued.clone();
    promoted.push((
        None,
        Edge::run(Some(RunState::Queued), RunCause::Admitted, RunState::Admitted),
        "engine".into(),
    ));
    assert_eq!(edges(s.transitions("r2").await.expect("r2")), promoted, "promotion is a recorded edge");
    assert_eq!(admitted(s.load_run("r2").await.expect("load").expect("r2")), (RunState::Admitted, Some(40)));
    assert_eq!(s.promote_queued("f", 1, 50).await.expect("promote"), None, "r2 is active");
    let shown = RunQuery { state: Some("QUEUED".into()), limit: 10, ..RunQuery::default() };
    let listed: Vec<String> = s.list_runs(&shown).await.expect("list").into_iter().map(|r| r.id).collect();
    assert_eq!(listed, ["r2"], "an ADMITTED run is listed under QUEUED, the state shown");
    assert_eq!(s.count_runs("QUEUED", "", 10).await.expect("count"), 1);
}

/// Commits `run_id` as SUCCESS at `at`.
async fn finish(s: &dyn Store, run_id: &str, at: i64) {
    let write =
        RunWrite { run_id: run_id.into(), state: RunState::Success, started_at: None, finished_at: Some(at) };
    s.commit(&Batch { runs: vec![write], ..Batch::default() }).await.expect("commit");
}
