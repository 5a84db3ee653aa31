//! Cross-flow waits (`after`): a run whose upstream for its business date is not
//! SUCCESS is held (not admitted, counted toward no `max_active_runs`, its reason
//! shown) and becomes promotable in the very commit that makes the upstream run
//! (or node) SUCCESS; an upstream that FAILED keeps it held. A sub-flow child
//! run finds its parent by its key (on MariaDB too, where `trigger` is reserved).

use madeira_core::{NodeState, RunState};

use crate::tests::suite::new_run;
use crate::*;

const DAY: &str = "2026-12-04";

fn run_of(flow: &str, id: &str, after: Vec<AfterWait>, max: u32) -> NewRun {
    NewRun { flow: flow.into(), biz_date: Some(DAY.into()), after, ..new_run(id, None, max, Overlap::Queue) }
}

fn wait(flow: &str, node: Option<&str>) -> AfterWait {
    AfterWait { flow: flow.into(), node: node.map(str::to_string), date: DAY.into() }
}

async fn finish(s: &dyn Store, run_id: &str, state: RunState) {
    let run = RunWrite { run_id: run_id.into(), state, started_at: Some(20), finished_at: Some(30) };
    s.commit(&Batch { runs: vec![run], ..Batch::default() }).await.expect("commit");
}

async fn reason(s: &dyn Store, run_id: &str) -> Option<String> {
    s.load_run(run_id).await.expect("load").expect("run").run.wait_reason
}

pub(crate) async fn a_run_is_held_until_its_upstream_succeeds(s: &dyn Store) {
    s.create_run(&run_of("a", "a1", vec![], 0)).await.expect("a1");
    let held = s.create_run(&run_of("b", "b1", vec![wait("a", None)], 1)).await.expect("b1");
    assert!(matches!(held, CreateOutcome::Created { start: false, .. }), "{held:?}");
    assert_eq!(reason(s, "b1").await.as_deref(), Some("waiting for a 2026-12-04"));
    assert_eq!(s.run_waits("b1").await.expect("waits"), vec![wait("a", None)]);
    assert!(s.waited_upstreams().await.expect("waited").contains(&"a".to_string()));
    // Held runs count toward no max_active_runs: another run of b starts at once.
    let free = s.create_run(&run_of("b", "b2", vec![], 1)).await.expect("b2");
    assert!(matches!(free, CreateOutcome::Created { start: true, .. }), "{free:?}");
    finish(s, "b2", RunState::Success).await;
    assert_eq!(s.promote_queued("b", 1, 40).await.expect("promote"), None, "a1 is not SUCCESS yet");
    assert_eq!(s.after_dependents("a", DAY).await.expect("deps"), ["b"]);
    finish(s, "a1", RunState::Failed).await;
    assert_eq!(s.promote_queued("b", 1, 40).await.expect("promote"), None, "a FAILED keeps b held");
    // Who the failed a1 holds: b1 (b2 waits for nothing), with its date.
    let held = s.held_runs("a", DAY).await.expect("held");
    let held: Vec<_> = held.iter().map(|r| (r.id.as_str(), r.biz_date.as_deref())).collect();
    assert_eq!(held, [("b1", Some(DAY))]);
    assert!(s.held_runs("a", "2026-12-05").await.expect("held").is_empty(), "another date holds none");
    // A rerun of a1 ends SUCCESS: that commit releases b1.
    finish(s, "a1", RunState::Success).await;
    assert_eq!(s.promote_queued("b", 1, 50).await.expect("promote"), Some("b1".into()));
    assert_eq!(reason(s, "b1").await, None);
    assert!(s.after_dependents("a", DAY).await.expect("deps").is_empty());
    assert!(s.held_runs("a", DAY).await.expect("held").is_empty(), "b1 was released");
    // Created once its upstream is SUCCESS, a run is not held at all.
    let late = s.create_run(&run_of("c", "c1", vec![wait("a", None)], 0)).await.expect("c1");
    assert!(matches!(late, CreateOutcome::Created { start: true, .. }), "{late:?}");
    assert_eq!(reason(s, "c1").await, None);
}

pub(crate) async fn a_node_wait_is_met_by_that_node_alone(s: &dyn Store) {
    s.create_run(&run_of("fx", "fx1", vec![], 0)).await.expect("fx1");
    let held = s.create_run(&run_of("w", "w1", vec![wait("fx", Some("b"))], 0)).await.expect("w1");
    assert!(matches!(held, CreateOutcome::Created { start: false, .. }), "{held:?}");
    assert_eq!(reason(s, "w1").await.as_deref(), Some("waiting for fx.b 2026-12-04"));
    let stored = s.load_run("fx1").await.expect("load").expect("fx1");
    let mut a = stored.nodes[0].clone();
    a.state = NodeState::Success;
    s.commit(&Batch { nodes: vec![a], ..Batch::default() }).await.expect("commit a");
    assert_eq!(s.promote_queued("w", 0, 40).await.expect("promote"), None, "node a is not node b");
    let mut b = stored.nodes[1].clone();
    b.state = NodeState::Success;
    s.commit(&Batch { nodes: vec![b], ..Batch::default() }).await.expect("commit b");
    assert_eq!(s.promote_queued("w", 0, 50).await.expect("promote"), Some("w1".into()));
}

fn node_wait(node: &str, flow: &str, upstream: Option<&str>) -> NodeWait {
    NodeWait { node: node.into(), wait: wait(flow, upstream) }
}

