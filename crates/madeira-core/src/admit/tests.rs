//! Admission tests: hand-written cases, and a property test that replays random
//! trigger sequences (keys, overlaps, throttles, runs ending, promotions) against a
//! model of the SQL that decided admission before `admit` existed (the body of the
//! stores' `create_in` and `promote_queued` at commit 11568c6, over an in-memory
//! table). There is no intended difference: every decision must be equal. The old
//! SQL wrote an admitted run RUNNING at once; `admit` admits it to start (it
//! counts as active while QUEUED until `Command::Start`), so the model's RUNNING
//! stands for "active" and `Created { state: RUNNING }` for `start: true`.

use proptest::prelude::*;

use super::*;

const NODES: [&str; 2] = ["a", "b"];

/// One row of the model `runs` table, with the claim its throttled nodes still hold.
#[derive(Debug, Clone)]
struct Row {
    id: String,
    key: Option<u8>,
    state: RunState,
    /// Per node of `NODES`: INIT, RETRYING or RUNNING.
    open: [bool; 2],
}

#[derive(Debug, Default)]
struct Db {
    rows: Vec<Row>,
}

impl Db {
    fn claims(&self, node: &str) -> u32 {
        let j = NODES.iter().position(|n| *n == node).expect("model node");
        let live = |r: &&Row| matches!(r.state, RunState::Running | RunState::Queued) && r.open[j];
        self.rows.iter().filter(live).count() as u32
    }
    fn ids_in(&self, state: RunState) -> Vec<String> {
        let mut ids: Vec<String> =
            self.rows.iter().filter(|r| r.state == state).map(|r| r.id.clone()).collect();
        ids.sort();
        ids
    }
}

#[derive(Debug, Clone)]
struct Trigger {
    key: Option<u8>,
    max_active_runs: u32,
    on_overlap: OnOverlap,
    throttles: Vec<Throttle>,
}

#[derive(Debug, Clone)]
enum Event {
    Trigger(Trigger),
    /// The run at this index (mod the table's length) ends: RUNNING succeeds,
    /// QUEUED is cancelled.
    End(usize),
    /// A node of the run at this index leaves its claim (succeeds or is skipped).
    NodeDone(usize, usize),
    Promote(u32),
}

/// The outcome both sides are compared on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Existing(String),
    Throttled { node: String, claims: u32, max_permits: u32, queue_size: u32 },
    Skipped(Vec<String>),
    Created { state: RunState, cancel_previous: Vec<String> },
}

/// The old `create_in`, query by query.
fn old_sql(db: &Db, t: &Trigger) -> Outcome {
    if let Some(key) = t.key
        && let Some(row) = db.rows.iter().find(|r| r.key == Some(key))
    {
        return Outcome::Existing(row.id.clone());
    }
    for claim in &t.throttles {
        let claims = db.claims(&claim.node);
        if i64::from(claims) >= i64::from(claim.max_permits) + i64::from(claim.queue_size) {
            let (max_permits, queue_size) = (claim.max_permits, claim.queue_size);
            return Outcome::Throttled { node: claim.node.clone(), claims, max_permits, queue_size };
        }
    }
    let (active, room) = if t.max_active_runs == 0 {
        (Vec::new(), true)
    } else {
        let active = db.ids_in(RunState::Running);
        let queued = db.rows.iter().any(|r| r.state == RunState::Queued);
        let room = active.len() < t.max_active_runs as usize && !queued;
        (active, room)
    };
    match (room, t.on_overlap) {
        (true, _) => Outcome::Created { state: RunState::Running, cancel_previous: Vec::new() },
        (false, OnOverlap::Skip) => Outcome::Skipped(active),
        (false, OnOverlap::Queue) => {
            Outcome::Created { state: RunState::Queued, cancel_previous: Vec::new() }
        }
        (false, OnOverlap::CancelPrevious) => {
            Outcome::Created { state: RunState::Queued, cancel_previous: active }
        }
    }
}

