//! The node and run state machines: the seven node states, the run states, and the
//! one transition table each. Every state change anywhere in Madeira is checked here
//! (`NodeState::apply`, `RunState::apply`, and `run_edge` for a run's creation);
//! nothing else decides what is allowed.

use std::fmt;
use std::str::FromStr;

/// The seven node states (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeState {
    Init,
    Running,
    Success,
    Failed,
    Retrying,
    Skipped,
    ManualConfirm,
}

/// Why a node changes state; recorded with every transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    Dispatch,
    Succeeded,
    AttemptFailed,
    RetryScheduled,
    RetryDue,
    UpstreamFailed,
    UpstreamSkipped,
    ConditionFalse,
    ConditionError,
    AwaitConfirm,
    Confirmed,
    Rejected,
    FallbackStarted,
    /// The fallback of a manual node with `then: skip` succeeded: the node ends SKIPPED.
    FallbackSkipped,
    Rerun,
    MarkSuccess,
    Reactivated,
    OperatorSkip,
    RunCancelled,
    Recovered,
    /// A held run's `after_policy.wait` ran out with `then: fail`: its nodes fail
    /// without running.
    AfterExpired,
}

use Cause as C;
use NodeState as S;

/// The node transition table: `(from, cause) -> to`. The only place that says
/// which node state changes exist.
const NODE_TABLE: &[(NodeState, Cause, NodeState)] = &[
    (S::Init, C::Dispatch, S::Running),
    (S::Init, C::UpstreamFailed, S::Skipped),
    (S::Init, C::UpstreamSkipped, S::Skipped),
    (S::Init, C::ConditionFalse, S::Skipped),
    (S::Init, C::ConditionError, S::Failed),
    (S::Init, C::AwaitConfirm, S::ManualConfirm),
    (S::Init, C::OperatorSkip, S::Skipped),
    (S::Init, C::RunCancelled, S::Skipped),
    (S::Init, C::AfterExpired, S::Failed),
    (S::Running, C::Succeeded, S::Success),
    (S::Running, C::AttemptFailed, S::Failed),
    (S::Running, C::RetryScheduled, S::Retrying),
    (S::Running, C::RunCancelled, S::Failed),
    (S::Running, C::Recovered, S::Init),
    (S::Running, C::FallbackSkipped, S::Skipped),
    (S::Retrying, C::RetryDue, S::Init),
    (S::Retrying, C::OperatorSkip, S::Skipped),
    (S::Retrying, C::RunCancelled, S::Skipped),
    (S::ManualConfirm, C::Confirmed, S::Success),
    (S::ManualConfirm, C::Rejected, S::Failed),
    (S::ManualConfirm, C::FallbackStarted, S::Running),
    (S::ManualConfirm, C::OperatorSkip, S::Skipped),
    (S::ManualConfirm, C::RunCancelled, S::Skipped),
    (S::Success, C::Rerun, S::Init),
    (S::Failed, C::Rerun, S::Init),
    (S::Skipped, C::Rerun, S::Init),
    (S::Failed, C::MarkSuccess, S::Success),
    (S::Failed, C::OperatorSkip, S::Skipped),
    (S::Skipped, C::Reactivated, S::Init),
];

/// A transition the table does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {cause} a node in state {from}")]
pub struct NodeRefusal {
    pub from: NodeState,
    pub cause: Cause,
}

impl NodeState {
    pub const ALL: [NodeState; 7] =
        [S::Init, S::Running, S::Success, S::Failed, S::Retrying, S::Skipped, S::ManualConfirm];

    /// The state `cause` leads to from `self`, or a refusal.
    pub fn apply(self, cause: Cause) -> Result<NodeState, NodeRefusal> {
        NODE_TABLE
            .iter()
            .find(|(from, c, _)| *from == self && *c == cause)
            .map(|(_, _, to)| *to)
            .ok_or(NodeRefusal { from: self, cause })
    }

    /// SUCCESS, FAILED and SKIPPED: nothing more happens unless an operator acts.
    pub fn is_terminal(self) -> bool {
        matches!(self, S::Success | S::Failed | S::Skipped)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            S::Init => "INIT",
            S::Running => "RUNNING",
            S::Success => "SUCCESS",
            S::Failed => "FAILED",
            S::Retrying => "RETRYING",
            S::Skipped => "SKIPPED",
            S::ManualConfirm => "MANUAL_CONFIRM",
        }
    }
}