async fn set_node(s: &dyn Store, run_id: &str, idx: usize, state: NodeState) {
    let mut n = s.load_run(run_id).await.expect("load").expect("run").nodes[idx].clone();
    n.state = state;
    n.started_at = Some(60_000);
    s.commit(&Batch { nodes: vec![n], ..Batch::default() }).await.expect("commit node");
}

/// Node-level `after`: the run starts, one node waits. Whether a node wait is met
/// is read from the upstream's rows, so the commit of the upstream node's SUCCESS
/// meets it; a FAILED upstream keeps it unmet; the runs to tell are found with
/// their holder; `held_nodes` lists what `after_policy` looks at.
pub(crate) async fn a_node_waits_for_another_flows_node_while_its_run_goes_on(s: &dyn Store) {
    s.create_run(&run_of("up", "up1", vec![], 0)).await.expect("up1");
    let down = NewRun {
        node_after: vec![node_wait("b", "up", Some("b")), node_wait("b", "other", None)],
        ..run_of("down", "down1", vec![], 0)
    };
    let created = s.create_run(&down).await.expect("down1");
    assert!(
        matches!(created, CreateOutcome::Created { start: true, .. }),
        "node waits hold no run: {created:?}"
    );
    assert_eq!(reason(s, "down1").await, None);
    assert!(s.run_waits("down1").await.expect("run waits").is_empty());
    // Every flow a wait names, once each and in order (node waits included).
    let waited = s.waited_upstreams().await.expect("waited");
    assert!(["other", "up"].iter().all(|f| waited.contains(&f.to_string())), "{waited:?}");
    assert!(waited.windows(2).all(|p| p[0] < p[1]), "{waited:?}");
    let waits = s.node_waits("down1").await.expect("node waits");
    assert_eq!(waits.len(), 2);
    assert!(waits.iter().all(|w| w.node == "b" && !w.met));
    assert_eq!(waits[0].wait, wait("up", Some("b")));
    assert_eq!(waits[0].upstream_run.as_deref(), Some("up1"));
    assert_eq!(waits[0].upstream_state.as_deref(), Some("INIT"));
    assert_eq!(waits[1].upstream_run, None, "`other` has no run for the date");
    // The run is QUEUED: nothing to tell yet, nothing held.
    assert!(s.node_waiters("up", DAY).await.expect("waiters").is_empty());
    let running = RunWrite {
        run_id: "down1".into(),
        state: RunState::Running,
        started_at: Some(10),
        finished_at: None,
    };
    s.commit(&Batch { runs: vec![running], ..Batch::default() }).await.expect("start down1");
    assert_eq!(s.node_waiters("up", DAY).await.expect("waiters"), [("down1".to_string(), None)]);
    assert!(s.node_waiters("up", "2026-12-05").await.expect("waiters").is_empty());
    let held = s.held_nodes().await.expect("held");
    let held: Vec<_> = held.iter().map(|h| (h.run_id.as_str(), h.flow.as_str(), h.node.as_str())).collect();
    assert_eq!(held, [("down1", "down", "b")]);
    // The upstream node runs, then fails: still unmet, with its state and start.
    set_node(s, "up1", 1, NodeState::Failed).await;
    let waits = s.node_waits("down1").await.expect("node waits");
    assert_eq!((waits[0].met, waits[0].upstream_state.as_deref()), (false, Some("FAILED")));
    assert_eq!(waits[0].upstream_since, Some(60_000));
    // Its rerun succeeds: that commit meets the wait; `other` still holds node b.
    set_node(s, "up1", 1, NodeState::Success).await;
    let waits = s.node_waits("down1").await.expect("node waits");
    assert!(waits[0].met && !waits[1].met, "{waits:?}");
    assert_eq!(s.held_nodes().await.expect("held").len(), 1);
    s.create_run(&run_of("other", "o1", vec![], 0)).await.expect("o1");
    finish(s, "o1", RunState::Success).await;
    assert!(s.node_waits("down1").await.expect("node waits").iter().all(|w| w.met));
    assert!(s.held_nodes().await.expect("held").is_empty(), "every wait met");
    // Node b starts: no one waits for `up` any more.
    set_node(s, "down1", 1, NodeState::Running).await;
    assert!(s.node_waiters("up", DAY).await.expect("waiters").is_empty());
    // Waived waits are gone (after_policy: run).
    assert!(s.waive_node_waits("down1", "b").await.expect("waive"));
    assert!(!s.waive_node_waits("down1", "b").await.expect("waive again"));
    assert!(s.node_waits("down1").await.expect("node waits").is_empty());
}

pub(crate) async fn a_subflow_child_finds_its_parent(s: &dyn Store) {
    s.create_run(&new_run("parent", None, 0, Overlap::Queue)).await.expect("parent");
    let key = madeira_core::subflow::child_key("parent", "call", 1);
    let mut child = new_run("child", Some(&key), 0, Overlap::Queue);
    child.trigger = madeira_core::subflow::TRIGGER.into();
    s.create_run(&child).await.expect("child");
    s.create_run(&new_run("plain", Some(&key.replace("parent", "other")), 0, Overlap::Queue))
        .await
        .expect("plain");
    assert_eq!(s.subflow_parent("child").await.expect("read"), Some(("parent".to_string(), None)));
    assert_eq!(s.subflow_parent("plain").await.expect("read"), None, "not made by a sub-flow node");
    assert_eq!(s.subflow_parent("gone").await.expect("read"), None);
}
