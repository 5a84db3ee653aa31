//! A backfill as it runs: its states and the one table of their changes
//! (`running`, `paused`, `cancelled`, `done`), how its existing runs are treated
//! (`Rerun`), and which of its steps start next (`advance`). Pure: the store
//! gathers the facts under the backfill's lock, calls `advance`, and writes what
//! it decides; the engine then creates the claimed runs (idempotency key
//! `crate::keys::RunKey::Backfill`, so a step is never created twice).

use std::fmt;
use std::str::FromStr;

/// The state of a backfill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackfillState {
    /// Its next runs are created as its runs finish.
    Running,
    /// No new run is created; runs already made go on.
    Paused,
    /// Its not-finished runs were cancelled and no run is created any more.
    Cancelled,
    /// Every step has a run that finished, or was skipped or blocked.
    Done,
}

/// What changes a backfill's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackfillAction {
    Pause,
    Resume,
    Cancel,
    /// Nothing is left to run (`Advance::finish`).
    Finish,
}

use BackfillAction as A;
use BackfillState as S;

/// The backfill state table: `(from, action) -> to`. The only place that says
/// which backfill state changes exist.
const BACKFILL_TABLE: &[(BackfillState, BackfillAction, BackfillState)] = &[
    (S::Running, A::Pause, S::Paused),
    (S::Paused, A::Resume, S::Running),
    (S::Running, A::Cancel, S::Cancelled),
    (S::Paused, A::Cancel, S::Cancelled),
    (S::Running, A::Finish, S::Done),
];

/// A change the table does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {action} a backfill that is {from}")]
pub struct BackfillRefusal {
    pub from: BackfillState,
    pub action: BackfillAction,
}

impl BackfillState {
    pub const ALL: [BackfillState; 4] = [S::Running, S::Paused, S::Cancelled, S::Done];

    pub fn apply(self, action: BackfillAction) -> Result<BackfillState, BackfillRefusal> {
        BACKFILL_TABLE
            .iter()
            .find(|(from, a, _)| *from == self && *a == action)
            .map(|(_, _, to)| *to)
            .ok_or(BackfillRefusal { from: self, action })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            S::Running => "running",
            S::Paused => "paused",
            S::Cancelled => "cancelled",
            S::Done => "done",
        }
    }
}

impl BackfillAction {
    pub const ALL: [BackfillAction; 4] = [A::Pause, A::Resume, A::Cancel, A::Finish];

    pub fn as_str(self) -> &'static str {
        match self {
            A::Pause => "pause",
            A::Resume => "resume",
            A::Cancel => "cancel",
            A::Finish => "finish",
        }
    }
}

/// Whether a date that already has a SUCCESS run of the flow is run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rerun {
    /// Run it again.
    Existing,
    /// Skip it (the step counts as done for the steps that wait for it).
    #[default]
    SkipExisting,
}

impl Rerun {
    pub const ALL: [Rerun; 2] = [Rerun::Existing, Rerun::SkipExisting];

    pub fn as_str(self) -> &'static str {
        match self {
            Rerun::Existing => "existing",
            Rerun::SkipExisting => "skip-existing",
        }
    }
}

/// A name that is not one of ours, with the ones that are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}`; use one of: {allowed}")]
pub struct UnknownBackfillName {
    pub kind: &'static str,
    pub value: String,
    pub allowed: String,
}

macro_rules! named {
    ($ty:ty, $kind:literal) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $ty {
            type Err = UnknownBackfillName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <$ty>::ALL.into_iter().find(|v| v.as_str() == s.trim()).ok_or_else(|| UnknownBackfillName {
                    kind: $kind,
                    value: s.to_string(),
                    allowed: <$ty>::ALL.map(|v| v.as_str()).join(", "),
                })
            }
        }
    };
}

named!(BackfillState, "backfill state");
named!(BackfillAction, "backfill action");
named!(Rerun, "rerun mode");

/// Where one step of a backfill is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Claimed for creation; its run is not linked yet. `stale`: claimed long
    /// enough ago that the replica that claimed it may have died.
    Claimed {
        stale: bool,
    },
    /// Its run is QUEUED (held or waiting for room included) or RUNNING.
    InFlight,
    Succeeded,
    Failed,
    Cancelled,
    /// Skipped: the date already had a SUCCESS run (`Rerun::SkipExisting`).
    Skipped,
    /// Never started: a step it waits for did not succeed.
    Blocked,
}

impl StepStatus {
    /// Counts against the backfill's `parallel`.
    fn in_flight(self) -> bool {
        matches!(self, StepStatus::Claimed { .. } | StepStatus::InFlight)
    }

    /// Its dependents may start.
    fn met(self) -> bool {
        matches!(self, StepStatus::Succeeded | StepStatus::Skipped)
    }
}