impl Cause {
    pub const ALL: [Cause; 21] = [
        C::Dispatch,
        C::Succeeded,
        C::AttemptFailed,
        C::RetryScheduled,
        C::RetryDue,
        C::UpstreamFailed,
        C::UpstreamSkipped,
        C::ConditionFalse,
        C::ConditionError,
        C::AwaitConfirm,
        C::Confirmed,
        C::Rejected,
        C::FallbackStarted,
        C::FallbackSkipped,
        C::Rerun,
        C::MarkSuccess,
        C::Reactivated,
        C::OperatorSkip,
        C::RunCancelled,
        C::Recovered,
        C::AfterExpired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            C::Dispatch => "dispatch",
            C::Succeeded => "succeeded",
            C::AttemptFailed => "attempt_failed",
            C::RetryScheduled => "retry_scheduled",
            C::RetryDue => "retry_due",
            C::UpstreamFailed => "upstream_failed",
            C::UpstreamSkipped => "upstream_skipped",
            C::ConditionFalse => "condition_false",
            C::ConditionError => "condition_error",
            C::AwaitConfirm => "await_confirm",
            C::Confirmed => "confirm",
            C::Rejected => "reject",
            C::FallbackStarted => "fallback",
            C::FallbackSkipped => "fallback_skip",
            C::Rerun => "rerun",
            C::MarkSuccess => "mark_success",
            C::Reactivated => "reactivated",
            C::OperatorSkip => "skip",
            C::RunCancelled => "run_cancelled",
            C::Recovered => "recovered",
            C::AfterExpired => "after_expired",
        }
    }
}

/// Run states: SPEC §3's four, plus QUEUED for a run waiting behind
/// `max_active_runs` with `on_overlap: queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunState {
    /// Waiting: for room under `max_active_runs`, for its `after`, or for a reason
    /// of its own (`wait_reason`). Counts toward no limit.
    Queued,
    /// Admitted to start (at creation when there was room, or promoted from
    /// QUEUED): counts against `max_active_runs`; the engine's `Command::Start`
    /// takes it RUNNING. The API shows it as QUEUED (SPEC §3's five run states).
    Admitted,
    Running,
    Success,
    Failed,
    Cancelled,
}

/// Why a run changes state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunCause {
    /// A trigger made a run that waits: the run exists, QUEUED (`admit`).
    Created,
    /// Admission let the run start: NONE -> ADMITTED (created with room) or
    /// QUEUED -> ADMITTED (promoted, released from its wait).
    Admitted,
    /// ADMITTED -> RUNNING: the planner's `Command::Start`, the only way a run starts.
    Started,
    Succeeded,
    Failed,
    Cancelled,
    Reactivated,
}

/// The run transition table. `None` is "no run yet": the one edge out of it is
/// creation, which `admit` takes; `Started` is taken only by `Command::Start`.
const RUN_TABLE: &[(Option<RunState>, RunCause, RunState)] = &[
    (None, RunCause::Created, RunState::Queued),
    (None, RunCause::Admitted, RunState::Admitted),
    (Some(RunState::Queued), RunCause::Admitted, RunState::Admitted),
    (Some(RunState::Queued), RunCause::Cancelled, RunState::Cancelled),
    (Some(RunState::Admitted), RunCause::Started, RunState::Running),
    (Some(RunState::Admitted), RunCause::Cancelled, RunState::Cancelled),
    // A held run whose `after_policy` (`then: fail`) ran out: it fails unstarted.
    (Some(RunState::Queued), RunCause::Failed, RunState::Failed),
    (Some(RunState::Running), RunCause::Succeeded, RunState::Success),
    (Some(RunState::Running), RunCause::Failed, RunState::Failed),
    (Some(RunState::Running), RunCause::Cancelled, RunState::Cancelled),
    (Some(RunState::Success), RunCause::Reactivated, RunState::Running),
    (Some(RunState::Failed), RunCause::Reactivated, RunState::Running),
];

/// A run transition the table does not allow (`from: None`: the run does not exist yet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {cause} a run in state {}", .from.map_or("NONE", RunState::as_str))]
pub struct RunRefusal {
    pub from: Option<RunState>,
    pub cause: RunCause,
}

/// The state `cause` leads to from `from` (`None`: no run yet), or a refusal.
pub fn run_edge(from: Option<RunState>, cause: RunCause) -> Result<RunState, RunRefusal> {
    RUN_TABLE
        .iter()
        .find(|(f, c, _)| *f == from && *c == cause)
        .map(|(_, _, to)| *to)
        .ok_or(RunRefusal { from, cause })
}

impl RunState {
    pub const ALL: [RunState; 6] = [
        RunState::Queued,
        RunState::Admitted,
        RunState::Running,
        RunState::Success,
        RunState::Failed,
        RunState::Cancelled,
    ];
    /// The run states the API, the console and the CLI show (SPEC §3): an
    /// ADMITTED run is shown QUEUED.
    pub const SHOWN: [RunState; 5] =
        [RunState::Queued, RunState::Running, RunState::Success, RunState::Failed, RunState::Cancelled];

    pub fn apply(self, cause: RunCause) -> Result<RunState, RunRefusal> {
        run_edge(Some(self), cause)
    }

    /// The state shown outside (`SHOWN`): ADMITTED is shown as QUEUED.
    pub fn shown(self) -> RunState {
        match self {
            RunState::Admitted => RunState::Queued,
            state => state,
        }
    }

