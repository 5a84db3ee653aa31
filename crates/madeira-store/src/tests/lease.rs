//! Lease bodies shared by every backend: claims, stealing idle runs, fenced
//! commits, takeover of expired leases by exactly one replica.

use madeira_core::{NodeState, RunState};

use super::suite::new_run;
use crate::*;

/// A lease of `length_ms`, stamped by a caller whose clock is `skew_ms` off the
/// real one: the store measures leases by the database's clock only, so the
/// skew must change nothing.
fn skewed(owner: &str, length_ms: i64, skew_ms: i64) -> Lease {
    let now = real_now() + skew_ms;
    Lease { owner: owner.into(), now_ms: now, until_ms: now + length_ms }
}

/// A lease of a minute (live for the whole test).
fn live(owner: &str) -> Lease {
    skewed(owner, 60_000, 0)
}

/// A lease that lapsed a minute ago (a holder that stopped renewing).
fn lapsed(owner: &str) -> Lease {
    skewed(owner, -60_000, 0)
}

const HOUR: i64 = 3_600_000;

fn real_now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn finished(run_id: &str) -> RunWrite {
    RunWrite { run_id: run_id.into(), state: RunState::Success, started_at: None, finished_at: Some(8) }
}

fn running(mut stored: StoredRun) -> NodeRow {
    stored.nodes[0].state = NodeState::Running;
    stored.nodes.swap_remove(0)
}

pub(crate) async fn claims_follow_owner_and_expiry(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    assert_eq!(s.claim_run("nope", &live("a"), false).await.expect("claim"), Claim::Missing);
    assert_eq!(s.claim_run("r1", &live("a"), false).await.expect("claim"), Claim::Held);
    assert_eq!(s.claim_run("r1", &live("a"), false).await.expect("again"), Claim::Held);
    let other = Claim::Other { owner: "a".into() };
    assert_eq!(s.claim_run("r1", &live("b"), false).await.expect("b early"), other);
    // An idle run (no node RUNNING) may be taken for an operator action.
    assert_eq!(s.claim_run("r1", &live("b"), true).await.expect("steal idle"), Claim::Held);
    let stored = s.load_run("r1").await.expect("load").expect("exists");
    let batch = Batch { owner: Some("b".into()), nodes: vec![running(stored)], ..Batch::default() };
    s.commit(&batch).await.expect("b holds r1");
    assert_eq!(
        s.claim_run("r1", &live("a"), true).await.expect("busy"),
        Claim::Other { owner: "b".into() },
        "a run with an attempt in flight is never stolen"
    );
    assert_eq!(s.renew_leases(&live("b")).await.expect("renew"), 1);
    assert_eq!(
        s.claim_run("r1", &live("a"), false).await.expect("renewed"),
        Claim::Other { owner: "b".into() }
    );
    // b stops renewing: its lease lapses (written here as lapsed already).
    assert_eq!(s.renew_leases(&lapsed("b")).await.expect("lapse"), 1);
    assert_eq!(s.claim_run("r1", &live("a"), false).await.expect("expired"), Claim::Held);
}

