//! The cron scheduler: a heap of next fire instants (tick + stable jitter), one
//! entry per cron trigger of every unpaused flow. It sleeps until the earliest,
//! fires it as a run with idempotency key `cron:<flow>:<tick>` (so a tick never
//! makes two runs, even across a crash), and reloads a flow when it is applied,
//! paused, resumed or deleted — here at once, on another replica of the same store within
//! `SYNC_EVERY` (every replica schedules every flow; the key makes one run per
//! tick, so a dead replica costs no tick). Ticks missed while down or paused
//! follow the misfire policy, and so do ticks a forward jump of the wall clock
//! skipped over (seen against the monotonic clock at each wake-up; logged and
//! counted, `EngineObserver::cron_clock_jump`): `skip` fires none of them,
//! `run_once` the latest, `run_all` those within `catchup_window`, as catch-up
//! runs. After a jump back, every trigger is rescheduled from the new time (a
//! tick that fires again makes no second run: its key). A trigger with a
//! `calendar:` is planned on it (`madeira_core::schedule::plan_after`): a day off
//! is skipped (audited `cron_tick_skipped`, once per day) or the tick moved to the
//! next/previous business day; a day the calendar has no data for makes no run and
//! an alert (`cron_run_not_created`), never a guessed run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use madeira_core::TriggerDef;
use madeira_core::keys::RunKey;
use madeira_core::model::CronTriggerDef;
use madeira_core::schedule::{Planned, jitter_offset, missed_ticks, next_fire, on_calendar, plan_after};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::{EngineError, EngineHandle, EngineObserver, TriggerRequest};

/// How often the flow list is compared with the store, for flows applied, paused
/// or resumed through another replica.
const SYNC_EVERY: Duration = Duration::from_secs(2);

/// A difference between the wall and monotonic clocks' progress since the last
/// look larger than this is a jump of the wall clock (NTP slews far less; a step
/// correction, a manual `date -s` or a resumed VM does more).
const JUMP_TOLERANCE_MS: i64 = 2_000;

/// Wall-clock time in ms since the Unix epoch: the system's, unless a test injects
/// another (`Scheduler::with_wall_clock`).
pub type WallClock = Arc<dyn Fn() -> i64 + Send + Sync>;

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    fire_at_ms: i64,
    /// The run's scheduled instant (a tick moved by its calendar: where it moved).
    tick_ms: i64,
    flow: String,
    trigger: usize,
    generation: u64,
    /// The instant the trigger's next tick is planned after.
    resume_ms: i64,
    what: What,
}

/// What an entry does when due (`Planned` of `madeira_core::schedule`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum What {
    Fire,
    /// A day that is not a business day of the trigger's calendar: recorded, no run.
    Skipped {
        day: String,
        calendar: String,
    },
    /// The calendar cannot answer for the day: alerted, no run.
    Blocked {
        error: String,
    },
}

pub struct Scheduler {
    engine: EngineHandle,
    observers: Vec<Arc<dyn EngineObserver>>,
    heap: BinaryHeap<Reverse<Entry>>,
    /// Current generation per flow: entries of older generations are stale.
    generations: HashMap<String, u64>,
    triggers: HashMap<String, Vec<CronTriggerDef>>,
    /// The (version, paused) each flow was last loaded at.
    loaded: HashMap<String, (u32, bool)>,
    next_generation: u64,
    wall: WallClock,
    /// The wall and monotonic clocks at the last look (`watch_clock`).
    last_look: Option<(i64, tokio::time::Instant)>,
}

impl Scheduler {
    pub fn new(engine: EngineHandle, observers: Vec<Arc<dyn EngineObserver>>) -> Self {
        Self {
            engine,
            observers,
            heap: BinaryHeap::new(),
            generations: HashMap::new(),
            triggers: HashMap::new(),
            loaded: HashMap::new(),
            next_generation: 1,
            wall: Arc::new(crate::now_ms),
            last_look: None,
        }
    }

