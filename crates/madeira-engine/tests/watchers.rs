//! The deadline and `max_duration` watchers on a clock the test sets: each look
//! (`look`, what a tick does) happens at a wall time the test chooses, over a real
//! engine and a durable SQLite store, so a deadline days away or a run overrunning
//! by hours is checked in milliseconds and exactly at its edges.

mod common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{Days, NaiveDate, NaiveTime, Utc};
use madeira_core::NodeState;
use madeira_engine::{
    BusinessAlert, DeadlineWatcher, DurationWatcher, EngineHandle, EngineObserver, Executors, TriggerRequest,
    WallClock,
};
use madeira_store::Store;
use tokio_util::sync::CancellationToken;

/// An alert as raised: alertname, key, node, summary.
type Raised = (String, String, Option<String>, String);

/// What the watchers told the observers.
#[derive(Default)]
struct Recorder {
    alerts: Mutex<Vec<Raised>>,
    next: Mutex<Vec<(String, Option<f64>)>>,
}

impl EngineObserver for Recorder {
    fn business_alert(&self, alert: &BusinessAlert<'_>) {
        let seen =
            (alert.alertname.into(), alert.key.into(), alert.node.map(str::to_string), alert.summary.into());
        self.alerts.lock().expect("alerts").push(seen);
    }

    fn next_deadline(&self, flow: &str, at_unix_seconds: Option<f64>) {
        self.next.lock().expect("next").push((flow.into(), at_unix_seconds));
    }
}

impl Recorder {
    fn named(&self, alertname: &str) -> Vec<(String, Option<String>, String)> {
        let alerts = self.alerts.lock().expect("alerts");
        alerts.iter().filter(|a| a.0 == alertname).map(|a| (a.1.clone(), a.2.clone(), a.3.clone())).collect()
    }

    /// The alerts raised under `key`: (node, summary).
    fn keyed(&self, key: &str) -> Vec<(Option<String>, String)> {
        let alerts = self.alerts.lock().expect("alerts");
        alerts.iter().filter(|a| a.1 == key).map(|a| (a.2.clone(), a.3.clone())).collect()
    }
}

/// A wall clock the test moves.
fn wall_at(ms: i64) -> (Arc<AtomicI64>, WallClock) {
    let at = Arc::new(AtomicI64::new(ms));
    let read = at.clone();
    (at, Arc::new(move || read.load(Ordering::SeqCst)))
}

struct Bench {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    handle: EngineHandle,
    recorder: Arc<Recorder>,
    cancel: CancellationToken,
}

