//! A flow's lifecycle on every backend: events kept for a paused flow (only while
//! paused, once per id, bounded, in order), and deleting a flow with its history
//! kept or purged, refused while runs are active.

use serde_json::json;

use super::suite::new_run;
use crate::*;

fn event(id: &str, kind: &str) -> QueuedEvent {
    QueuedEvent {
        id: 0,
        flow: "f".into(),
        event_type: kind.into(),
        event_id: id.into(),
        payload: json!({"n": id}),
        actor: "test".into(),
        queued_at: 5,
    }
}

fn audit() -> AuditRecord {
    AuditRecord {
        at: 9,
        actor: "root".into(),
        action: "delete_flow".into(),
        run_id: None,
        node: None,
        reason: Some("retired".into()),
        details: Some(json!({"flow": "f"})),
    }
}

pub(crate) async fn events_are_kept_only_for_a_paused_flow_once_and_bounded(s: &dyn Store) {
    assert_eq!(s.queue_event(&event("1", "t"), 2).await.expect("q"), QueueOutcome::FlowNotFound);
    s.put_flow("f", "x", "h1", 1).await.expect("put");
    assert_eq!(s.queue_event(&event("1", "t"), 2).await.expect("q"), QueueOutcome::NotPaused);
    assert!(s.set_paused("f", true, 2).await.expect("pause"));
    let QueueOutcome::Queued { id: first, position: 1, queued_at: 5 } =
        s.queue_event(&event("1", "t"), 2).await.expect("q")
    else {
        panic!("not queued")
    };
    assert_eq!(
        s.queue_event(&event("1", "t"), 2).await.expect("again"),
        QueueOutcome::AlreadyQueued { id: first, position: 1, queued_at: 5 }
    );
    assert!(matches!(
        s.queue_event(&event("2", "t"), 2).await.expect("q"),
        QueueOutcome::Queued { position: 2, .. }
    ));
    assert_eq!(s.queue_event(&event("3", "t"), 2).await.expect("full"), QueueOutcome::Full { queued: 2 });
    assert!(matches!(
        s.queue_event(&event("3", "u"), 2).await.expect("other type"),
        QueueOutcome::Queued { position: 3, .. }
    ));
    let mut run = new_run("r1", Some("event:t:9"), 0, Overlap::Queue);
    run.flow = "f".into();
    s.create_run(&run).await.expect("run");
    assert_eq!(
        s.queue_event(&event("9", "t"), 5).await.expect("made before"),
        QueueOutcome::Existing { run_id: "r1".into() }
    );
    let kept = s.queued_events("f", 10).await.expect("list");
    let ids: Vec<&str> = kept.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids, ["1", "2", "3"], "oldest first");
    assert_eq!(kept[0].payload, json!({"n": "1"}));
    assert_eq!(s.queued_event_counts().await.expect("counts"), vec![("f".to_string(), 3)]);
    s.remove_queued_events(&[kept[0].id, kept[1].id]).await.expect("remove");
    assert_eq!(s.queued_events("f", 10).await.expect("list").len(), 1);
}

