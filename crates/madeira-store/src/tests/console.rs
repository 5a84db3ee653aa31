//! What the web console keeps in the store: each run's actor (and the runs search
//! by it), where each attempt ran, and signed-in sessions.

use crate::tests::suite::new_run;
use crate::*;

pub(crate) async fn runs_keep_their_actor_and_are_found_by_it(s: &dyn Store) {
    for (id, actor) in [("r1", "alice"), ("r2", "scheduler"), ("r3", "alice")] {
        s.create_run(&NewRun { actor: actor.into(), ..new_run(id, None, 0, Overlap::Queue) })
            .await
            .expect(id);
    }
    let stored = s.load_run("r2").await.expect("load").expect("exists");
    assert_eq!(stored.run.actor, "scheduler");
    let query = RunQuery { actor: Some("alice".into()), limit: 10, ..RunQuery::default() };
    let ids: Vec<String> = s.list_runs(&query).await.expect("by actor").into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["r3", "r1"], "newest first, only alice's");
    let query = RunQuery { actor: Some("bob".into()), limit: 10, ..RunQuery::default() };
    assert!(s.list_runs(&query).await.expect("nobody").is_empty());
}

pub(crate) async fn run_counts_by_state_stop_at_their_cap(s: &dyn Store) {
    for id in ["r1", "r2", "r3", "r4", "r5"] {
        s.create_run(&new_run(id, None, 0, Overlap::Queue)).await.expect(id);
    }
    let state = s.load_run("r1").await.expect("load").expect("exists").run.state.as_str();
    assert_eq!(s.count_runs(state, "r2", 100).await.expect("from r2"), 4, "r2..r5");
    assert_eq!(s.count_runs(state, "r2", 3).await.expect("capped"), 3, "stops at the cap");
    assert_eq!(s.count_runs(state, "r6", 100).await.expect("none newer"), 0);
    assert_eq!(s.count_runs("CANCELLED", "r0", 100).await.expect("other state"), 0);
}

pub(crate) async fn attempts_keep_the_host_they_ran_on(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    let start = |node: &str, host: Option<&str>| AttemptRecord {
        run_id: "r1".into(),
        node: node.into(),
        attempt: 1,
        started_at: 100,
        finished_at: None,
        outcome: None,
        error: None,
        host: host.map(str::to_string),
    };
    // `a` runs in the control plane; `b` on a sidecar named after its start.
    s.commit(&Batch { attempts: vec![start("a", Some("cp-1")), start("b", None)], ..Batch::default() })
        .await
        .expect("start");
    let placed = AttemptHost { run_id: "r1".into(), node: "b".into(), attempt: 1, host: "sc-1, sc-2".into() };
    s.commit(&Batch { attempt_hosts: vec![placed], ..Batch::default() }).await.expect("placed");
    // The ends carry no host: the one written stays.
    let end = |node: &str| AttemptRecord {
        finished_at: Some(150),
        outcome: Some("SUCCESS".into()),
        ..start(node, None)
    };
    s.commit(&Batch { attempts: vec![end("a"), end("b")], ..Batch::default() }).await.expect("end");
    let stored = s.load_run("r1").await.expect("load").expect("exists");
    let hosts: Vec<(&str, Option<&str>, Option<&str>)> =
        stored.attempts.iter().map(|a| (a.node.as_str(), a.host.as_deref(), a.outcome.as_deref())).collect();
    assert_eq!(hosts, [("a", Some("cp-1"), Some("SUCCESS")), ("b", Some("sc-1, sc-2"), Some("SUCCESS"))]);
}

fn session(id: &str, expires_at: i64) -> SessionRecord {
    SessionRecord {
        id_hash: id.into(),
        name: "sre".into(),
        role: "operator".into(),
        scope: Some(r#"{"team":"pay"}"#.into()),
        csrf: format!("csrf-{id}"),
        created_at: 1,
        expires_at,
    }
}

pub(crate) async fn sessions_expire_end_at_sign_out_and_stay_bounded(s: &dyn Store) {
    s.put_session(&session("h1", 1_000), 10, 10).await.expect("put h1");
    assert_eq!(s.get_session("h1", 999).await.expect("get"), Some(session("h1", 1_000)));
    assert_eq!(s.get_session("h1", 1_000).await.expect("get"), None, "expired at its expiry");
    assert_eq!(s.get_session("nope", 10).await.expect("get"), None);
    // A new session clears the expired ones.
    s.put_session(&session("h2", 5_000), 10, 2_000).await.expect("put h2");
    assert_eq!(s.sessions_live(0).await.expect("count"), 1, "h1 was deleted, not just hidden");
    assert!(s.delete_session("h2").await.expect("sign out"));
    assert!(!s.delete_session("h2").await.expect("again"));
    assert_eq!(s.get_session("h2", 2_000).await.expect("get"), None);
    // At the cap, the session expiring soonest makes room.
    for (i, exp) in [(3, 9_000), (4, 8_000), (5, 7_000)] {
        s.put_session(&session(&format!("h{i}"), exp), 3, 3_000).await.expect("put");
    }
    s.put_session(&session("h6", 9_500), 3, 3_000).await.expect("put h6");
    assert_eq!(s.sessions_live(3_000).await.expect("count"), 3);
    assert_eq!(s.get_session("h5", 3_000).await.expect("get"), None, "the soonest to expire went");
    assert!(s.get_session("h6", 3_000).await.expect("get").is_some());
}

pub(crate) async fn runs_awaiting_confirmation_are_the_running_ones_longest_waiting_first(s: &dyn Store) {
    use madeira_core::{NodeState, RunState};
    for id in ["r1", "r2", "r3", "r4"] {
        s.create_run(&new_run(id, None, 0, Overlap::Queue)).await.expect(id);
    }
    // r1..r3 run; r1's `b` waits since 300, r2's `a` since 200 and its `b` since
    // 250 (one entry), r3 runs without a wait; r4 waits but its run has ended.
    let mut batch = Batch::default();
    for (id, waits) in
        [("r1", vec![(1, 300)]), ("r2", vec![(0, 200), (1, 250)]), ("r3", vec![]), ("r4", vec![(0, 100)])]
    {
        let stored = s.load_run(id).await.expect("load").expect(id);
        let state = if id == "r4" { RunState::Cancelled } else { RunState::Running };
        batch.runs.push(RunWrite { run_id: id.into(), state, started_at: Some(50), finished_at: None });
        for mut node in stored.nodes {
            node.state = NodeState::Running;
            if let Some((_, since)) = waits.iter().find(|(idx, _)| *idx == node.idx) {
                node.state = NodeState::ManualConfirm;
                node.started_at = Some(*since);
            }
            batch.nodes.push(node);
        }
    }
    s.commit(&batch).await.expect("commit");
    assert_eq!(
        s.awaiting_confirmation(10).await.expect("read"),
        ["r2", "r1"],
        "r2 waits since 200, r1 since 300"
    );
    assert_eq!(s.awaiting_confirmation(1).await.expect("capped"), ["r2"]);
}