pub(crate) async fn commits_are_fenced_on_the_owner(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("r1");
    s.create_run(&new_run("r2", None, 0, Overlap::Queue)).await.expect("r2");
    s.create_run(&new_run("r3", None, 0, Overlap::Queue)).await.expect("r3");
    assert_eq!(s.claim_run("r1", &live("a"), false).await.expect("a r1"), Claim::Held);
    assert_eq!(s.claim_run("r2", &live("b"), false).await.expect("b r2"), Claim::Held);
    assert_eq!(s.claim_run("r3", &live("c"), false).await.expect("c r3"), Claim::Held);
    let r1 = running(s.load_run("r1").await.expect("load").expect("r1"));
    let r2 = running(s.load_run("r2").await.expect("load").expect("r2"));
    let r3 = running(s.load_run("r3").await.expect("load").expect("r3"));
    let mixed = Batch { owner: Some("a".into()), nodes: vec![r1.clone(), r2, r3], ..Batch::default() };
    // The refusal names every run the batch touches that `a` does not hold (and
    // only those), so the caller can commit the rest without them.
    match s.commit(&mixed).await {
        Err(StoreError::LeaseLost { owner, runs }) => {
            assert_eq!((owner.as_str(), runs), ("a", vec!["r2".to_string(), "r3".to_string()]))
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    let r1_after = s.load_run("r1").await.expect("load").expect("r1");
    assert_eq!(r1_after.nodes[0].state, NodeState::Init, "a fenced batch writes nothing");
    let own = Batch { owner: Some("a".into()), nodes: vec![r1], ..Batch::default() };
    s.commit(&own).await.expect("a commits its own run");
    let r1_after = s.load_run("r1").await.expect("load").expect("r1");
    assert_eq!(r1_after.nodes[0].state, NodeState::Running, "the held run's rows are written");
}

pub(crate) async fn expired_runs_are_taken_over_once(s: &dyn Store) {
    for i in 0..20 {
        s.create_run(&new_run(&format!("r{i:02}"), None, 0, Overlap::Queue)).await.expect("create");
        s.claim_run(&format!("r{i:02}"), &live("dead"), false).await.expect("claim");
    }
    assert!(s.claim_expired(&live("b"), 100).await.expect("early").is_empty(), "leases still valid");
    // `dead` stops renewing: its leases lapse.
    assert_eq!(s.renew_leases(&lapsed("dead")).await.expect("lapse"), 20);
    let (lb, lc) = (live("b"), live("c"));
    let (b, c) = futures::join!(s.claim_expired(&lb, 100), s.claim_expired(&lc, 100));
    let (b, c) = (b.expect("b"), c.expect("c"));
    let mut all: Vec<String> = b.iter().chain(c.iter()).cloned().collect();
    all.sort();
    let expected: Vec<String> = (0..20).map(|i| format!("r{i:02}")).collect();
    assert_eq!(all, expected, "every expired run is taken by exactly one replica (b {b:?}, c {c:?})");
    assert!(s.claim_expired(&live("b"), 100).await.expect("again").is_empty(), "fresh leases");
    // A run admitted to start that nobody claimed (its creator died at once) is
    // taken after the grace (from its creation, by the database's clock).
    let created = real_now();
    s.create_run(&NewRun { now_ms: created, ..new_run("orphan", None, 0, Overlap::Queue) })
        .await
        .expect("orphan");
    let early = s.claim_expired(&live("b"), 100).await.expect("grace");
    if real_now() < created + UNCLAIMED_GRACE_MS {
        assert!(!early.iter().any(|id| id == "orphan"), "taken within the grace: {early:?}");
    }
    // Waits out the grace (real time: the database's clock decides), bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut taken = early.iter().any(|id| id == "orphan");
    while !taken {
        assert!(std::time::Instant::now() < deadline, "the orphan was not taken after the grace");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        taken = s.claim_expired(&live("b"), 100).await.expect("late").iter().any(|id| id == "orphan");
    }
}

/// A replica whose clock is an hour ahead (or behind) neither takes a live
/// holder's runs nor writes leases that lapse at once or last an hour: every
/// lease is written and judged by the database's clock.
pub(crate) async fn a_skewed_replica_clock_neither_takes_nor_keeps_leases(s: &dyn Store) {
    for skew in [HOUR, -HOUR] {
        let (held, born_id) = (format!("held{skew}"), format!("born{skew}"));
        s.create_run(&new_run(&held, None, 0, Overlap::Queue)).await.expect("create");
        assert_eq!(s.claim_run(&held, &live("b"), false).await.expect("b"), Claim::Held);
        let ahead = skewed("a", 60_000, skew);
        assert_eq!(
            s.claim_run(&held, &ahead, false).await.expect("skewed claim"),
            Claim::Other { owner: "b".into() },
            "a clock {skew} ms off takes a live run"
        );
        assert!(s.claim_expired(&ahead, 100).await.expect("takeover").is_empty(), "skew {skew}: took over");
        // Renewed by a skewed holder: still a minute by the database's clock.
        assert_eq!(s.renew_leases(&skewed("b", 60_000, skew)).await.expect("renew"), 1);
        assert!(s.claim_expired(&live("c"), 100).await.expect("takeover").is_empty(), "skew {skew}");
        // A run held from birth by a skewed creator: its lease is the database's.
        let born = NewRun {
            now_ms: real_now() + skew,
            lease: Some(skewed("a", 60_000, skew)),
            ..new_run(&born_id, None, 0, Overlap::Queue)
        };
        s.create_run(&born).await.expect("born");
        assert_eq!(
            s.claim_run(&born_id, &live("c"), false).await.expect("born claim"),
            Claim::Other { owner: "a".into() },
            "a run born to a replica {skew} ms off is live"
        );
        assert!(s.claim_expired(&live("c"), 100).await.expect("takeover").is_empty(), "skew {skew}");
        // A lapsed lease is lapsed whatever the taker's clock says.
        assert_eq!(s.renew_leases(&skewed("b", -60_000, -skew)).await.expect("lapse"), 1);
        let taken = s.claim_expired(&skewed("c", 60_000, -skew), 100).await.expect("takeover");
        assert_eq!(taken, [held], "skew {skew}");
        // Leaves nothing for the next skew to take over.
        assert_eq!(
            s.claim_run(&born_id, &skewed("a", -60_000, skew), false).await.expect("lapse"),
            Claim::Held
        );
        s.commit(&Batch { runs: vec![finished(&born_id)], ..Batch::default() }).await.expect("finish");
    }
}

/// A finished run keeps the owner that finished it: a replica that lost it
/// (frozen, partitioned) and comes back neither claims, renews nor takes it over.
pub(crate) async fn a_finished_run_never_changes_owner(s: &dyn Store) {
    s.create_run(&new_run("r1", None, 0, Overlap::Queue)).await.expect("create");
    assert_eq!(s.claim_run("r1", &live("b"), false).await.expect("b"), Claim::Held);
    s.commit(&Batch { owner: Some("b".into()), runs: vec![finished("r1")], ..Batch::default() })
        .await
        .expect("finish");
    // b's lease lapses (it stops renewing a finished run).
    assert_eq!(
        s.renew_leases(&lapsed("b")).await.expect("renew"),
        0,
        "a finished run's lease is not renewed"
    );
    assert_eq!(s.renew_leases(&live("a")).await.expect("renew"), 0);
    assert!(s.claim_expired(&live("a"), 100).await.expect("takeover").is_empty());
    assert_eq!(
        s.claim_run("r1", &live("a"), false).await.expect("thawed claim"),
        Claim::Other { owner: "b".into() },
        "the engine's own work never takes a finished run"
    );
    assert_eq!(
        s.claim_run("r1", &live("c"), false).await.expect("owner"),
        Claim::Other { owner: "b".into() }
    );
    let stale = Batch {
        owner: Some("a".into()),
        runs: vec![RunWrite {
            run_id: "r1".into(),
            state: RunState::Running,
            started_at: None,
            finished_at: None,
        }],
        ..Batch::default()
    };
    assert!(matches!(s.commit(&stale).await, Err(StoreError::LeaseLost { .. })), "a's write is fenced");
    let r1 = s.load_run("r1").await.expect("load").expect("r1");
    assert_eq!(r1.run.state, RunState::Success);
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
    assert_eq!(s.claim_run("r1", &live("a"), false).await.expect("claim"), Claim::Held);
    assert_eq!(
        s.adopt_run("r1", "c", &live("b")).await.expect("adopt"),
        Claim::Other { owner: "a".into() },
        "c offered it, but a holds it: the offer is stale"
    );
    assert_eq!(s.adopt_run("r1", "a", &live("b")).await.expect("adopt"), Claim::Held);
    // Offered back by b while a node runs there: refused.
    let stored = s.load_run("r1").await.expect("load").expect("exists");
    let batch = Batch { owner: Some("b".into()), nodes: vec![running(stored)], ..Batch::default() };
    s.commit(&batch).await.expect("b holds r1");
    assert_eq!(
        s.adopt_run("r1", "b", &live("a")).await.expect("busy"),
        Claim::Other { owner: "b".into() },
        "a run with an attempt in flight is never adopted"
    );
    assert_eq!(s.adopt_run("missing", "b", &live("a")).await.expect("missing"), Claim::Missing);
}