pub(crate) async fn a_deleted_flow_keeps_or_purges_its_history(s: &dyn Store) {
    s.put_flow("f", "x", "h1", 1).await.expect("put");
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("run");
    let delete = |purge| DeleteFlow { flow: "f".into(), purge, audit: audit(), now_ms: 9 };
    assert_eq!(
        s.delete_flow(&delete(false)).await.expect("busy"),
        DeleteOutcome::Active { runs: vec!["r1".into()] }
    );
    let done = RunWrite {
        run_id: "r1".into(),
        state: madeira_core::RunState::Success,
        started_at: None,
        finished_at: Some(8),
    };
    s.commit(&Batch { runs: vec![done], ..Batch::default() }).await.expect("finish");
    s.set_paused("f", true, 2).await.expect("pause");
    s.queue_event(&event("1", "t"), 5).await.expect("kept");
    assert_eq!(
        s.delete_flow(&delete(false)).await.expect("delete"),
        DeleteOutcome::Deleted { runs: 1, events_dropped: 1 }
    );
    assert!(s.get_flow("f").await.expect("get").is_none());
    assert!(s.list_flows().await.expect("list").is_empty());
    assert_eq!(s.deleted_flows().await.expect("deleted").len(), 1);
    assert!(s.load_run("r1").await.expect("load").is_some(), "history kept");
    assert!(!s.set_paused("f", false, 3).await.expect("resume a deleted flow"));
    assert_eq!(s.delete_flow(&delete(false)).await.expect("again"), DeleteOutcome::NotFound);
    let audit = s.audit(&AuditQuery { limit: 10, ..Default::default() }).await.expect("audit");
    assert_eq!(audit.iter().filter(|a| a.action == "delete_flow").count(), 1);

    // Applied again (same content): revived with the next version, unpaused.
    assert_eq!(s.put_flow("f", "x", "h1", 10).await.expect("revive"), PutFlow { version: 2, created: true });
    let revived = s.get_flow("f").await.expect("get").expect("revived");
    assert!(!revived.paused);
    assert!(s.deleted_flows().await.expect("deleted").is_empty());
    // A kept shard of the run goes with it (every table of a run's rows, `RUN_TABLES`).
    let kept = ShardResult {
        run_id: "r1".into(),
        node: "a".into(),
        key: "k".into(),
        shard: 0,
        input_hash: "h".into(),
        outputs: "{}".into(),
        at_ms: 9,
    };
    s.put_shard_result(&kept).await.expect("shard");
    assert_eq!(
        s.delete_flow(&delete(true)).await.expect("purge"),
        DeleteOutcome::Deleted { runs: 1, events_dropped: 0 }
    );
    assert!(s.load_run("r1").await.expect("load").is_none(), "purged");
    assert!(s.shard_results("r1", "a", "k").await.expect("shards").is_empty(), "its kept shards too");
    assert!(s.flow_versions("f").await.expect("versions").is_empty());
    assert!(s.deleted_flows().await.expect("deleted").is_empty(), "a purged flow has no history to list");
    assert_eq!(s.put_flow("f", "x", "h1", 11).await.expect("again"), PutFlow { version: 3, created: true });
}

/// A pause answered means no cron tick, event or message makes a run: the
/// store refuses them under the flow's lock. A manual run still starts, and a
/// key that already made its run still finds it.
pub(crate) async fn a_paused_flow_refuses_the_runs_its_triggers_would_make(s: &dyn Store) {
    s.put_flow("f", "x", "h1", 1).await.expect("put");
    let message = |id: &str, key: &str| NewRun {
        trigger: "message".into(),
        ..new_run(id, Some(&format!("message:bus:{key}")), 0, Overlap::Queue)
    };
    assert!(matches!(
        s.create_run(&message("m1", "k1")).await.expect("create"),
        CreateOutcome::Created { .. }
    ));
    assert!(s.set_paused("f", true, 2).await.expect("pause"));
    for trigger in ["message", "event", "cron", "cron_catchup"] {
        let run =
            NewRun { trigger: trigger.into(), ..new_run(&format!("p-{trigger}"), None, 0, Overlap::Queue) };
        assert_eq!(s.create_run(&run).await.expect("create"), CreateOutcome::Paused, "{trigger}");
        assert!(s.load_run(&run.id).await.expect("load").is_none(), "{trigger}: nothing written");
    }
    // In one batch beside a manual run: only that one is made.
    let batch = [message("m2", "k2"), new_run("manual-1", None, 0, Overlap::Queue)];
    let out = s.create_runs(&batch).await.expect("create batch");
    assert_eq!(out[0], CreateOutcome::Paused);
    assert!(matches!(out[1], CreateOutcome::Created { .. }), "{out:?}");
    let again = s.create_run(&message("m1-again", "k1")).await.expect("create");
    assert_eq!(again, CreateOutcome::Existing { run_id: "m1".into(), version: 1 });
    assert!(s.set_paused("f", false, 3).await.expect("resume"));
    assert!(matches!(
        s.create_run(&message("m2", "k2")).await.expect("create"),
        CreateOutcome::Created { .. }
    ));
}