impl Bench {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = common::sqlite_store(&dir).await;
        let recorder = Arc::new(Recorder::default());
        let observers: Vec<Arc<dyn EngineObserver>> = vec![recorder.clone()];
        let (engine, handle) = madeira_engine::build(
            store.clone(),
            Executors::new(Default::default()),
            observers,
            Default::default(),
        );
        let cancel = CancellationToken::new();
        tokio::spawn(engine.run(cancel.clone()));
        Self { _dir: dir, store, handle, recorder, cancel }
    }

    fn observers(&self) -> Vec<Arc<dyn EngineObserver>> {
        vec![self.recorder.clone()]
    }

    async fn apply(&self, source: &str) {
        self.handle.apply_flow("flow.yaml", source).await.expect("flow applies");
    }

    async fn trigger(&self, flow: &str, biz_date: Option<NaiveDate>) -> String {
        let req = TriggerRequest { biz_date, ..common::manual(flow) };
        self.handle.trigger(req).await.expect("trigger").run_id
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The instant `date` at `hh:mm` UTC, in ms.
fn at(date: NaiveDate, hh: u32, mm: u32) -> i64 {
    date.and_time(NaiveTime::from_hms_opt(hh, mm, 0).expect("time")).and_utc().timestamp_millis()
}

#[tokio::test]
async fn a_deadline_is_missed_once_at_its_instant_naming_the_manual_node_and_never_for_a_success() {
    let bench = Bench::start().await;
    let manual = "nodes:\n  prep: {run: {builtin: noop}}\n  \
                  approve: {needs: [prep], manual: {prompt: 'sign the file'}}\n";
    let deadline = "timezone: UTC\ndeadline: {by: \"06:00\", days: 0}\n";
    bench.apply(&format!("flow: sign-off\n{deadline}{manual}")).await;
    bench.apply(&format!("flow: done-early\n{deadline}nodes:\n  only: {{run: {{builtin: noop}}}}\n")).await;
    // Two days ahead: the flows were applied before that date's deadline.
    let date = Utc::now().date_naive().checked_add_days(Days::new(2)).expect("date");
    let held = bench.trigger("sign-off", Some(date)).await;
    let done = bench.trigger("done-early", Some(date)).await;
    common::wait_node(bench.store.as_ref(), &held, 1, NodeState::ManualConfirm, "approve waits").await;
    assert_eq!(common::wait_finished(bench.store.as_ref(), &done).await, madeira_core::RunState::Success);

    // (The days between today and `date` have deadlines of their own, with no run:
    // their misses are keyed by their dates and not looked at here.)
    let (key, other) = (format!("deadline:sign-off:{date}"), format!("deadline:done-early:{date}"));
    let (wall, clock) = wall_at(at(date, 5, 59));
    let watcher = DeadlineWatcher::new(bench.handle.clone(), bench.observers()).with_wall_clock(clock);
    watcher.look().await;
    assert!(bench.recorder.keyed(&key).is_empty(), "a minute before: no miss");
    let next: Vec<_> = bench.recorder.next.lock().expect("next").clone();
    let due = (at(date, 6, 0) / 1000) as f64;
    assert!(next.contains(&("sign-off".into(), Some(due))), "the next deadline is reported: {next:?}");

    wall.store(at(date, 6, 0) + 1, Ordering::SeqCst);
    for _ in 0..3 {
        watcher.look().await;
    }
    let missed = bench.recorder.keyed(&key);
    assert_eq!(missed.len(), 1, "one miss over three looks: {missed:?}");
    assert!(bench.recorder.keyed(&other).is_empty(), "none for the flow whose run is SUCCESS");
    let (_, summary) = &missed[0];
    for needle in ["sign-off", "manual node approve", "sign the file"] {
        assert!(summary.contains(needle), "the miss does not name `{needle}`: {summary}");
    }

    // A second watcher (a restart, another replica) finds the miss recorded.
    let (_, clock) = wall_at(at(date, 6, 30));
    let again = DeadlineWatcher::new(bench.handle.clone(), bench.observers()).with_wall_clock(clock);
    again.look().await;
    assert_eq!(bench.recorder.keyed(&key).len(), 1, "recorded in the store: not raised again");
}

#[tokio::test]
async fn a_deadline_that_passed_before_the_flow_was_applied_is_not_looked_at() {
    let bench = Bench::start().await;
    bench.apply("flow: late-comer\ntimezone: UTC\ndeadline: {by: \"06:00\", days: 0}\nnodes:\n  a: {run: {builtin: noop}}\n").await;
    // Yesterday's deadline passed before the flow existed; the wall is just past it.
    let yesterday = Utc::now().date_naive().checked_sub_days(Days::new(1)).expect("date");
    let (_, clock) = wall_at(at(yesterday, 6, 0) + 1);
    let watcher = DeadlineWatcher::new(bench.handle.clone(), bench.observers()).with_wall_clock(clock);
    watcher.look().await;
    assert!(bench.recorder.named("MadeiraDeadlineMissed").is_empty(), "{:?}", bench.recorder.named(""));
}

#[tokio::test]
async fn max_duration_warns_once_for_the_node_then_once_for_the_run_at_their_edges() {
    let bench = Bench::start().await;
    bench
        .apply(
            "flow: long\nmax_duration: 2h\nnodes:\n  prep: {run: {builtin: noop}}\n  \
             approve: {needs: [prep], manual: {prompt: 'ok?'}, max_duration: 30m}\n",
        )
        .await;
    let run = bench.trigger("long", None).await;
    common::wait_node(bench.store.as_ref(), &run, 1, NodeState::ManualConfirm, "approve waits").await;
    let stored = bench.store.load_run(&run).await.expect("load").expect("run");
    let started = stored.run.started_at.expect("the run started");
    let node_started = stored.nodes[1].started_at.expect("the manual wait started");

    let (wall, clock) = wall_at(node_started + 30 * 60_000 - 1);
    let watcher = DurationWatcher::new(bench.handle.clone(), bench.observers()).with_wall_clock(clock);
    watcher.look().await;
    assert!(bench.recorder.named("MadeiraMaxDuration").is_empty(), "a millisecond before 30m: nothing");

    wall.store(node_started + 30 * 60_000 + 1, Ordering::SeqCst);
    watcher.look().await;
    watcher.look().await;
    let warned = bench.recorder.named("MadeiraMaxDuration");
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0].1.as_deref(), Some("approve"), "the node's warning names it: {warned:?}");

    wall.store(started + 2 * 3_600_000 + 1, Ordering::SeqCst);
    watcher.look().await;
    watcher.look().await;
    let warned = bench.recorder.named("MadeiraMaxDuration");
    assert_eq!(warned.len(), 2, "then one for the run: {warned:?}");
    assert_eq!(warned[1].1, None, "the run's warning is the run's: {warned:?}");
    assert!(warned[1].2.contains("approve"), "it names the run's waiting node: {warned:?}");
    let state = bench.store.load_run(&run).await.expect("load").expect("run").run.state;
    assert_eq!(state, madeira_core::RunState::Running, "a warning, never a kill");
}
