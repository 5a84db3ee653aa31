//! Whether a deadline is at risk (`deadline.warn_before`, issue #35): the
//! estimate of how long the work left for a business date still takes, from
//! the usual duration of each node, and the rule that compares it with the
//! deadline. Pure functions of their inputs.
//!
//! The estimate is the **remaining critical path**: the longest chain of
//! not-yet-done nodes through the flow's DAG, each weighing its usual duration
//! — the median of its last [`SAMPLES`] successful attempts, 0 when it has
//! none (a node never seen to succeed, a manual node) — where a node already
//! SUCCESS or SKIPPED weighs 0 and a RUNNING node weighs what its usual duration
//! leaves after the time its attempt has run (never below 0). A date with no
//! run yet has every node left.
//!
//! The deadline is at risk when `now + remaining > deadline − warn_before`
//! while `now < deadline` (after it, the miss is `MadeiraDeadlineMissed`'s).

use std::collections::HashMap;
use std::time::Duration;

use crate::{FlowDef, NodeState};

/// How many of a node's latest successful attempts its usual duration is the median of.
pub const SAMPLES: usize = 10;

/// Where one node of the date's run is, as the estimate needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeProgress {
    pub state: NodeState,
    /// How long its current attempt has been RUNNING (RUNNING nodes only).
    pub running_for: Duration,
}

/// The median of `samples` (the mean of the two middle ones for an even
/// count); `None` for no samples.
pub fn median(samples: &[Duration]) -> Option<Duration> {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2),
    }
}

/// Usual durations by node name from `(node, duration)` samples, newest first:
/// the median of each node's first [`SAMPLES`].
pub fn usual_durations(samples: &[(String, Duration)]) -> HashMap<String, Duration> {
    let mut by_node: HashMap<&str, Vec<Duration>> = HashMap::new();
    for (node, d) in samples {
        let kept = by_node.entry(node.as_str()).or_default();
        if kept.len() < SAMPLES {
            kept.push(*d);
        }
    }
    by_node.into_iter().filter_map(|(node, ds)| Some((node.to_string(), median(&ds)?))).collect()
}

/// The remaining critical path of `flow` for a run whose nodes are at
/// `progress` (index-aligned with `flow.nodes`; `None`: no run yet, every node
/// left), with `usual` durations by node name.
pub fn remaining(
    flow: &FlowDef,
    progress: Option<&[NodeProgress]>,
    usual: &HashMap<String, Duration>,
) -> Duration {
    let weight = |i: usize| -> Duration {
        let full = usual.get(&flow.nodes[i].id).copied().unwrap_or_default();
        match progress.and_then(|p| p.get(i)) {
            None => full,
            Some(p) => match p.state {
                NodeState::Success | NodeState::Skipped => Duration::ZERO,
                NodeState::Running => full.saturating_sub(p.running_for),
                _ => full,
            },
        }
    };
    // Longest path ending at each node, in topological order.
    let mut finish = vec![Duration::ZERO; flow.nodes.len()];
    for &i in &flow.topo {
        let before = flow.nodes[i].needs.iter().map(|n| finish[n.upstream]).max().unwrap_or_default();
        finish[i] = before + weight(i);
    }
    finish.into_iter().max().unwrap_or_default()
}

/// Whether the work left (`remaining`) no longer fits before `deadline −
/// warn_before` (all instants in Unix milliseconds); false once the deadline
/// passed.
pub fn at_risk(now_ms: i64, remaining: Duration, deadline_ms: i64, warn_before: Duration) -> bool {
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    now_ms < deadline_ms && now_ms.saturating_add(ms(remaining)) > deadline_ms.saturating_sub(ms(warn_before))
}

/// Where the run for a business date stands against its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineState {
    /// Not SUCCESS yet, and the work left fits before `deadline − warn_before`.
    OnTime,
    /// Not SUCCESS yet, and the work left no longer fits (`at_risk`).
    AtRisk,
    /// The deadline passed without a SUCCESS run, or the run succeeded after it.
    Missed,
    /// SUCCESS by the deadline.
    Met,
}

impl DeadlineState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadlineState::OnTime => "on time",
            DeadlineState::AtRisk => "at risk",
            DeadlineState::Missed => "missed",
            DeadlineState::Met => "met",
        }
    }
}

