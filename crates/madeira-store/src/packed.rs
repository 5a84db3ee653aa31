//! The stored form of the transition log: the transitions one write makes for one
//! run, packed into one `transitions` row (`at` of the first, and `entries`, a
//! JSON array with one short array per transition). States and causes are small
//! codes given here, once, by exhaustive matches on the core's enums
//! (`madeira_core::state` owns their names); decoding maps a code back through
//! the enums' `ALL` lists, and anything unknown is a corrupt row.
//!
//! One entry: `[node, from, to, cause, attempt, dt, actor, reason]`, where `node`
//! is `null` for a run-level transition (then `from` 0 is "no run yet" and a run
//! state's code is one more than below), `dt` is the milliseconds since the
//! previous entry (the row's `at` for the first), `actor` is `null` when it is the
//! previous entry's (never for the first), and trailing `null`s (actor, reason)
//! are left out. The migration that made this format (`*_packed_transitions.sql`)
//! writes the same codes with SQL `CASE`s; the store suite's upgrade test reads
//! rows it converted, with every state and cause.

use madeira_core::state::{Cause, NodeState, RunCause, RunState};
use serde_json::Value;

use crate::{Edge, StoreError, TransitionRecord};

pub(crate) fn node_state(s: NodeState) -> i64 {
    match s {
        NodeState::Init => 0,
        NodeState::Running => 1,
        NodeState::Success => 2,
        NodeState::Failed => 3,
        NodeState::Retrying => 4,
        NodeState::Skipped => 5,
        NodeState::ManualConfirm => 6,
    }
}

fn cause(c: Cause) -> i64 {
    match c {
        Cause::Dispatch => 0,
        Cause::Succeeded => 1,
        Cause::AttemptFailed => 2,
        Cause::RetryScheduled => 3,
        Cause::RetryDue => 4,
        Cause::UpstreamFailed => 5,
        Cause::UpstreamSkipped => 6,
        Cause::ConditionFalse => 7,
        Cause::ConditionError => 8,
        Cause::AwaitConfirm => 9,
        Cause::Confirmed => 10,
        Cause::Rejected => 11,
        Cause::FallbackStarted => 12,
        Cause::FallbackSkipped => 13,
        Cause::Rerun => 14,
        Cause::MarkSuccess => 15,
        Cause::Reactivated => 16,
        Cause::OperatorSkip => 17,
        Cause::RunCancelled => 18,
        Cause::Recovered => 19,
        Cause::AfterExpired => 20,
        Cause::AfterSkipped => 21,
    }
}

/// A run state's code; 0 is "no run yet" (`from` of a creation).
fn run_state(s: Option<RunState>) -> i64 {
    match s {
        None => 0,
        Some(RunState::Queued) => 1,
        Some(RunState::Admitted) => 2,
        Some(RunState::Running) => 3,
        Some(RunState::Success) => 4,
        Some(RunState::Failed) => 5,
        Some(RunState::Cancelled) => 6,
    }
}

fn run_cause(c: RunCause) -> i64 {
    match c {
        RunCause::Created => 0,
        RunCause::Admitted => 1,
        RunCause::Started => 2,
        RunCause::Succeeded => 3,
        RunCause::Failed => 4,
        RunCause::Cancelled => 5,
        RunCause::Reactivated => 6,
    }
}

/// The one of `all` whose code is `code`.
fn decode<T: Copy>(all: &[T], code: &Value, of: fn(T) -> i64, what: &str) -> Result<T, StoreError> {
    let code = code.as_i64().ok_or_else(|| corrupt(format!("{what} code {code} is not a number")))?;
    all.iter().copied().find(|v| of(*v) == code).ok_or_else(|| corrupt(format!("unknown {what} code {code}")))
}

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt { table: "transitions", detail }
}

/// One transition to pack (what a write has in hand, borrowed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub node: Option<&'a str>,
    pub edge: Edge,
    pub actor: &'a str,
    pub attempt: u32,
    pub reason: Option<&'a str>,
    pub at: i64,
}

