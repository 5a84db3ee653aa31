//! The step without I/O: each command kind on a run's snapshot, what it records in
//! the batch, which actions it leaves for the effects, and its refusals.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use madeira_core::{Action, Command, NodeState, Refusal, RunSnapshot, RunState};
use serde_json::{Map, json};

use super::{Step, StepOptions};
use crate::EngineError;
use crate::clock::Clock;
use crate::executor::{AttemptResult, Executors, HttpPolicy};
use crate::record::Work;

/// `a` retries once; `b` needs `a`; `m` waits for a person after `a`, with a fallback.
const FLOW: &str = "\
flow: f
nodes:
  a: {run: {builtin: noop}, retry: {attempts: 2, backoff: 1s, jitter: 0s}}
  b: {needs: [a], run: {builtin: noop}}
  m:
    needs: [a]
    manual:
      prompt: 'ok?'
      fallback_after: 1s
      fallback: {builtin: noop}
";
const A: usize = 0;
const B: usize = 1;
const M: usize = 2;

/// The wall time every step test starts at.
const T0: i64 = 1_765_000_000_000;

/// A clock that stands still until a test moves it, with a fixed jitter draw.
struct FixedClock {
    ms: AtomicI64,
    at: Instant,
    unit: f64,
}

impl FixedClock {
    fn new(unit: f64) -> Arc<Self> {
        Arc::new(Self { ms: AtomicI64::new(T0), at: Instant::now(), unit })
    }

    fn advance(&self, ms: i64) {
        self.ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        self.ms.load(Ordering::SeqCst)
    }

    fn instant(&self) -> Instant {
        self.at + Duration::from_millis(u64::try_from(self.now_ms() - T0).unwrap_or(0))
    }

    fn jitter_unit(&self) -> f64 {
        self.unit
    }
}

fn new_step(max_output_bytes: usize) -> Step {
    with_clock(max_output_bytes, FixedClock::new(0.5))
}

fn with_clock(max_output_bytes: usize, clock: Arc<FixedClock>) -> Step {
    Step::new(StepOptions {
        executors: Arc::new(Executors::new(HttpPolicy::default())),
        observers: Vec::new(),
        waiting: Default::default(),
        owner: "replica-1".into(),
        shared_store: false,
        max_output_bytes,
        clock,
    })
}

/// A step holding runs `ids` of `source`, admitted to start.
fn holding(source: &str, ids: &[&str]) -> Step {
    let flow = Arc::new(madeira_core::spec::parse_flow("f.yaml", source).expect("test flow parses"));
    let mut step = new_step(64 * 1024);
    for id in ids {
        step.runs.insert(id.to_string(), RunSnapshot::new(id.to_string(), flow.clone(), json!({})));
    }
    step
}

/// A step holding `ids` of `source`, each QUEUED (waiting: not admitted to start).
fn waiting(source: &str, ids: &[&str]) -> Step {
    let mut step = holding(source, ids);
    for snap in step.runs.values_mut() {
        snap.state = RunState::Queued;
    }
    step
}

/// Run `r1` of `FLOW`, started: `a` dispatched in the same step.
fn started() -> (Step, Work) {
    let mut step = holding(FLOW, &["r1"]);
    let mut work = Work::default();
    step.apply("r1", Command::Start, "engine", &mut work).expect("start");
    (step, work)
}

fn apply(step: &mut Step, cmd: Command) -> (Result<(), EngineError>, Work) {
    let mut work = Work::default();
    let result = step.apply("r1", cmd, "alice", &mut work);
    (result, work)
}

fn node(step: &Step, run: &str, node: usize) -> NodeState {
    step.runs[run].nodes[node].state
}

fn actions(work: &Work) -> Vec<Action> {
    work.actions.iter().map(|(_, action)| action.clone()).collect()
}