/// The old `promote_queued`.
fn old_promote(db: &Db, max: u32) -> Option<String> {
    let active = db.ids_in(RunState::Running).len() as u32;
    if max != 0 && active >= max {
        return None;
    }
    db.ids_in(RunState::Queued).into_iter().next()
}

/// Every fact, gathered whether or not `admit` will read it.
fn all_facts(db: &Db, t: &Trigger) -> Facts {
    let existing = t.key.and_then(|k| db.rows.iter().find(|r| r.key == Some(k)));
    Facts {
        existing: existing.map(|r| Existing { run_id: r.id.clone(), version: 1 }),
        claims: t.throttles.iter().map(|c| db.claims(&c.node)).collect(),
        active: db.ids_in(RunState::Running),
        queued: db.rows.iter().any(|r| r.state == RunState::Queued),
    }
}

/// Only the facts `Facts` says a store must gather.
fn lazy_facts(db: &Db, t: &Trigger) -> Facts {
    let all = all_facts(db, t);
    if all.existing.is_some() {
        return Facts { existing: all.existing, ..Facts::default() };
    }
    if t.max_active_runs == 0 {
        return Facts { active: Vec::new(), queued: false, ..all };
    }
    all
}

fn outcome(d: Decision) -> Outcome {
    match d {
        Decision::Existing(e) => Outcome::Existing(e.run_id),
        Decision::Throttled { node, claims, max_permits, queue_size } => {
            Outcome::Throttled { node, claims, max_permits, queue_size }
        }
        Decision::Skip { active } => Outcome::Skipped(active),
        Decision::Create { start, cancel_previous, .. } => {
            let state = if start { RunState::Running } else { RunState::Queued };
            Outcome::Created { state, cancel_previous }
        }
    }
}

fn policy(t: &Trigger) -> Policy<'_> {
    Policy { max_active_runs: t.max_active_runs, on_overlap: t.on_overlap, throttles: &t.throttles }
}

fn arb_trigger() -> impl Strategy<Value = Trigger> {
    let overlap = prop_oneof![Just(OnOverlap::Queue), Just(OnOverlap::Skip), Just(OnOverlap::CancelPrevious)];
    let throttle = (0usize..2, 0u32..3, 0u32..3).prop_map(|(j, max_permits, queue_size)| Throttle {
        node: NODES[j].into(),
        max_permits,
        queue_size,
    });
    (proptest::option::of(0u8..4), 0u32..4, overlap, proptest::collection::vec(throttle, 0..3)).prop_map(
        |(key, max_active_runs, on_overlap, mut throttles)| {
            throttles.dedup_by(|a, b| a.node == b.node);
            Trigger { key, max_active_runs, on_overlap, throttles }
        },
    )
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => arb_trigger().prop_map(Event::Trigger),
        2 => any::<usize>().prop_map(Event::End),
        1 => (any::<usize>(), 0usize..2).prop_map(|(r, j)| Event::NodeDone(r, j)),
        2 => (0u32..4).prop_map(Event::Promote),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn admit_decides_as_the_old_sql_did(events in proptest::collection::vec(arb_event(), 1..60)) {
        let mut db = Db::default();
        for event in events {
            match event {
                Event::Trigger(t) => {
                    let old = old_sql(&db, &t);
                    let full = admit(&all_facts(&db, &t), &policy(&t)).expect("admit");
                    let lazy = admit(&lazy_facts(&db, &t), &policy(&t)).expect("admit");
                    prop_assert_eq!(&full, &lazy, "the facts a store may leave out changed the decision");
                    if let Decision::Create { created, start, .. } = &full {
                        let (cause, to) = if *start {
                            (RunCause::Admitted, RunState::Admitted)
                        } else {
                            (RunCause::Created, RunState::Queued)
                        };
                        prop_assert_eq!(*created, RunEdge { from: None, cause, to });
                    }
                    prop_assert_eq!(outcome(full), old.clone());
                    if let Outcome::Created { state, cancel_previous } = old {
                        for row in db.rows.iter_mut().filter(|r| cancel_previous.contains(&r.id)) {
                            row.state = RunState::Cancelled;
                        }
                        let id = format!("r{:04}", db.rows.len());
                        db.rows.push(Row { id, key: t.key, state, open: [true; 2] });
                    }
                }
                Event::End(i) if !db.rows.is_empty() => {
                    let len = db.rows.len();
                    let row = &mut db.rows[i % len];
                    row.state = match row.state {
                        RunState::Running => RunState::Success,
                        RunState::Queued => RunState::Cancelled,
                        done => done,
                    };
                }
                Event::NodeDone(i, j) if !db.rows.is_empty() => {
                    let len = db.rows.len();
                    db.rows[i % len].open[j] = false;
                }
                Event::Promote(max) => {
                    let old = old_promote(&db, max);
                    let facts = QueueFacts {
                        active: db.ids_in(RunState::Running).len() as u32,
                        oldest_queued: db.ids_in(RunState::Queued).into_iter().next(),
                    };
                    let new = promote(&facts, max);
                    prop_assert_eq!(&new, &old);
                    if let Some(run_id) = new {
                        let row = db.rows.iter_mut().find(|r| r.id == run_id).expect("queued row");
                        row.state = RunState::Running;
                    }
                }
                Event::End(_) | Event::NodeDone(..) => {}
            }
            let running = db.ids_in(RunState::Running).len();
            prop_assert!(running <= db.rows.len());
        }
    }

    #[test]
    fn a_start_never_exceeds_max_active_runs_nor_overtakes_the_queue(
        active in 0usize..5, queued: bool, max in 1u32..4, t in arb_trigger(),
    ) {
        let facts = Facts {
            existing: None,
            claims: Vec::new(),
            active: (0..active).map(|i| format!("r{i}")).collect(),
            queued,
        };
        let p = Policy { max_active_runs: max, on_overlap: t.on_overlap, throttles: &[] };
        let d = admit(&facts, &p).expect("admit");
        if d.starts() {
            prop_assert!(active < max as usize && !queued);
        } else {
            prop_assert!(active >= max as usize || queued);
        }
    }
}

