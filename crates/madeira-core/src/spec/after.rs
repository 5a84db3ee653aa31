//! Cross-flow dependencies of one flow file: `after: [{flow, node, date, calendar}]`,
//! `after_policy: {wait, then}` and the `flow_succeeded` trigger. Only what one file
//! can tell is checked here (a node's `after:` goes through the same parser, its
//! errors naming the node); whether the flows exist and form no cycle is the
//! estate's check (`crate::estate`), made when the flow is applied.

use crate::model::{AfterDef, AfterPolicy, AfterThen, TriggerDef};

use super::raw::{RawAfter, RawAfterPolicy, RawDate, RawTrigger, Span};
use super::report::{At, Report, did_you_mean, line_of, one_of};

/// The furthest back an `after` may look: ten years of days.
pub const MAX_AFTER_OFFSET: i64 = 3660;
/// `after` entries per flow.
pub const MAX_AFTER: usize = 64;

/// Every `after` entry that is valid; the others are reported. `node`: the node
/// whose `after:` this is (`None`: the flow's).
pub(crate) fn after(
    report: &mut Report,
    own: Option<&str>,
    node: Option<&str>,
    raw: &[Span<RawAfter>],
) -> Vec<AfterDef> {
    let top = |line| At { node, line };
    if raw.len() > MAX_AFTER {
        let at = top(raw.get(MAX_AFTER).and_then(line_of));
        report.push(at, format!("at most {MAX_AFTER} `after` entries per flow, got {}", raw.len()));
    }
    let mut seen: Vec<(String, Option<String>, i32)> = Vec::new();
    let mut out = Vec::new();
    for entry in raw.iter().take(MAX_AFTER) {
        let Some(def) = one(report, own, top(line_of(entry)), entry) else { continue };
        let key = (def.flow.clone(), def.node.clone(), def.offset);
        if seen.contains(&key) {
            report.push(
                top(def.line),
                format!("`after` names `{}` twice with the same date; remove one", def.flow),
            );
            continue;
        }
        seen.push(key);
        out.push(def);
    }
    out
}

fn one(report: &mut Report, own: Option<&str>, at: At<'_>, raw: &Span<RawAfter>) -> Option<AfterDef> {
    let a = &raw.value;
    let Some(flow) = &a.flow else {
        report.push(at, "an `after` entry needs `flow`, e.g. `{flow: payments-pull, date: same}`");
        return None;
    };
    let flow = upstream_name(report, at.at(flow), "after", &flow.value)?;
    if own == Some(flow.as_str()) {
        report.push(
            at,
            format!(
                "flow `{flow}` cannot wait for itself; to wait for its previous business date use \
                 `depends_on_past` (a node waits for a node of its own run with `needs`)"
            ),
        );
        return None;
    }
    let node = match &a.node {
        Some(n) if n.value.trim().is_empty() => {
            report.push(at.at(n), "`after.node` is empty; name a node of the upstream flow or leave it out");
            return None;
        }
        Some(n) => Some(n.value.trim().to_string()),
        None => None,
    };
    let offset = match &a.date {
        Some(d) => date_offset(report, at.at(d), &d.value)?,
        None => 0,
    };
    let calendar = match &a.calendar {
        Some(c) if c.value.trim().is_empty() => {
            report.push(
                at.at(c),
                "`after.calendar` is empty; name a calendar such as `cn-workdays` or leave it out",
            );
            return None;
        }
        Some(c) => Some(c.value.trim().to_string()),
        None => None,
    };
    Some(AfterDef { flow, node, offset, calendar, line: at.line })
}

/// `same` → 0, `-N` → -N; anything else is reported.
fn date_offset(report: &mut Report, at: At<'_>, raw: &RawDate) -> Option<i32> {
    let usage = "write `date: same` or a negative whole number of days such as `date: -1`";
    let n = match raw {
        RawDate::Word(w) if w.trim() == "same" => return Some(0),
        RawDate::Word(w) => match w.trim().parse::<i64>() {
            Ok(n) => n,
            Err(_) => {
                let hint = did_you_mean(w.trim(), ["same"]);
                report.push(at, format!("bad `after.date` `{w}`{hint}; {usage}"));
                return None;
            }
        },
        RawDate::Offset(n) => *n,
    };
    if n > 0 {
        report.push(at, format!("`after.date` {n} is in the future of the run's business date; {usage}"));
        return None;
    }
    if n < -MAX_AFTER_OFFSET {
        report.push(at, format!("`after.date` {n} is too far back (at most -{MAX_AFTER_OFFSET})"));
        return None;
    }
    i32::try_from(n).ok()
}

/// A flow name another field refers to: the same rule as `flow:`.
fn upstream_name(report: &mut Report, at: At<'_>, field: &str, name: &str) -> Option<String> {
    let name = name.trim();
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if !name.is_empty() && name.len() <= 63 && name.chars().all(valid) {
        return Some(name.to_string());
    }
    report.push(
        at,
        format!("`{field}` names flow `{name}`, which is not a valid flow name (1 to 63 of a-z, 0-9, `-`)"),
    );
    None
}

pub(crate) fn policy(report: &mut Report, raw: &Span<RawAfterPolicy>, has_after: bool) -> AfterPolicy {
    let at = At::top(line_of(raw));
    if !has_after {
        report.push(at, "`after_policy` without `after`; add `after:` entries or remove `after_policy`");
    }
    let wait = raw.value.wait.as_ref().and_then(|w| report.duration(at, "after_policy.wait", w));
    let then = match &raw.value.then {
        None => AfterThen::Fail,
        Some(t) => match t.value.trim() {
            "fail" => AfterThen::Fail,
            "skip" => AfterThen::Skip,
            "run" => AfterThen::Run,
            other => {
                let hint = did_you_mean(other, AfterThen::NAMES.iter().copied());
                report.push(
                    at.at(t),
                    format!("unknown `after_policy.then` `{other}`{hint}; use {}", one_of(AfterThen::NAMES)),
                );
                AfterThen::Fail
            }
        },
    };
    if raw.value.then.is_some() && wait.is_none() && raw.value.wait.is_none() {
        report.push(
            at,
            "`after_policy.then` needs `wait`, how long to wait before it applies (e.g. `wait: 4h`)",
        );
    }
    AfterPolicy { wait, then }
}

/// `{flow_succeeded: F}`: alone in its trigger.
pub(crate) fn flow_succeeded(
    report: &mut Report,
    at: At<'_>,
    t: &RawTrigger,
    flow: &Span<String>,
) -> Option<TriggerDef> {
    let others: Vec<&str> = [
        t.cron.as_ref().map(|_| "cron"),
        t.event.as_ref().map(|_| "event"),
        t.message.as_ref().map(|_| "message"),
        t.timezone.as_ref().map(|_| "timezone"),
        t.misfire.as_ref().map(|_| "misfire"),
        t.jitter.as_ref().map(|_| "jitter"),
        t.grace.as_ref().map(|_| "grace"),
        t.catchup_window.as_ref().map(|_| "catchup_window"),
        t.on_paused.as_ref().map(|_| "on_paused"),
        t.max_queued.as_ref().map(|_| "max_queued"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let at = at.at(flow);
    if !others.is_empty() {
        let fields = one_of(&others).replace(" or ", ", ");
        report.push(
            at,
            format!(
                "a `flow_succeeded` trigger takes no other field ({fields}); split it into several triggers"
            ),
        );
        return None;
    }
    let name = upstream_name(report, at, "flow_succeeded", &flow.value)?;
    Some(TriggerDef::FlowSucceeded { flow: name, line: at.line })
}
