//! Lease bodies shared by every backend: claims, stealing idle runs, fenced
//! commits, takeover of expired leases by exactly one replica.

use madeira_core::NodeState;

use super::suite::new_run;
use crate::*;

fn lease(owner: &str, now_ms: i64) -> Lease {
    Lease { owner: owner.into(), now_ms, until_ms: now_ms + 1_000 }
}

pub(crate) async fn claims_follow_owner_and_expiry(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    assert_eq!(s.claim_run("nope", &lease("a", 100), false).await.expect("claim"), Claim::Missing);
    assert_eq!(s.claim_run("r1", &lease("a", 100), false).await.expect("claim"), Claim::Held);
    assert_eq!(s.claim_run("r1", &lease("a", 200), false).await.expect("again"), Claim::Held);
    let other = Claim::Other { owner: "a".into() };
    assert_eq!(s.claim_run("r1", &lease("b", 300), false).await.expect("b early"), other);
    // An idle run (no node RUNNING) may be taken for an operator action.
    assert_eq!(s.claim_run("r1", &lease("b", 300), true).await.expect("steal idle"), Claim::Held);
    let mut stored = s.load_run("r1").await.expect("load").expect("exists");
    stored.nodes[0].state = NodeState::Running;
    let batch = Batch { owner: Some("b".into()), nodes: vec![stored.nodes[0].clone()], ..Batch::default() };
    s.commit(&batch).await.expect("b holds r1");
    assert_eq!(
        s.claim_run("r1", &lease("a", 400), true).await.expect("busy"),
        Claim::Other { owner: "b".into() },
        "a run with an attempt in flight is never stolen"
    );
    assert_eq!(s.renew_leases(&lease("b", 1_000)).await.expect("renew"), 1);
    assert_eq!(
        s.claim_run("r1", &lease("a", 1_999), false).await.expect("renewed"),
        Claim::Other { owner: "b".into() }
    );
    assert_eq!(s.claim_run("r1", &lease("a", 2_001), false).await.expect("expired"), Claim::Held);
}