/// The state of a date whose deadline is `deadline_ms`, at `now_ms`: `succeeded_ms`
/// is when its SUCCESS run finished (if it did); `remaining` and `warn_before`
/// as for `at_risk` (a flow without `warn_before` passes zero).
pub fn deadline_state(
    now_ms: i64,
    deadline_ms: i64,
    succeeded_ms: Option<i64>,
    remaining: Duration,
    warn_before: Duration,
) -> DeadlineState {
    match succeeded_ms {
        Some(at) if at <= deadline_ms => DeadlineState::Met,
        Some(_) => DeadlineState::Missed,
        None if now_ms >= deadline_ms => DeadlineState::Missed,
        None if at_risk(now_ms, remaining, deadline_ms, warn_before) => DeadlineState::AtRisk,
        None => DeadlineState::OnTime,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_flow;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// a → b → d and a → c → d: b is the long branch.
    fn diamond() -> FlowDef {
        parse_flow(
            "f.yaml",
            "flow: f\nnodes:\n  a: {run: {builtin: noop}}\n  b: {needs: [a], run: {builtin: noop}}\n  \
             c: {needs: [a], run: {builtin: noop}}\n  d: {needs: [b, c], run: {builtin: noop}}\n",
        )
        .expect("flow")
    }

    fn usual(pairs: &[(&str, u64)]) -> HashMap<String, Duration> {
        pairs.iter().map(|(n, s)| (n.to_string(), secs(*s))).collect()
    }

    fn at(flow: &FlowDef, states: &[(&str, NodeState, u64)]) -> Vec<NodeProgress> {
        flow.nodes
            .iter()
            .map(|n| {
                let found = states.iter().find(|(id, _, _)| *id == n.id);
                let (state, ran) = found.map(|(_, s, r)| (*s, *r)).unwrap_or((NodeState::Init, 0));
                NodeProgress { state, running_for: secs(ran) }
            })
            .collect()
    }

    #[test]
    fn the_median_is_the_middle_sample() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[secs(5)]), Some(secs(5)));
        assert_eq!(median(&[secs(9), secs(1), secs(5)]), Some(secs(5)));
        assert_eq!(
            median(&[secs(1), secs(3), secs(100), secs(5)]),
            Some(secs(4)),
            "even: mean of the middle two"
        );
    }

    #[test]
    fn usual_durations_keep_only_the_latest_ten_successes_per_node() {
        // Newest first: ten fast runs, then older slow ones that no longer count.
        let mut samples: Vec<(String, Duration)> = (0..10).map(|_| ("a".to_string(), secs(2))).collect();
        samples.extend((0..20).map(|_| ("a".to_string(), secs(600))));
        samples.push(("b".to_string(), secs(7)));
        let got = usual_durations(&samples);
        assert_eq!(got.get("a"), Some(&secs(2)));
        assert_eq!(got.get("b"), Some(&secs(7)));
        assert_eq!(got.get("c"), None);
    }

    #[test]
    fn the_remaining_critical_path_is_the_longest_chain_of_nodes_left() {
        let flow = diamond();
        let usual = usual(&[("a", 10), ("b", 60), ("c", 5), ("d", 20)]);
        assert_eq!(remaining(&flow, None, &usual), secs(90), "no run yet: a + b + d");
        let done_a = at(&flow, &[("a", NodeState::Success, 0)]);
        assert_eq!(remaining(&flow, Some(&done_a), &usual), secs(80));
        let b_running = at(&flow, &[("a", NodeState::Success, 0), ("b", NodeState::Running, 45)]);
        assert_eq!(remaining(&flow, Some(&b_running), &usual), secs(35), "b has 15 s left, then d");
        let b_overdue = at(&flow, &[("a", NodeState::Success, 0), ("b", NodeState::Running, 500)]);
        assert_eq!(remaining(&flow, Some(&b_overdue), &usual), secs(25), "c then d: b's share is spent");
        let failed_b = at(&flow, &[("a", NodeState::Success, 0), ("b", NodeState::Failed, 0)]);
        assert_eq!(remaining(&flow, Some(&failed_b), &usual), secs(80), "a failed node still has its work");
        // Unknown nodes count 0: with no history nothing is left to wait for.
        assert_eq!(remaining(&flow, None, &HashMap::new()), Duration::ZERO);
        let all = at(
            &flow,
            &[
                ("a", NodeState::Success, 0),
                ("b", NodeState::Skipped, 0),
                ("c", NodeState::Success, 0),
                ("d", NodeState::Success, 0),
            ],
        );
        assert_eq!(remaining(&flow, Some(&all), &usual), Duration::ZERO);
    }

    #[test]
    fn a_dates_deadline_state_is_met_missed_at_risk_or_on_time() {
        let (deadline, warn) = (100_000, secs(30));
        assert_eq!(deadline_state(50_000, deadline, Some(90_000), secs(0), warn), DeadlineState::Met);
        assert_eq!(deadline_state(200_000, deadline, Some(100_000), secs(0), warn), DeadlineState::Met);
        assert_eq!(
            deadline_state(200_000, deadline, Some(100_001), secs(0), warn),
            DeadlineState::Missed,
            "late"
        );
        assert_eq!(deadline_state(100_000, deadline, None, secs(0), warn), DeadlineState::Missed);
        assert_eq!(deadline_state(66_000, deadline, None, secs(5), warn), DeadlineState::AtRisk);
        assert_eq!(deadline_state(66_000, deadline, None, secs(5), Duration::ZERO), DeadlineState::OnTime);
        assert_eq!(deadline_state(10_000, deadline, None, secs(5), warn), DeadlineState::OnTime);
    }

    #[test]
    fn at_risk_once_the_work_left_no_longer_fits_before_the_warning_line() {
        let deadline = 1_000_000;
        let warn = secs(30 * 60);
        let line = deadline - 1_800_000;
        // 10 minutes of work: at risk from 10 minutes before the warning line.
        assert!(!at_risk(line - 600_000, secs(600), deadline, warn), "exactly fits");
        assert!(at_risk(line - 600_000 + 1, secs(600), deadline, warn));
        assert!(!at_risk(line - 1, Duration::ZERO, deadline, warn), "nothing left, before the line");
        assert!(at_risk(line + 1, Duration::ZERO, deadline, warn), "past the line, not done");
        assert!(!at_risk(deadline, secs(600), deadline, warn), "passed: that is a miss, not a risk");
    }
}