    /// QUEUED or ADMITTED: made, not started yet.
    pub fn is_unstarted(self) -> bool {
        matches!(self, RunState::Queued | RunState::Admitted)
    }

    /// SUCCESS, FAILED and CANCELLED: the run changes no more unless an operator
    /// reactivates it. (ADMITTED and RUNNING runs count against `max_active_runs`.)
    pub fn is_terminal(self) -> bool {
        matches!(self, RunState::Success | RunState::Failed | RunState::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "QUEUED",
            RunState::Admitted => "ADMITTED",
            RunState::Running => "RUNNING",
            RunState::Success => "SUCCESS",
            RunState::Failed => "FAILED",
            RunState::Cancelled => "CANCELLED",
        }
    }
}

impl RunCause {
    pub const ALL: [RunCause; 7] = [
        RunCause::Created,
        RunCause::Admitted,
        RunCause::Started,
        RunCause::Succeeded,
        RunCause::Failed,
        RunCause::Cancelled,
        RunCause::Reactivated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunCause::Created => "created",
            RunCause::Admitted => "admitted",
            RunCause::Started => "started",
            RunCause::Succeeded => "succeeded",
            RunCause::Failed => "failed",
            RunCause::Cancelled => "cancel",
            RunCause::Reactivated => "reactivated",
        }
    }
}

/// A state or cause name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} `{value}`")]
pub struct UnknownName {
    pub kind: &'static str,
    pub value: String,
}

macro_rules! text_enum {
    ($ty:ty, $kind:literal, $all:expr) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $ty {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $all.into_iter()
                    .find(|v| v.as_str().eq_ignore_ascii_case(s))
                    .ok_or_else(|| UnknownName { kind: $kind, value: s.to_string() })
            }
        }
    };
}

text_enum!(NodeState, "node state", NodeState::ALL);
text_enum!(RunState, "run state", RunState::ALL);
text_enum!(Cause, "cause", Cause::ALL);
text_enum!(RunCause, "run cause", RunCause::ALL);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_one_target_per_state_and_cause() {
        for (i, (from, cause, _)) in NODE_TABLE.iter().enumerate() {
            let dup = NODE_TABLE[i + 1..].iter().any(|(f, c, _)| f == from && c == cause);
            assert!(!dup, "duplicate row for {from} {cause}");
        }
    }

    #[test]
    fn run_table_has_one_target_per_state_and_cause_and_one_way_in() {
        for (i, (from, cause, _)) in RUN_TABLE.iter().enumerate() {
            let dup = RUN_TABLE[i + 1..].iter().any(|(f, c, _)| f == from && c == cause);
            assert!(!dup, "duplicate run row for {from:?} {cause}");
        }
        let entries: Vec<_> = RUN_TABLE.iter().filter(|(from, _, _)| from.is_none()).collect();
        assert_eq!(
            entries,
            [&(None, RunCause::Created, RunState::Queued), &(None, RunCause::Admitted, RunState::Admitted)]
        );
        // A run starts only once admitted; a waiting one is admitted first.
        assert!(RunState::Queued.apply(RunCause::Started).is_err());
        assert_eq!(RunState::Queued.apply(RunCause::Admitted), Ok(RunState::Admitted));
        assert_eq!(RunState::Admitted.apply(RunCause::Started), Ok(RunState::Running));
        assert!(RunState::Admitted.apply(RunCause::Admitted).is_err());
        assert!(RunState::Admitted.apply(RunCause::Failed).is_err());
        assert_eq!(
            RunState::Running.apply(RunCause::Created).unwrap_err().to_string(),
            "cannot created a run in state RUNNING"
        );
        assert_eq!(
            run_edge(None, RunCause::Started).unwrap_err().to_string(),
            "cannot started a run in state NONE"
        );
    }

    #[test]
    fn terminal_states_only_leave_by_operator_causes() {
        let operator = [C::Rerun, C::MarkSuccess, C::Reactivated, C::OperatorSkip];
        for (from, cause, _) in NODE_TABLE {
            if from.is_terminal() {
                assert!(operator.contains(cause), "{from} leaves by {cause}");
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for s in NodeState::ALL {
            assert_eq!(s.as_str().parse::<NodeState>(), Ok(s));
        }
        for s in RunState::ALL {
            assert_eq!(s.as_str().parse::<RunState>(), Ok(s));
        }
        for c in Cause::ALL {
            assert_eq!(c.as_str().parse::<Cause>(), Ok(c));
        }
        for c in RunCause::ALL {
            assert_eq!(c.as_str().parse::<RunCause>(), Ok(c));
        }
    }

    #[test]
    fn refuses_confirm_when_not_waiting() {
        assert_eq!(
            NodeState::Running.apply(C::Confirmed),
            Err(NodeRefusal { from: S::Running, cause: C::Confirmed })
        );
    }
}