/// One step as `advance` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFacts {
    pub status: StepStatus,
    /// Indexes (all smaller than the step's) of the steps it waits for
    /// (`BackfillPlan::waits`).
    pub waits: Vec<usize>,
    /// The flow already has a SUCCESS run for the step's date (read only for
    /// pending steps when rerun is `SkipExisting`).
    pub has_success: bool,
    /// The step's flow is paused: the step is not started (nor skipped, nor
    /// blocked) and the backfill does not finish until the flow is resumed.
    pub flow_paused: bool,
}

/// What the store knows about a backfill under its lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvanceFacts<'a> {
    pub state: BackfillState,
    pub parallel: u32,
    pub rerun: Rerun,
    pub steps: &'a [StepFacts],
}

/// What to write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Advance {
    /// Steps to claim and create runs for, in order.
    pub claim: Vec<usize>,
    /// Steps claimed long ago and never linked: create (or find, by key) their runs.
    pub retrigger: Vec<usize>,
    /// Steps skipped because their date already succeeded.
    pub skip: Vec<usize>,
    /// Steps that will never start, with the step they waited for that did not succeed.
    pub block: Vec<(usize, usize)>,
    /// The backfill is done (`BackfillAction::Finish`).
    pub finish: bool,
}

/// Decides a backfill's next steps: in step order, a pending step whose date
/// already succeeded is skipped (with `SkipExisting`); one whose waits all
/// succeeded (or were skipped) is claimed while fewer than `parallel` steps are
/// in flight. When nothing is in flight and nothing can be claimed, the steps
/// left (each waiting for one that failed or was cancelled) are blocked and the
/// backfill finishes. A pending step of a paused flow waits: it is not started
/// and the backfill does not finish while one is left (steps behind it wait too).
/// A paused backfill only re-triggers stale claims; a cancelled or done one does
/// nothing.
pub fn advance(facts: &AdvanceFacts<'_>) -> Advance {
    let mut out = Advance::default();
    if matches!(facts.state, S::Cancelled | S::Done) {
        return out;
    }
    let mut status: Vec<StepStatus> = facts.steps.iter().map(|s| s.status).collect();
    out.retrigger = (0..status.len()).filter(|&i| status[i] == StepStatus::Claimed { stale: true }).collect();
    if facts.state == S::Paused {
        return out;
    }
    let mut in_flight = status.iter().filter(|s| s.in_flight()).count();
    let parallel = facts.parallel.max(1) as usize;
    for (i, step) in facts.steps.iter().enumerate() {
        if status[i] != StepStatus::Pending || step.flow_paused {
            continue;
        }
        if facts.rerun == Rerun::SkipExisting && step.has_success {
            status[i] = StepStatus::Skipped;
            out.skip.push(i);
            continue;
        }
        let ready = step.waits.iter().all(|&j| status.get(j).is_some_and(|s| s.met()));
        if ready && in_flight < parallel {
            status[i] = StepStatus::Claimed { stale: false };
            out.claim.push(i);
            in_flight += 1;
        }
    }
    let waits_for_resume =
        facts.steps.iter().zip(&status).any(|(s, st)| s.flow_paused && *st == StepStatus::Pending);
    if in_flight == 0 && !waits_for_resume {
        for (i, step) in facts.steps.iter().enumerate() {
            if status[i] != StepStatus::Pending {
                continue;
            }
            let unmet = step.waits.iter().copied().find(|&j| status.get(j).is_none_or(|s| !s.met()));
            status[i] = StepStatus::Blocked;
            out.block.push((i, unmet.unwrap_or(i)));
        }
        out.finish = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn step(status: StepStatus, waits: &[usize]) -> StepFacts {
        StepFacts { status, waits: waits.to_vec(), has_success: false, flow_paused: false }
    }

    fn facts(steps: &[StepFacts], parallel: u32) -> AdvanceFacts<'_> {
        AdvanceFacts { state: S::Running, parallel, rerun: Rerun::SkipExisting, steps }
    }

    #[test]
    fn the_table_has_one_target_per_state_and_action() {
        for (i, (from, action, _)) in BACKFILL_TABLE.iter().enumerate() {
            assert!(!BACKFILL_TABLE[i + 1..].iter().any(|(f, a, _)| f == from && a == action));
        }
        assert_eq!(
            S::Done.apply(A::Cancel).unwrap_err().to_string(),
            "cannot cancel a backfill that is done"
        );
        assert_eq!(S::Paused.apply(A::Resume), Ok(S::Running));
        assert_eq!("skip-existing".parse::<Rerun>(), Ok(Rerun::SkipExisting));
        let e = "sometimes".parse::<Rerun>().unwrap_err().to_string();
        assert_eq!(e, "unknown rerun mode `sometimes`; use one of: existing, skip-existing");
    }

    #[test]
    fn claims_up_to_parallel_and_never_a_step_before_its_waits() {
        use StepStatus::*;
        // a(d1), b(d1) waits for a(d1), a(d2), b(d2) waits for a(d2), a(d3).
        let steps = [
            step(Pending, &[]),
            step(Pending, &[0]),
            step(Pending, &[]),
            step(Pending, &[2]),
            step(Pending, &[]),
        ];
        let out = advance(&facts(&steps, 2));
        assert_eq!((out.claim, out.finish), (vec![0, 2], false));
        let steps = [
            step(Succeeded, &[]),
            step(Pending, &[0]),
            step(InFlight, &[]),
            step(Pending, &[2]),
            step(Pending, &[]),
        ];
        assert_eq!(advance(&facts(&steps, 2)).claim, vec![1]);
        assert_eq!(advance(&facts(&steps, 4)).claim, vec![1, 4]);
    }

    #[test]
    fn existing_successes_are_skipped_and_release_their_dependents() {
        use StepStatus::*;
        let mut steps = [step(Pending, &[]), step(Pending, &[0])];
        steps[0].has_success = true;
        let out = advance(&facts(&steps, 1));
        assert_eq!((out.skip, out.claim), (vec![0], vec![1]));
        let rerun = AdvanceFacts { rerun: Rerun::Existing, ..facts(&steps, 1) };
        assert_eq!(advance(&rerun).claim, vec![0]);
    }

    #[test]
    fn a_failed_upstream_blocks_its_dependents_once_nothing_is_in_flight() {
        use StepStatus::*;
        let steps = [step(Failed, &[]), step(Pending, &[0]), step(InFlight, &[]), step(Pending, &[1])];
        let out = advance(&facts(&steps, 4));
        assert_eq!((out.claim.len(), out.block.len(), out.finish), (0, 0, false));
        let steps = [step(Failed, &[]), step(Pending, &[0]), step(Succeeded, &[]), step(Pending, &[1])];
        let out = advance(&facts(&steps, 4));
        assert_eq!((out.block, out.finish), (vec![(1, 0), (3, 1)], true));
    }

    #[test]
    fn paused_only_retriggers_stale_claims_and_cancelled_does_nothing() {
        use StepStatus::*;
        let steps = [step(Claimed { stale: true }, &[]), step(Pending, &[])];
        let paused = AdvanceFacts { state: S::Paused, ..facts(&steps, 4) };
        assert_eq!(advance(&paused), Advance { retrigger: vec![0], ..Advance::default() });
        let cancelled = AdvanceFacts { state: S::Cancelled, ..facts(&steps, 4) };
        assert_eq!(advance(&cancelled), Advance::default());
        assert_eq!(advance(&facts(&steps, 4)).claim, vec![1]);
    }

    #[test]
    fn a_paused_flow_s_steps_wait_and_the_backfill_does_not_finish_until_resumed() {
        use StepStatus::*;
        // a(d1) done, b(d1) of a paused flow, a(d2) pending, c(d1) waits for b(d1).
        let mut steps = [step(Succeeded, &[]), step(Pending, &[0]), step(Pending, &[]), step(Pending, &[1])];
        steps[1].flow_paused = true;
        let out = advance(&facts(&steps, 4));
        assert_eq!((out.claim, out.block, out.finish), (vec![2], vec![], false));
        steps[2].status = Succeeded;
        let out = advance(&facts(&steps, 4));
        assert_eq!(out, Advance::default(), "nothing in flight, yet it waits for the resume");
        steps[1].flow_paused = false;
        assert_eq!(advance(&facts(&steps, 4)).claim, vec![1]);
    }

    proptest! {
        /// Driving a random plan to its end (each claimed step then succeeding or
        /// failing at random): never more than `parallel` in flight, no step claimed
        /// before its waits succeeded, every step claimed at most once, and the
        /// backfill finishes with every step settled.
        #[test]
        fn a_backfill_runs_to_its_end_within_parallel(
            waits in proptest::collection::vec(proptest::collection::vec(0usize..40, 0..3), 1..40),
            fails in proptest::collection::vec(any::<bool>(), 40),
            parallel in 1u32..5,
        ) {
            use StepStatus::*;
            let mut steps: Vec<StepFacts> = waits
                .iter()
                .enumerate()
                .map(|(i, w)| step(Pending, &w.iter().copied().filter(|&j| j < i).collect::<Vec<_>>()))
                .collect();
            let mut claimed = vec![0u32; steps.len()];
            for _ in 0..(steps.len() * 2 + 2) {
                let out = advance(&facts(&steps, parallel));
                for &i in &out.claim {
                    prop_assert!(steps[i].waits.iter().all(|&j| steps[j].status == Succeeded));
                    claimed[i] += 1;
                    steps[i].status = InFlight;
                }
                for (i, _) in &out.block {
                    steps[*i].status = Blocked;
                }
                let in_flight = steps.iter().filter(|s| s.status == InFlight).count();
                prop_assert!(in_flight <= parallel as usize);
                if out.finish {
                    prop_assert!(steps.iter().all(|s| matches!(s.status, Succeeded | Failed | Blocked)));
                    break;
                }
                // Every step in flight ends.
                for (i, s) in steps.iter_mut().enumerate() {
                    if s.status == InFlight {
                        s.status = if fails[i] { Failed } else { Succeeded };
                    }
                }
            }
            prop_assert!(claimed.iter().all(|&c| c <= 1));
            prop_assert!(steps.iter().all(|s| s.status != Pending), "{steps:?}");
        }
    }
}