/// The `at` and `entries` of the row holding `entries` (one run's, in order; not
/// empty), written straight into one string (a commit packs every transition).
pub(crate) fn pack(entries: &[Entry<'_>]) -> (i64, String) {
    use std::fmt::Write as _;
    let first_at = entries.first().map_or(0, |e| e.at);
    let (mut prev_at, mut prev_actor) = (first_at, None);
    let mut out = String::with_capacity(32 * entries.len() + 2);
    out.push('[');
    for (i, e) in entries.iter().enumerate() {
        let (from, to, c) = match e.edge {
            Edge::Node { from, to, cause: c } => (node_state(from), node_state(to), cause(c)),
            Edge::Run(r) => (run_state(r.from), run_state(Some(r.to)), run_cause(r.cause)),
        };
        out.push_str(if i == 0 { "[" } else { ",[" });
        match (e.node, e.edge) {
            (Some(node), Edge::Node { .. }) => push_text(&mut out, node),
            _ => out.push_str("null"),
        }
        let _ = write!(out, ",{from},{to},{c},{},{}", e.attempt, e.at - prev_at);
        let actor = (prev_actor != Some(e.actor)).then_some(e.actor);
        if actor.is_some() || e.reason.is_some() {
            out.push(',');
            match actor {
                Some(actor) => push_text(&mut out, actor),
                None => out.push_str("null"),
            }
        }
        if let Some(reason) = e.reason {
            out.push(',');
            push_text(&mut out, reason);
        }
        out.push(']');
        (prev_at, prev_actor) = (e.at, Some(e.actor));
    }
    out.push(']');
    (first_at, out)
}

/// `s` as a JSON string (which cannot fail to serialise).
fn push_text(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// The transitions of one stored row of `run_id` (its `at` and `entries`), in order.
pub(crate) fn unpack(run_id: &str, at: i64, entries: &str) -> Result<Vec<TransitionRecord>, StoreError> {
    let parsed: Vec<Vec<Value>> =
        serde_json::from_str(entries).map_err(|e| corrupt(format!("entries of run {run_id}: {e}")))?;
    let (mut prev_at, mut prev_actor) = (at, None::<String>);
    parsed
        .into_iter()
        .map(|v| {
            if v.len() < 6 {
                return Err(corrupt(format!("an entry of run {run_id} has {} fields", v.len())));
            }
            let node = match &v[0] {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => return Err(corrupt(format!("node {other} of run {run_id}"))),
            };
            let edge = match node {
                Some(_) => Edge::Node {
                    from: decode(&NodeState::ALL, &v[1], node_state, "node state")?,
                    to: decode(&NodeState::ALL, &v[2], node_state, "node state")?,
                    cause: decode(&Cause::ALL, &v[3], cause, "cause")?,
                },
                None => {
                    let from = decode(&RUN_FROM, &v[1], run_state, "run state")?;
                    let to = decode(&RUN_FROM[1..], &v[2], run_state, "run state")?
                        .ok_or_else(|| corrupt(format!("a run entry of run {run_id} goes to no state")))?;
                    Edge::run(from, decode(&RunCause::ALL, &v[3], run_cause, "run cause")?, to)
                }
            };
            let number = |i: usize, what: &str| {
                v[i].as_i64().ok_or_else(|| corrupt(format!("{what} {} of run {run_id}", v[i])))
            };
            let attempt = u32::try_from(number(4, "attempt")?)
                .map_err(|_| corrupt(format!("attempt {} of run {run_id}", v[4])))?;
            let at = prev_at + number(5, "dt")?;
            let text = |i: usize| match v.get(i) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(corrupt(format!("text field {other} of run {run_id}"))),
            };
            let actor = match text(6)? {
                Some(actor) => actor,
                None => prev_actor
                    .clone()
                    .ok_or_else(|| corrupt(format!("an entry of run {run_id} has no actor")))?,
            };
            let reason = text(7)?;
            (prev_at, prev_actor) = (at, Some(actor.clone()));
            Ok(TransitionRecord { run_id: run_id.to_string(), node, edge, actor, attempt, reason, at })
        })
        .collect()
}

/// `None` (no run yet) and every run state: what a run entry's `from` may be.
const RUN_FROM: [Option<RunState>; 7] = [
    None,
    Some(RunState::Queued),
    Some(RunState::Admitted),
    Some(RunState::Running),
    Some(RunState::Success),
    Some(RunState::Failed),
    Some(RunState::Cancelled),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(node: Option<&str>, edge: Edge, actor: &str, reason: Option<&str>, at: i64) -> TransitionRecord {
        TransitionRecord {
            run_id: "r".into(),
            node: node.map(str::to_string),
            edge,
            actor: actor.into(),
            attempt: 1,
            reason: reason.map(str::to_string),
            at,
        }
    }

    fn entries(records: &[TransitionRecord]) -> Vec<Entry<'_>> {
        records
            .iter()
            .map(|t| Entry {
                node: t.node.as_deref(),
                edge: t.edge,
                actor: &t.actor,
                attempt: t.attempt,
                reason: t.reason.as_deref(),
                at: t.at,
            })
            .collect()
    }

    #[test]
    fn every_state_and_cause_round_trips() {
        let mut records = Vec::new();
        for (i, from) in NodeState::ALL.into_iter().enumerate() {
            for c in Cause::ALL {
                let to = NodeState::ALL[(i + 1) % NodeState::ALL.len()];
                records.push(rec(Some("n\"é\u{1e}"), Edge::Node { from, to, cause: c }, "engine", None, 5));
            }
        }
        for from in RUN_FROM {
            for c in RunCause::ALL {
                for to in RunState::ALL {
                    records.push(rec(None, Edge::run(from, c, to), "ops", Some("why, \"quoted\"\n"), 3));
                }
            }
        }
        let (at, packed) = pack(&entries(&records));
        assert_eq!(at, 5);
        assert_eq!(unpack("r", at, &packed).expect("unpacks"), records);
    }

    #[test]
    fn an_entry_is_short_and_names_its_actor_only_when_it_changes() {
        let records = [
            rec(
                Some("a"),
                Edge::Node { from: NodeState::Init, to: NodeState::Running, cause: Cause::Dispatch },
                "engine",
                None,
                1_733_000_000_000,
            ),
            rec(
                Some("a"),
                Edge::Node { from: NodeState::Running, to: NodeState::Success, cause: Cause::Succeeded },
                "engine",
                None,
                1_733_000_000_007,
            ),
            rec(
                None,
                Edge::run(Some(RunState::Running), RunCause::Succeeded, RunState::Success),
                "bob",
                Some("x"),
                1_733_000_000_003,
            ),
        ];
        let (at, packed) = pack(&entries(&records));
        assert_eq!(packed, r#"[["a",0,1,0,1,0,"engine"],["a",1,2,1,1,7],[null,3,4,3,1,-4,"bob","x"]]"#);
        assert_eq!(unpack("r", at, &packed).expect("unpacks"), records);
    }

    #[test]
    fn unknown_codes_and_malformed_entries_are_corrupt_rows() {
        for bad in [
            r#"[["a",0,99,0,1,0,"e"]]"#,
            r#"[[null,0,0,0,1,0,"e"]]"#,
            r#"[["a",0,1,0,1]]"#,
            r#"[["a",0,1,0,-1,0,"e"]]"#,
            r#"[["a",0,1,0,1,0]]"#,
            "not json",
        ] {
            assert!(
                matches!(unpack("r", 0, bad), Err(StoreError::Corrupt { table: "transitions", .. })),
                "{bad}"
            );
        }
    }
}