    /// The same scheduler reading the wall clock from `wall` (tests move it).
    pub fn with_wall_clock(mut self, wall: WallClock) -> Self {
        self.wall = wall;
        self
    }

    fn now_ms(&self) -> i64 {
        (self.wall)()
    }

    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.now_ms()).unwrap_or_else(Utc::now)
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let mut changes = self.engine.subscribe_flow_changes();
        self.sync().await;
        info!(flows = self.loaded.len(), entries = self.heap.len(), "cron schedule loaded");
        let mut sync = tokio::time::interval(SYNC_EVERY);
        sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.watch_clock();
            let sleep = match self.heap.peek() {
                Some(Reverse(e)) => Duration::from_millis((e.fire_at_ms - self.now_ms()).max(0) as u64),
                None => Duration::from_secs(3600),
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                change = changes.recv() => match change {
                    Ok(flow) => self.reload(&flow).await,
                    Err(RecvError::Lagged(_)) => self.sync().await,
                    Err(RecvError::Closed) => return,
                },
                _ = sync.tick() => self.sync().await,
                _ = tokio::time::sleep(sleep) => self.fire_due(),
            }
        }
    }

    /// Reloads every flow whose version or pause state differs from what was loaded.
    async fn sync(&mut self) {
        let flows = match self.engine.store().list_flows().await {
            Ok(flows) => flows,
            Err(e) => {
                error!(error = %e, "scheduler: cannot list flows");
                return;
            }
        };
        let listed: std::collections::HashSet<&str> = flows.iter().map(|r| r.name.as_str()).collect();
        let gone: Vec<String> =
            self.loaded.keys().filter(|n| !listed.contains(n.as_str())).cloned().collect();
        for flow in gone {
            info!(flow = %flow, "flow deleted; unscheduling");
            self.loaded.remove(&flow);
            self.reload(&flow).await;
        }
        for record in flows {
            let seen = (record.latest_version, record.paused);
            match self.loaded.get(&record.name) {
                Some(loaded) if *loaded == seen => {}
                Some(_) => {
                    info!(flow = %record.name, version = seen.0, paused = seen.1, "flow changed; rescheduling");
                    self.reload(&record.name).await;
                }
                None => self.reload(&record.name).await,
            }
        }
    }

    /// Re-reads one flow: drops its entries, fires ticks missed by its misfire
    /// policy, and schedules its next ticks.
    async fn reload(&mut self, flow: &str) {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.generations.insert(flow.to_string(), generation);
        let triggers = match self.cron_triggers(flow).await {
            Ok(t) => t,
            Err(e) => {
                error!(flow = %flow, error = %e, "scheduler: cannot load flow; trying again at the next sync");
                self.loaded.remove(flow);
                return;
            }
        };
        if triggers.is_empty() {
            self.triggers.remove(flow);
            self.observers.iter().for_each(|o| o.next_run(flow, None));
            return;
        }
        let now = self.now();
        let last = match self.engine.store().last_cron_key(flow).await {
            Ok(key) => key.as_deref().map(RunKey::parse).and_then(|k| k.cron_tick()),
            Err(e) => {
                warn!(flow = %flow, error = %e, "scheduler: cannot read the last tick; not catching up");
                None
            }
        };
        for (i, trigger) in triggers.iter().enumerate() {
            for tick in self.on_calendar(flow, trigger, missed_ticks(trigger, last, now), now) {
                info!(flow = %flow, tick = %tick, "firing missed tick (misfire policy)");
                self.fire(flow, tick, tick.timestamp_millis(), true);
            }
            self.schedule_after(flow, i, trigger, now, generation);
        }
        self.triggers.insert(flow.to_string(), triggers);
        self.report_next(flow);
    }

    async fn cron_triggers(&mut self, flow: &str) -> Result<Vec<CronTriggerDef>, EngineError> {
        let Some(record) = self.engine.store().get_flow(flow).await? else { return Ok(Vec::new()) };
        self.loaded.insert(flow.to_string(), (record.latest_version, record.paused));
        if record.paused {
            return Ok(Vec::new());
        }
        let def = self.engine.flow(flow, Some(record.latest_version)).await?;
        if def.observe {
            return Ok(Vec::new());
        }
        Ok(def
            .triggers
            .iter()
            .filter_map(|t| match t {
                TriggerDef::Cron(c) => Some(c.clone()),
                TriggerDef::Event { .. } | TriggerDef::Message(_) | TriggerDef::FlowSucceeded { .. } => None,
            })
            .collect())
    }

    /// Missed `ticks` on the trigger's calendar (moved, or dropped on days off);
    /// ticks on days the calendar cannot answer for are alerted, not fired.
    fn on_calendar(
        &self,
        flow: &str,
        trigger: &CronTriggerDef,
        ticks: Vec<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Vec<DateTime<Utc>> {
        let calendars = self.engine.calendars();
        let (fire, blocked) = on_calendar(trigger, &calendars, ticks, now);
        for (tick, error) in blocked {
            self.blocked(flow, tick.timestamp_millis(), error);
        }
        fire
    }

    /// Plans the trigger's next tick after `after` on its calendar and queues it.
    fn schedule_after(
        &mut self,
        flow: &str,
        index: usize,
        trigger: &CronTriggerDef,
        after: DateTime<Utc>,
        generation: u64,
    ) {
        let calendars = self.engine.calendars();
        let Some(planned) = plan_after(trigger, &calendars, after) else { return };
        let (due, resume_ms) = (planned.due(), planned.resume().timestamp_millis());
        let (fire_at_ms, what) = match planned {
            Planned::Fire { .. } => {
                let offset = jitter_offset(flow, index, due, trigger.jitter);
                (due.timestamp_millis() + offset.as_millis() as i64, What::Fire)
            }
            Planned::Skipped { day, calendar, .. } => {
                (due.timestamp_millis(), What::Skipped { day: day.to_string(), calendar })
            }
            Planned::Blocked { error, .. } => (due.timestamp_millis(), What::Blocked { error }),
        };
        let entry = Entry {
            fire_at_ms,
            tick_ms: due.timestamp_millis(),
            flow: flow.to_string(),
            trigger: index,
            generation,
            resume_ms,
            what,
        };
        self.heap.push(Reverse(entry));
    }

    /// Acts on a due entry: fires its run, or records the day it skips or the
    /// calendar error that blocks it.
    fn act(&self, entry: &Entry, tick: DateTime<Utc>) {
        match &entry.what {
            What::Fire => self.fire(&entry.flow, tick, entry.fire_at_ms, false),
            What::Skipped { day, calendar } => {
                info!(flow = %entry.flow, day = %day, calendar = %calendar, "cron tick skipped: not a business day");
                self.observers.iter().for_each(|o| o.cron_calendar_skipped(&entry.flow, calendar));
                let store = self.engine.store().clone();
                let skip = crate::fallbacks::CalendarSkip {
                    flow: entry.flow.clone(),
                    scheduled_at_ms: entry.tick_ms,
                    day: day.clone(),
                    calendar: calendar.clone(),
                };
                tokio::spawn(async move { crate::fallbacks::calendar_skipped(store.as_ref(), skip).await });
            }
            What::Blocked { error } => self.blocked(&entry.flow, entry.tick_ms, error.clone()),
        }
    }

    /// A tick the calendar cannot answer for: no run; audited and alerted as a
    /// cron tick that made no run.
    fn blocked(&self, flow: &str, tick_ms: i64, error: String) {
        warn!(flow = %flow, error = %error, "cron tick not fired: the calendar has no answer for its day");
        let (store, observers, flow) =
            (self.engine.store().clone(), self.observers.clone(), flow.to_string());
        tokio::spawn(async move {
            crate::fallbacks::cron_not_created(store.as_ref(), &observers, &flow, tick_ms, &error).await
        });
    }

    fn fire_due(&mut self) {
        // A jump while asleep is handled first, so its ticks are not fired here.
        self.watch_clock();
        self.fire_due_until(self.now_ms());
    }

    /// Fires every entry due at `now_ms`, each scheduling its trigger's next tick.
    fn fire_due_until(&mut self, now_ms: i64) {
        let mut touched = Vec::new();
        while let Some(entry) = self.pop_due(now_ms) {
            let Some(trigger) = self.live_trigger(&entry) else { continue };
            let (Some(tick), Some(resume)) = (
                DateTime::from_timestamp_millis(entry.tick_ms),
                DateTime::from_timestamp_millis(entry.resume_ms),
            ) else {
                continue;
            };
            self.act(&entry, tick);
            self.schedule_after(&entry.flow, entry.trigger, &trigger, resume, entry.generation);
            touched.push(entry.flow);
        }
        self.report_touched(touched);
    }

    /// Starts the run for `tick` without waiting for it (the engine batches run
    /// creation); the key makes a repeated fire return the same run. Catch-up runs
    /// (misfire policy) are marked with trigger `cron_catchup`.
    fn fire(&self, flow: &str, tick: DateTime<Utc>, due_ms: i64, catchup: bool) {
        let lateness = Duration::from_millis((self.now_ms() - due_ms).max(0) as u64);
        self.observers.iter().for_each(|o| o.cron_fired(flow, lateness));
        let engine = self.engine.clone();
        let observers = self.observers.clone();
        let request = TriggerRequest {
            flow: flow.to_string(),
            params: serde_json::json!({"scheduled_at": tick.to_rfc3339()}),
            idempotency_key: Some(RunKey::Cron { flow: flow.to_string(), tick }.into()),
            trigger: if catchup { "cron_catchup" } else { "cron" }.into(),
            actor: "scheduler".into(),
            version: None,
            biz_date: None,
            at_ms: Some(tick.timestamp_millis()),
        };
        let (flow_name, tick_ms) = (flow.to_string(), tick.timestamp_millis());
        tokio::spawn(async move {
            match engine.trigger(request).await {
                Ok(outcome) => debug!(run_id = %outcome.run_id, created = outcome.created, "cron run"),
                Err(EngineError::OverlapSkipped { flow, active }) => {
                    info!(flow = %flow, active, "cron tick skipped: on_overlap is skip")
                }
                Err(EngineError::ShuttingDown) => debug!(flow = %flow_name, "cron tick at shutdown: no run"),
                // Paused after this replica last read the flow list.
                Err(EngineError::Paused(_)) => info!(flow = %flow_name, "cron tick of a paused flow: no run"),
                // Deleted (here or on another replica, before this replica's next sync).
                Err(EngineError::FlowNotFound(_)) => {
                    info!(flow = %flow_name, "cron tick of a deleted flow: no run")
                }
                Err(e) => {
                    let reason = e.to_string();
                    let store = engine.store().as_ref();
                    crate::fallbacks::cron_not_created(store, &observers, &flow_name, tick_ms, &reason).await
                }
            }
        });
    }

    /// Compares the wall clock's progress since the last look with the monotonic
    /// clock's. A forward jump: entries due before it fire as usual, and the ticks
    /// it skipped over follow their misfire policy, as after downtime.
    fn watch_clock(&mut self) {
        let (wall, mono) = (self.now_ms(), tokio::time::Instant::now());
        let Some((last_wall, last_mono)) = self.last_look.replace((wall, mono)) else { return };
        let elapsed = i64::try_from(mono.duration_since(last_mono).as_millis()).unwrap_or(i64::MAX);
        let jump = wall.saturating_sub(last_wall).saturating_sub(elapsed);
        if jump.abs() <= JUMP_TOLERANCE_MS {
            return;
        }
        self.observers.iter().for_each(|o| o.cron_clock_jump(jump));
        if jump < 0 {
            warn!(
                back_seconds = -jump / 1000,
                "wall clock jumped back; cron triggers are rescheduled from the new time (a tick fired already makes no second run)"
            );
            self.reschedule_from(wall);
            return;
        }
        warn!(
            forward_seconds = jump / 1000,
            "wall clock jumped forward; the cron ticks it skipped over follow their misfire policy"
        );
        self.fire_due_until(wall - jump);
        self.catch_up_jump(wall);
    }

    /// Schedules every trigger's next tick after `now_ms` again (after a jump back,
    /// its entry could lie as far in the future as the clock went back).
    fn reschedule_from(&mut self, now_ms: i64) {
        let Some(now) = DateTime::from_timestamp_millis(now_ms) else { return };
        let entries = std::mem::take(&mut self.heap).into_vec();
        let mut touched = Vec::new();
        for Reverse(entry) in entries {
            if let Some(trigger) = self.live_trigger(&entry) {
                self.schedule_after(&entry.flow, entry.trigger, &trigger, now, entry.generation);
                touched.push(entry.flow);
            }
        }
        self.report_touched(touched);
    }

    /// Every entry due at `now_ms` was skipped over by a jump of the clock: its
    /// trigger's ticks from the entry's to `now_ms` fire by misfire policy, as
    /// catch-up runs, and its next tick after `now_ms` is scheduled.
    fn catch_up_jump(&mut self, now_ms: i64) {
        let Some(now) = DateTime::from_timestamp_millis(now_ms) else { return };
        let mut touched = Vec::new();
        while let Some(entry) = self.pop_due(now_ms) {
            let Some(trigger) = self.live_trigger(&entry) else { continue };
            let Some(before) = DateTime::from_timestamp_millis(entry.tick_ms - 1) else { continue };
            let ticks =
                self.on_calendar(&entry.flow, &trigger, missed_ticks(&trigger, Some(before), now), now);
            info!(flow = %entry.flow, policy = ?trigger.misfire, fired = ticks.len(), "cron ticks skipped over by a clock jump");
            for tick in ticks {
                self.fire(&entry.flow, tick, tick.timestamp_millis(), true);
            }
            self.schedule_after(&entry.flow, entry.trigger, &trigger, now, entry.generation);
            touched.push(entry.flow);
        }
        self.report_touched(touched);
    }

    /// The earliest entry, taken off the heap when it is due at `now_ms`.
    fn pop_due(&mut self, now_ms: i64) -> Option<Entry> {
        let due = self.heap.peek().is_some_and(|Reverse(e)| e.fire_at_ms <= now_ms);
        due.then(|| self.heap.pop()).flatten().map(|Reverse(e)| e)
    }

    /// The entry's trigger while the flow's schedule is the one it was made for.
    fn live_trigger(&self, entry: &Entry) -> Option<CronTriggerDef> {
        if self.generations.get(&entry.flow) != Some(&entry.generation) {
            return None;
        }
        self.triggers.get(&entry.flow).and_then(|t| t.get(entry.trigger)).cloned()
    }

    /// Reports the next run of each flow whose schedule changed (once per flow).
    fn report_touched(&self, mut touched: Vec<String>) {
        touched.sort();
        touched.dedup();
        for flow in touched {
            self.report_next(&flow);
        }
    }

    fn report_next(&self, flow: &str) {
        let now = self.now();
        let calendars = self.engine.calendars();
        let next = self.triggers.get(flow).into_iter().flatten().enumerate().filter_map(|(i, t)| {
            let tick = next_fire(t, &calendars, now)?;
            Some(tick.timestamp_millis() + jitter_offset(flow, i, tick, t.jitter).as_millis() as i64)
        });
        let at = next.min().map(|ms| ms as f64 / 1000.0);
        self.observers.iter().for_each(|o| o.next_run(flow, at));
    }
}