pub(crate) async fn commits_are_fenced_on_the_owner(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("r1");
    s.create_run(&new_run("r2", None, 0, Overlap::Queue)).await.expect("r2");
    assert_eq!(s.claim_run("r1", &lease("a", 100), false).await.expect("a r1"), Claim::Held);
    assert_eq!(s.claim_run("r2", &lease("b", 100), false).await.expect("b r2"), Claim::Held);
    let mut r1 = s.load_run("r1").await.expect("load").expect("r1");
    let mut r2 = s.load_run("r2").await.expect("load").expect("r2");
    r1.nodes[0].state = NodeState::Running;
    r2.nodes[0].state = NodeState::Running;
    let mixed = Batch {
        owner: Some("a".into()),
        nodes: vec![r1.nodes[0].clone(), r2.nodes[0].clone()],
        ..Batch::default()
    };
    match s.commit(&mixed).await {
        Err(StoreError::LeaseLost { owner, runs }) => {
            assert_eq!((owner.as_str(), runs), ("a", vec!["r2".to_string()]))
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    let r1_after = s.load_run("r1").await.expect("load").expect("r1");
    assert_eq!(r1_after.nodes[0].state, NodeState::Init, "a fenced batch writes nothing");
    let own = Batch { owner: Some("a".into()), nodes: vec![r1.nodes[0].clone()], ..Batch::default() };
    s.commit(&own).await.expect("a commits its own run");
}

pub(crate) async fn expired_runs_are_taken_over_once(s: &dyn Store) {
    for i in 0..20 {
        s.create_run(&new_run(&format!("r{i:02}"), None, 0, Overlap::Queue)).await.expect("create");
        s.claim_run(&format!("r{i:02}"), &lease("dead", 100), false).await.expect("claim");
    }
    assert!(s.claim_expired(&lease("b", 500), 100).await.expect("early").is_empty(), "leases still valid");
    let (lb, lc) = (lease("b", 5_000), lease("c", 5_000));
    let (b, c) = futures::join!(s.claim_expired(&lb, 100), s.claim_expired(&lc, 100));
    let (b, c) = (b.expect("b"), c.expect("c"));
    let mut all: Vec<String> = b.iter().chain(c.iter()).cloned().collect();
    all.sort();
    let expected: Vec<String> = (0..20).map(|i| format!("r{i:02}")).collect();
    assert_eq!(all, expected, "every expired run is taken by exactly one replica (b {b:?}, c {c:?})");
    assert!(s.claim_expired(&lease("b", 5_500), 100).await.expect("again").is_empty(), "fresh leases");
    // A run admitted to start that nobody claimed (its creator died at once) is
    // taken after the grace.
    s.create_run(&NewRun { now_ms: 10_000, ..new_run("orphan", None, 0, Overlap::Queue) })
        .await
        .expect("orphan");
    // (Runs that `c` took above have expired by now too; only the orphan matters here.)
    let early = s.claim_expired(&lease("b", 10_500), 100).await.expect("grace");
    assert!(!early.iter().any(|id| id == "orphan"), "taken within the grace: {early:?}");
    let late = s.claim_expired(&lease("b", 10_000 + UNCLAIMED_GRACE_MS + 1), 100).await.expect("late");
    assert!(late.iter().any(|id| id == "orphan"), "not taken after the grace: {late:?}");
}

pub(crate) async fn forwarded_commands_are_taken_once_and_answered(s: &dyn Store) {
    let cmd = |run: &str, target: &str| RunCommand {
        id: 0,
        run_id: run.into(),
        target: target.into(),
        action: "confirm".into(),
        node: Some("gate".into()),
        actor: "sre".into(),
        reason: Some("ok".into()),
        created_at: 5,
    };
    let first = s.send_command(&cmd("r1", "a")).await.expect("send");
    let second = s.send_command(&cmd("r2", "a")).await.expect("send");
    let other = s.send_command(&cmd("r3", "b")).await.expect("send");
    let (t1, t2) = futures::join!(s.take_commands("a", 10), s.take_commands("a", 10));
    let mut taken: Vec<i64> = t1.expect("take").into_iter().chain(t2.expect("take")).map(|c| c.id).collect();
    taken.sort();
    assert_eq!(taken, [first, second], "each command is taken once, by its target only");
    assert!(s.take_commands("a", 11).await.expect("again").is_empty());
    assert!(!s.withdraw_command(first).await.expect("withdraw taken"), "a taken command stays");
    assert_eq!(s.command_answer(first).await.expect("answer"), None);
    s.answer_command(first, r#"{"ok":true}"#, 12).await.expect("answer");
    assert_eq!(s.command_answer(first).await.expect("answer").as_deref(), Some(r#"{"ok":true}"#));
    assert!(s.withdraw_command(other).await.expect("withdraw"), "nobody took it");
    assert!(s.take_commands("b", 13).await.expect("b").is_empty());
    let b = s.send_command(&cmd("r4", "b")).await.expect("send");
    let got = s.take_commands("b", 14).await.expect("b");
    assert_eq!(got, vec![RunCommand { id: b, ..cmd("r4", "b") }]);

    // An applied action's answer travels in the commit that applied it.
    let answers = vec![CommandAnswer { id: second, answer: r#"{"ok":true}"#.into(), at: 15 }];
    s.commit(&Batch { answers, ..Batch::default() }).await.expect("commit");
    assert_eq!(s.command_answer(second).await.expect("answer").as_deref(), Some(r#"{"ok":true}"#));
}

pub(crate) async fn sidecar_presence_names_fresh_hosts_of_a_job(s: &dyn Store) {
    let group = |name: &str, jobs: &[&str]| SidecarPresence {
        group: name.into(),
        jobs: jobs.iter().map(|j| j.to_string()).collect(),
    };
    s.publish_sidecars("a", &[group("billing", &["settle", "refund"]), group("ops", &["backup"])], 100)
        .await
        .expect("publish a");
    s.publish_sidecars("b", &[group("billing", &["settle"])], 200).await.expect("publish b");
    assert_eq!(s.sidecar_hosts("billing", "settle", 50).await.expect("hosts"), ["b", "a"], "freshest first");
    assert_eq!(s.sidecar_hosts("billing", "refund", 50).await.expect("hosts"), ["a"], "only where declared");
    assert_eq!(s.sidecar_hosts("billing", "settle", 150).await.expect("hosts"), ["b"], "a is stale");
    assert!(s.sidecar_hosts("ops", "settle", 0).await.expect("hosts").is_empty());

    // A replica's new report replaces its old one: groups it lost disappear.
    s.publish_sidecars("a", &[group("ops", &["backup"])], 300).await.expect("republish");
    assert_eq!(s.sidecar_hosts("billing", "refund", 0).await.expect("hosts"), Vec::<String>::new());
    assert_eq!(s.sidecar_hosts("ops", "backup", 250).await.expect("hosts"), ["a"]);
    let all = s.sidecar_presence(250).await.expect("all");
    assert_eq!(all, vec![("a".to_string(), group("ops", &["backup"]), 300)]);
    s.publish_sidecars("a", &[], 400).await.expect("no sidecars left");
    assert!(s.sidecar_hosts("ops", "backup", 0).await.expect("hosts").is_empty());
}

pub(crate) async fn an_offered_run_is_adopted_only_from_its_offerer_while_idle(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    assert_eq!(s.claim_run("r1", &lease("a", 100), false).await.expect("claim"), Claim::Held);
    assert_eq!(
        s.adopt_run("r1", "c", &lease("b", 200)).await.expect("adopt"),
        Claim::Other { owner: "a".into() },
        "c offered it, but a holds it: the offer is stale"
    );
    assert_eq!(s.adopt_run("r1", "a", &lease("b", 200)).await.expect("adopt"), Claim::Held);
    // Offered back by b while a node runs there: refused.
    let mut stored = s.load_run("r1").await.expect("load").expect("exists");
    stored.nodes[0].state = NodeState::Running;
    let batch = Batch { owner: Some("b".into()), nodes: vec![stored.nodes[0].clone()], ..Batch::default() };
    s.commit(&batch).await.expect("b holds r1");
    assert_eq!(
        s.adopt_run("r1", "b", &lease("a", 300)).await.expect("busy"),
        Claim::Other { owner: "b".into() },
        "a run with an attempt in flight is never adopted"
    );
    assert_eq!(s.adopt_run("missing", "b", &lease("a", 300)).await.expect("missing"), Claim::Missing);
}