fn refusal(result: Result<(), EngineError>) -> Refusal {
    match result {
        Err(EngineError::Refused { refusal, .. }) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn succeeded(node: usize, attempt: u32) -> Command {
    Command::AttemptSucceeded { node, attempt, outputs: Map::new() }
}

#[test]
fn start_runs_the_run_and_dispatches_its_ready_node_in_the_same_step() {
    let (step, work) = started();
    assert_eq!(step.runs["r1"].state, RunState::Running);
    assert_eq!(node(&step, "r1", A), NodeState::Running);
    assert_eq!(node(&step, "r1", B), NodeState::Init);
    assert_eq!(actions(&work), [Action::Execute { node: A, attempt: 1, fallback: false }]);
    let started = &work.batch.attempts;
    assert_eq!(started.len(), 1, "the attempt's start is written with the batch");
    assert_eq!(started[0].host.as_deref(), Some("replica-1"), "a builtin runs on this replica");
    assert!(work.batch.transitions.iter().any(|t| t.node.is_none()), "the run's own edge is recorded");
    assert!(work.batch.transitions.iter().all(|t| t.actor == "engine"));
}

#[test]
fn start_is_refused_for_a_run_already_running() {
    let (mut step, _) = started();
    let (result, work) = apply(&mut step, Command::Start);
    assert_eq!(refusal(result), Refusal::Run { state: RunState::Running, action: "start" });
    assert!(work.batch.transitions.is_empty(), "a refusal records nothing");
}

#[test]
fn dispatch_is_refused_for_a_node_already_running_and_for_no_such_node() {
    let (mut step, _) = started();
    let (result, _) = apply(&mut step, Command::Dispatch { node: A });
    assert!(matches!(refusal(result), Refusal::Node { state: NodeState::Running, .. }));
    let (result, _) = apply(&mut step, Command::Dispatch { node: 99 });
    assert_eq!(refusal(result), Refusal::NoSuchNode { index: 99 });
}

#[test]
fn a_command_for_a_run_not_held_is_run_not_found() {
    let mut step = new_step(1024);
    let result = step.apply("nope", Command::Cancel, "alice", &mut Work::default());
    assert!(matches!(result, Err(EngineError::RunNotFound(id)) if id == "nope"));
}

#[test]
fn success_dispatches_the_downstream_node_and_waits_for_the_manual_one() {
    let (mut step, _) = started();
    let (result, work) = apply(&mut step, succeeded(A, 1));
    result.expect("success applies");
    assert_eq!(node(&step, "r1", A), NodeState::Success);
    assert_eq!(node(&step, "r1", B), NodeState::Running);
    assert_eq!(node(&step, "r1", M), NodeState::ManualConfirm);
    let acts = actions(&work);
    assert!(acts.contains(&Action::Execute { node: B, attempt: 1, fallback: false }), "{acts:?}");
    assert!(acts.contains(&Action::AwaitConfirm { node: M }), "{acts:?}");
    let actor = |node: &str| {
        work.batch.transitions.iter().find(|t| t.node.as_deref() == Some(node)).map(|t| t.actor.clone())
    };
    assert_eq!(actor("a").as_deref(), Some("alice"), "the command's own change is the caller's");
    assert_eq!(actor("b").as_deref(), Some("engine"), "what follows from it is the engine's");
}

#[test]
fn a_result_for_another_attempt_is_refused_as_stale() {
    let (mut step, _) = started();
    let (result, _) = apply(&mut step, succeeded(A, 7));
    assert_eq!(refusal(result), Refusal::StaleAttempt { node: "a".into(), attempt: 7 });
    assert_eq!(node(&step, "r1", A), NodeState::Running, "the snapshot is unchanged");
}

#[test]
fn a_retryable_failure_schedules_a_retry_and_retry_due_starts_attempt_two() {
    let (mut step, _) = started();
    let failed = Command::AttemptFailed { node: A, attempt: 1, error: "boom".into(), retryable: true };
    let (result, work) = apply(&mut step, failed);
    result.expect("failure applies");
    assert_eq!(node(&step, "r1", A), NodeState::Retrying);
    assert!(matches!(actions(&work)[..], [Action::ScheduleRetry { node: A, .. }]), "{:?}", actions(&work));
    let (result, work) = apply(&mut step, Command::RetryDue { node: A });
    result.expect("retry applies");
    assert_eq!(node(&step, "r1", A), NodeState::Running);
    assert_eq!(step.runs["r1"].nodes[A].attempt, 2);
    assert!(actions(&work).contains(&Action::Execute { node: A, attempt: 2, fallback: false }));
}

#[test]
fn retry_due_is_refused_for_a_node_that_is_not_retrying() {
    let (mut step, _) = started();
    let (result, _) = apply(&mut step, Command::RetryDue { node: B });
    assert!(matches!(refusal(result), Refusal::Node { state: NodeState::Init, .. }));
}

/// `r1` with `a` done: `m` waits for a person.
fn confirming() -> Step {
    let (mut step, _) = started();
    apply(&mut step, succeeded(A, 1)).0.expect("success");
    step
}

#[test]
fn confirm_and_reject_end_the_manual_node_and_are_refused_twice() {
    let mut step = confirming();
    apply(&mut step, Command::Confirm { node: M }).0.expect("confirm");
    assert_eq!(node(&step, "r1", M), NodeState::Success);
    let (result, _) = apply(&mut step, Command::Reject { node: M });
    assert!(matches!(refusal(result), Refusal::Node { state: NodeState::Success, action: "reject", .. }));

    let mut step = confirming();
    apply(&mut step, Command::Reject { node: M }).0.expect("reject");
    assert_eq!(node(&step, "r1", M), NodeState::Failed);
    let (result, _) = apply(&mut step, Command::Confirm { node: M });
    assert!(matches!(refusal(result), Refusal::Node { state: NodeState::Failed, action: "confirm", .. }));
}

#[test]
fn fallback_runs_the_manual_nodes_executor_and_is_refused_for_a_node_without_one() {
    let mut step = confirming();
    let (result, work) = apply(&mut step, Command::Fallback { node: M });
    result.expect("fallback");
    assert_eq!(node(&step, "r1", M), NodeState::Running);
    assert!(actions(&work).contains(&Action::Execute { node: M, attempt: 1, fallback: true }));
    let (result, _) = apply(&mut step, Command::Fallback { node: B });
    assert_eq!(refusal(result), Refusal::NotManual { node: "b".into() });
}

#[test]
fn rerun_mark_success_and_skip_act_on_nodes_of_a_live_run() {
    let mut step = confirming();
    apply(&mut step, Command::Skip { node: M }).0.expect("skip");
    assert_eq!(node(&step, "r1", M), NodeState::Skipped);
    let failed = Command::AttemptFailed { node: B, attempt: 1, error: "boom".into(), retryable: false };
    apply(&mut step, failed).0.expect("b fails");
    assert_eq!(node(&step, "r1", B), NodeState::Failed);
    apply(&mut step, Command::Rerun { node: B, downstream: false }).0.expect("rerun");
    assert_eq!(node(&step, "r1", B), NodeState::Running, "the rerun node is dispatched in the same step");
    assert_eq!(step.runs["r1"].nodes[B].attempt, 2);
    let failed = Command::AttemptFailed { node: B, attempt: 2, error: "again".into(), retryable: false };
    apply(&mut step, failed).0.expect("b fails again");
    apply(&mut step, Command::MarkSuccess { node: B }).0.expect("mark-success");
    assert_eq!(node(&step, "r1", B), NodeState::Success);
    let (result, _) = apply(&mut step, Command::Skip { node: B });
    assert!(matches!(refusal(result), Refusal::Node { state: NodeState::Success, action: "skip", .. }));
}

#[test]
fn cancel_aborts_the_attempt_in_flight_finishes_the_run_and_is_refused_twice() {
    let (mut step, _) = started();
    let (result, work) = apply(&mut step, Command::Cancel);
    result.expect("cancel");
    assert_eq!(step.runs["r1"].state, RunState::Cancelled);
    let acts = actions(&work);
    assert!(acts.contains(&Action::Abort { node: A, attempt: 1 }), "{acts:?}");
    assert!(acts.contains(&Action::RunFinished { state: RunState::Cancelled }), "{acts:?}");
    let (result, _) = apply(&mut step, Command::Cancel);
    assert_eq!(refusal(result), Refusal::Run { state: RunState::Cancelled, action: "cancel" });
    let (result, _) = apply(&mut step, Command::Rerun { node: A, downstream: true });
    assert_eq!(refusal(result), Refusal::Run { state: RunState::Cancelled, action: "rerun" });
}

#[test]
fn after_expired_fails_a_queued_run_and_is_refused_for_a_running_one() {
    let mut step = waiting(FLOW, &["r1"]);
    let (result, work) = apply(&mut step, Command::AfterExpired);
    result.expect("after expired");
    assert_eq!(step.runs["r1"].state, RunState::Failed);
    assert!(actions(&work).contains(&Action::RunFinished { state: RunState::Failed }));
    let (mut step, _) = started();
    let (result, _) = apply(&mut step, Command::AfterExpired);
    assert_eq!(refusal(result), Refusal::Run { state: RunState::Running, action: "fail on after_policy" });
}

#[test]
fn recover_starts_the_attempt_in_flight_again_and_leaves_a_queued_run_alone() {
    let (mut step, _) = started();
    let (result, work) = apply(&mut step, Command::Recover);
    result.expect("recover");
    assert!(
        actions(&work).iter().any(|a| matches!(a, Action::Execute { node: A, .. })),
        "{:?}",
        actions(&work)
    );
    let mut step = waiting(FLOW, &["r1"]);
    let (result, work) = apply(&mut step, Command::Recover);
    result.expect("recover of a queued run");
    assert_eq!(step.runs["r1"].state, RunState::Queued);
    assert!(work.actions.is_empty() && work.batch.transitions.is_empty());
}

#[test]
fn a_full_throttle_queues_the_ready_node_and_the_freed_permit_dispatches_it() {
    let source = "flow: f\nnodes:\n  a: {run: {builtin: noop}, throttle: {max_permits: 1, queue_size: 10}}\n";
    let mut step = holding(source, &["r1", "r2"]);
    let mut work = Work::default();
    step.apply("r1", Command::Start, "engine", &mut work).expect("start r1");
    step.apply("r2", Command::Start, "engine", &mut work).expect("start r2");
    assert_eq!(node(&step, "r1", A), NodeState::Running);
    assert_eq!(node(&step, "r2", A), NodeState::Init, "no permit left: it waits in the queue");
    assert_eq!(step.throttle.in_use("f", A), 1);
    let mut work = Work::default();
    step.apply("r1", succeeded(A, 1), "engine", &mut work).expect("r1 ends");
    assert_eq!(node(&step, "r2", A), NodeState::Running, "the permit went straight to the waiter");
    assert_eq!(step.throttle.in_use("f", A), 1);
    assert!(work.actions.iter().any(|(run, a)| run == "r2" && matches!(a, Action::Execute { .. })));
}

#[test]
fn a_draining_step_leaves_ready_nodes_in_init() {
    let mut step = holding(FLOW, &["r1"]);
    step.draining = true;
    let (result, work) = apply(&mut step, Command::Start);
    result.expect("start");
    assert_eq!(node(&step, "r1", A), NodeState::Init);
    assert!(work.actions.is_empty(), "{:?}", actions(&work));
}

#[test]
fn an_attempts_end_is_recorded_with_its_log_and_too_large_outputs_fail_it() {
    let (mut step, _) = started();
    step.max_output_bytes = 16;
    let mut outputs = Map::new();
    outputs.insert("big".into(), json!("x".repeat(64)));
    let log = format!("{}\0end", "y".repeat(70 * 1024));
    let result = AttemptResult::Success { outputs, log };
    let mut work = Work::default();
    step.attempt_done("r1", A, 1, result, Some("replica-1".into()), &mut work);
    assert_eq!(node(&step, "r1", A), NodeState::Failed, "outputs over the limit fail the attempt");
    let finished = &work.finished[0];
    assert_eq!((finished.outcome, finished.attempt), ("FAILED", 1));
    assert!(
        finished.error.as_deref().is_some_and(|e| e.contains("more than the 16 allowed")),
        "{:?}",
        finished.error
    );
    let kept = &work.batch.logs[0].content;
    assert!(kept.ends_with("\u{FFFD}end"), "the log's tail is kept, NUL shown as U+FFFD");
    assert_eq!(kept.chars().count(), 64 * 1024, "64 KiB of the log are kept");
}

#[test]
fn only_an_admitted_run_starts_a_queued_one_is_refused() {
    let mut step = waiting(FLOW, &["r1"]);
    let (result, work) = apply(&mut step, Command::Start);
    assert_eq!(refusal(result), Refusal::Run { state: RunState::Queued, action: "start" });
    assert!(work.batch.transitions.is_empty(), "a refused start writes nothing");
    let (mut step, work) = started();
    assert_eq!(step.runs["r1"].state, RunState::Running, "ADMITTED -> RUNNING");
    assert!(!work.batch.transitions.is_empty());
    let (result, _) = apply(&mut step, Command::Start);
    assert_eq!(refusal(result), Refusal::Run { state: RunState::Running, action: "start" });
}

#[test]
fn time_and_jitter_come_only_from_the_clock() {
    let source =
        "flow: f\nnodes:\n  a: {run: {builtin: noop}, retry: {attempts: 2, backoff: 1s, jitter: 2s}}\n";
    let flow = Arc::new(madeira_core::spec::parse_flow("f.yaml", source).expect("test flow parses"));
    let clock = FixedClock::new(0.25);
    let mut step = with_clock(1024, clock.clone());
    step.runs.insert("r1".into(), RunSnapshot::new("r1".into(), flow, json!({})));
    let mut work = Work::default();
    step.apply("r1", Command::Start, "engine", &mut work).expect("start");
    assert!(work.batch.transitions.iter().all(|t| t.at == T0), "every edge is stamped with the clock's time");
    assert_eq!(work.batch.attempts[0].started_at, T0);
    assert_eq!(work.ready_at[&("r1".to_string(), 0)], clock.at, "ready at the clock's instant");

    clock.advance(300);
    let mut work = Work::default();
    let failure = AttemptResult::Failure { error: "boom".into(), retryable: true, log: String::new() };
    step.attempt_done("r1", 0, 1, failure, None, &mut work);
    let finished = &work.finished[0];
    assert_eq!((finished.started_at_ms, finished.finished_at_ms), (T0, T0 + 300));
    assert_eq!(finished.duration, Duration::from_millis(300));
    // backoff 1 s + jitter 2 s x the clock's draw 0.25, from the clock's now.
    assert_eq!(actions(&work), [Action::ScheduleRetry { node: 0, at_ms: T0 + 300 + 1_000 + 500 }]);
}