#[test]
fn a_known_key_wins_over_every_refusal() {
    let throttles = [Throttle { node: "a".into(), max_permits: 0, queue_size: 0 }];
    let existing = Existing { run_id: "r1".into(), version: 3 };
    let facts = Facts { existing: Some(existing.clone()), ..Facts::default() };
    let p = Policy { max_active_runs: 1, on_overlap: OnOverlap::Skip, throttles: &throttles };
    assert_eq!(admit(&facts, &p), Ok(Decision::Existing(existing)));
}

#[test]
fn cancel_previous_queues_and_names_the_running_runs() {
    let facts = Facts { active: vec!["r1".into(), "r2".into()], ..Facts::default() };
    let p = Policy { max_active_runs: 2, on_overlap: OnOverlap::CancelPrevious, throttles: &[] };
    let d = admit(&facts, &p).expect("admit");
    assert!(
        matches!(d, Decision::Create { start: false, cancel_previous, .. } if cancel_previous == ["r1", "r2"])
    );
}

#[test]
fn a_full_throttle_queue_refuses_with_its_counts() {
    let throttles = [Throttle { node: "b".into(), max_permits: 1, queue_size: 1 }];
    let facts = Facts { claims: vec![2], ..Facts::default() };
    let p = Policy { max_active_runs: 0, on_overlap: OnOverlap::Queue, throttles: &throttles };
    let refused = Decision::Throttled { node: "b".into(), claims: 2, max_permits: 1, queue_size: 1 };
    assert_eq!(admit(&facts, &p), Ok(refused));
}

#[test]
fn promotion_waits_for_room_and_takes_the_oldest() {
    let facts = QueueFacts { active: 1, oldest_queued: Some("r2".into()) };
    assert_eq!(promote(&facts, 1), None);
    assert_eq!(promote(&facts, 2), Some("r2".into()));
    assert_eq!(promote(&QueueFacts::default(), 0), None);
}
